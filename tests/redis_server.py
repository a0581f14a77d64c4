"""A real ``redis-server`` (Debian's package) on a free port of 127.0.0.1, for the tests of
``seq2seq serve --redis`` and for benchmarks/serve_load.py: nothing saved to disk, stopped and
started again on the same port on demand."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

__all__ = ["RedisServer", "free_port", "redis_server_binary"]


def redis_server_binary() -> str | None:
    """The ``redis-server`` on PATH (or Debian's), or None."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if shutil.which("/usr/bin/redis-server") else None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``redis-server --port P --save '' --appendonly no`` (started at once).

    Attributes:
        port: its port (kept across :meth:`stop` and :meth:`start`).
        url: ``redis://127.0.0.1:PORT/0``.
    """

    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, timeout: float = 10.0) -> None:
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}: {err}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM and wait (nothing is saved: the data is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

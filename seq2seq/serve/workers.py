"""``seq2seq serve --workers N``: N server processes on one listening socket.

The launcher opens the socket (so a taken port fails once, before anything loads), then
:func:`supervise` starts N worker processes (``python -m seq2seq.serve.workers``: a fresh
interpreter each, no state forked from a parent that may hold torch's threads) that inherit
the socket; each loads its own
engines and runs its own uvicorn on it, and the kernel hands each new connection to whichever
worker accepts it first. Nothing is shared between workers but the socket: keys, rate limits
and translated files are shared through Redis (``--redis``; the CLI requires it with more than
one worker).

The supervisor announces the server once every worker has built its app and is about to
accept (the models then load in each worker, as in one process: ``/ready`` says when). SIGTERM
(or Ctrl-C) reaches every worker as SIGTERM, each finishes the requests it holds (uvicorn's
graceful shutdown, then its batchers' queues), and the supervisor exits once all have. A
worker that fails while starting, or exits with a one-line error (a model that cannot load),
stops the server; one that dies otherwise is replaced. A worker dies with
its supervisor (``PR_SET_PDEATHSIG``), so a killed supervisor leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from seq2seq.core import UserError
from seq2seq.serve.logs import log

__all__ = ["supervise"]


def _die_with_parent() -> None:
    """SIGTERM this process when its parent dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _child(sock_fd: int, report_fd: int) -> None:
    """A worker (``python -m seq2seq.serve.workers SOCK_FD REPORT_FD``, the job as JSON on
    stdin: no pickle): ``target(job, sock=..., ready=...)``; it reports ``ready LINE`` or ``error
    MESSAGE`` on the pipe ``report_fd``."""
    _die_with_parent()
    order = json.loads(sys.stdin.read())
    module, _, name = order["target"].partition(":")
    target = getattr(importlib.import_module(module), name)
    report = os.fdopen(report_fd, "w", buffering=1, encoding="utf-8")
    sock = socket.socket(fileno=sock_fd)

    def say(kind: str, text: str) -> None:
        report.write(f"{kind} {text.replace(chr(10), ' ')}\n")

    try:
        target(order["job"], sock=sock, ready=lambda line: say("ready", line))
    except UserError as e:
        say("error", str(e))
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group
        sys.exit(130)


class _Worker:
    """A worker process and the pipe it reports on (EOF: it has exited)."""

    def __init__(self, target: str, job: dict, sock: socket.socket) -> None:
        read_fd, write_fd = os.pipe()
        sock_fd = sock.fileno()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "seq2seq.serve.workers", str(sock_fd), str(write_fd)],
            stdin=subprocess.PIPE,
            pass_fds=(sock_fd, write_fd),
        )
        os.close(write_fd)
        self.reports = os.fdopen(read_fd, "r", encoding="utf-8")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"target": target, "job": job}).encode())
        self.proc.stdin.close()
        self.ready: str | None = None
        self.error: str | None = None
        self.ended = False

    def fileno(self) -> int:
        return self.reports.fileno()

    def read(self) -> None:
        """Read one report (ready, or an error), or the EOF of an ended worker."""
        line = self.reports.readline()
        if not line:
            self.ended = True
            return
        kind, _, text = line.rstrip("\n").partition(" ")
        if kind == "ready":
            self.ready = text
        else:
            self.error = text

    def close(self) -> None:
        self.reports.close()


def supervise(target: str, job: dict, sock: socket.socket, n: int) -> None:
    """Run ``target(job, sock=sock, ready=callback)`` in ``n`` processes until SIGTERM or
    SIGINT, then let every one finish its requests.

    Args:
        target: ``"MODULE:FUNCTION"``, a module-level function that serves on ``sock`` and
            calls ``ready(line)`` once it is about to accept connections; ``line`` is its
            ``serving ...`` announcement (without the address).
        job: its argument (JSON: the worker is a fresh interpreter, and nothing is unpickled).
        sock: the listening socket.
        n: worker processes.

    Raises:
        UserError: a worker refused its options (its message).
        SystemExit: a worker failed while loading.
        KeyboardInterrupt: stopped by SIGINT (once every worker has finished).
    """
    import selectors

    stopping: list[int] = []
    workers: list[_Worker] = []

    def stop(signum: int, _frame: Any) -> None:
        if not stopping:
            log.info("%s: stopping %d workers (each finishes its requests)",
                     signal.Signals(signum).name, n)  # fmt: skip
        stopping.append(signum)
        for w in workers:
            if w.proc.poll() is None:
                w.proc.terminate()  # SIGTERM: uvicorn's graceful shutdown in each

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        workers.extend(_Worker(target, job, sock) for _ in range(n))
        announced = False
        while not stopping:
            with selectors.DefaultSelector() as sel:
                for w in workers:
                    sel.register(w, selectors.EVENT_READ)
                events = sel.select()
            for key, _ in events:
                key.fileobj.read()
            for i, w in enumerate(workers):
                if not w.ended or stopping:
                    continue
                code = w.proc.wait()
                w.close()
                if w.error is not None:  # a one-line error (a model that cannot load): fatal
                    raise UserError(w.error)
                if w.ready is None:  # failed while starting: the server cannot start
                    raise SystemExit(
                        f"seq2seq serve: a worker exited with {code} while loading the model"
                    )
                log.error("worker %d exited with %s; starting another", w.proc.pid, code)
                workers[i] = _Worker(target, job, sock)
            if not announced and all(w.ready is not None for w in workers):
                announced = True
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                pids = ", ".join(str(w.proc.pid) for w in workers)
                log.info("%s on http://%s:%d with %d workers (pids %s)",
                         workers[0].ready, shown, port, n, pids)  # fmt: skip
    finally:
        for w in workers:
            if w.proc.poll() is None and not stopping:
                w.proc.terminate()
        for w in workers:
            w.proc.wait()
            w.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stopping and stopping[0] == signal.SIGINT:
        raise KeyboardInterrupt


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]))

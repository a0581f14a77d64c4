"""``seq2seq serve`` under careless or hostile clients, through the real HTTP stack (a server
process, raw sockets): request headers are bounded, and a client that goes away mid-body is
one INFO line in the log, not an error with tracebacks."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir
from test_serve_process import ServerProcess

from seq2seq.serve.launcher import MAX_HEADER_BYTES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir: Path = make_model_dir(tmp_path_factory.mktemp("hygiene") / "model", train_steps=0)
    srv = ServerProcess(model_dir)
    end = time.monotonic() + 60  # uvicorn's start-up lines come after the URL: let them pass
    while time.monotonic() < end and not any("startup complete" in x for x in srv.lines):
        time.sleep(0.05)
    yield srv
    srv.stop()


def _exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused before reading it all: its answer is still read below
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks)


def _get_health(pad: int) -> bytes:
    return (
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + b"X-Pad: " + b"a" * pad + b"\r\n\r\n"
    )  # fmt: skip


def test_request_headers_are_bounded(server):
    ok = _exchange(server.port, _get_health(MAX_HEADER_BYTES // 2))
    assert ok.startswith(b"HTTP/1.1 200"), ok[:200]
    # A complete, well-formed request whose one header is 1 MiB: refused (and the connection
    # closed), where an unbounded parser buffers and answers it.
    big = _exchange(server.port, _get_health(1 << 20))
    status = big.split(b"\r\n", 1)[0]
    assert big == b"" or status.split()[1] in (b"400", b"431"), status
    assert b'"status":"ok"' not in big
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200  # still serving


def test_a_client_gone_mid_body_is_one_info_line(server):
    before = len(server.lines)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"text": "a man'
            )
            time.sleep(0.2)  # the server is reading the body when the client leaves
    # Waits (not a timing assertion) for the server to see the three disconnects.
    end = time.monotonic() + 30
    while time.monotonic() < end:
        new = server.lines[before:]
        if sum("disconnected" in line for line in new) >= 3 or any("Traceback" in x for x in new):
            break
        time.sleep(0.1)
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    new = server.lines[before:]
    assert len(new) == 3, "".join(new)
    assert all(line.startswith("INFO:") and "disconnected" in line for line in new), new

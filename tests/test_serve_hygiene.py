"""``seq2seq serve`` under careless or hostile clients, through the real HTTP stack (a server
process, raw sockets): request headers are bounded however they arrive, a request that arrives
too slowly (``--read-timeout``) is answered 408 or closed, and a client that goes away mid-body
is one INFO line in the log, not an error with tracebacks."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir
from test_serve_process import ServerProcess

from seq2seq.serve.http_protocol import MAX_HEADER_BYTES, http_settings

pytestmark = pytest.mark.slow

READ_TIMEOUT = 2  # seconds, the test server's --read-timeout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir: Path = make_model_dir(tmp_path_factory.mktemp("hygiene") / "model", train_steps=0)
    srv = ServerProcess(model_dir, "--read-timeout", str(READ_TIMEOUT))
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


def _has_httptools() -> bool:
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


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
    if big and _has_httptools():
        assert status.split()[1] == b"431", status
    assert b'"status":"ok"' not in big
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200  # still serving


def test_a_head_with_a_large_body_in_one_read_is_not_refused(server):
    # The bound is on the line and headers only: a 200 KB body arriving in the same reads as
    # the head must be translated, not counted against the head's bound.
    # (JSON whitespace: the text itself stays within the server's limits.)
    body = ('{"text": "a man",' + " " * 200_000 + '"method": "greedy"}').encode()
    request = (
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip
    answer = _exchange(server.port, request)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:400]


def test_a_head_over_the_bound_in_one_write_is_refused(server):
    # The head arrives whole in one write (and one read): it is measured as it is parsed.
    for pad in (40_000, 100_000):
        answer = _exchange(server.port, _get_health(pad))
        status = answer.split(b"\r\n", 1)[0]
        assert status.split()[1:2] == [b"431" if _has_httptools() else b"400"], status
        assert b'"status":"ok"' not in answer
    just = _exchange(server.port, _get_health(MAX_HEADER_BYTES - 200))
    assert just.startswith(b"HTTP/1.1 200"), just[:200]


def _until_closed(sock: socket.socket, send: bytes, *, every: float, most: float) -> bytes:
    """Send ``send`` a byte every ``every`` s (at most ``most`` s); what the server answered
    once it closed the connection (b"..." ends with the close)."""
    end = time.monotonic() + most
    sock.settimeout(every)
    got = []
    for byte in send:
        if time.monotonic() > end:
            break
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            break
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            return b"".join(got) + b"<closed>"
        got.append(chunk)
    sock.settimeout(30)
    try:
        while chunk := sock.recv(65536):
            got.append(chunk)
    except (TimeoutError, ConnectionResetError):
        return b"".join(got) + b"<open>"
    return b"".join(got) + b"<closed>"


def test_a_head_that_trickles_in_is_answered_408_and_closed(server):
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        # one byte every 0.1 s: the head would take 24 s; the server waits READ_TIMEOUT
        answer = _until_closed(sock, head, every=0.1, most=10 * READ_TIMEOUT)
    assert answer.startswith(b"HTTP/1.1 408") and answer.endswith(b"<closed>"), answer
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200


def test_a_connection_that_sends_nothing_is_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.settimeout(10 * READ_TIMEOUT)
        try:
            answer = sock.recv(65536)
        except TimeoutError:
            answer = b"<still open>"
    assert answer.startswith(b"HTTP/1.1 408") or answer == b"", answer


def test_a_body_that_trickles_in_is_closed(server):
    before = len(server.lines)
    head = (
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        answer = _until_closed(sock, b'{"text": "' + b"a" * 900, every=0.1, most=10 * READ_TIMEOUT)
    assert answer.endswith(b"<closed>"), answer
    end = time.monotonic() + 30
    while time.monotonic() < end and not any("disconnected" in x for x in server.lines[before:]):
        time.sleep(0.05)
    new = server.lines[before:]
    assert any("did not arrive within" in x for x in new), new
    assert any("disconnected" in x for x in new) and not any("Traceback" in x for x in new), new


def test_the_bounds_hold_without_httptools(tmp_path, monkeypatch):
    """A server whose uvicorn cannot import httptools runs the bounded h11."""
    fake = tmp_path / "no_httptools" / "httptools"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no httptools here')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    settings = http_settings(1234, 5)
    assert settings["http"].__name__ == "BoundedHttpToolsProtocol" or not _has_httptools()
    model_dir = make_model_dir(tmp_path / "model", train_steps=0)
    srv = ServerProcess(model_dir, "--read-timeout", str(READ_TIMEOUT))
    try:
        over = _exchange(srv.port, _get_health(40_000))
        assert over.split(b"\r\n", 1)[0].split()[1:2] == [b"400"], over[:200]
        fine = _exchange(srv.port, _get_health(MAX_HEADER_BYTES // 2))
        assert fine.startswith(b"HTTP/1.1 200"), fine[:200]
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            answer = _until_closed(sock, b"GET /health HTTP/1.1\r\n" + b"X: y\r\n" * 100,
                                   every=0.1, most=10 * READ_TIMEOUT)  # fmt: skip
        assert answer.endswith(b"<closed>"), answer
    finally:
        srv.stop()


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

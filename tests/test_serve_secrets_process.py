"""``seq2seq serve`` with API keys, as a user runs it (a server process, its real log): no key
and no download token reaches the log, and a key file that breaks while the server runs is a
503 with ``Retry-After`` for keyed requests only, logged once."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
from factories import make_model_dir
from test_serve_process import ServerProcess

from seq2seq.serve.logs import key_label, redact

pytestmark = pytest.mark.slow

GOOD = {"source": "en", "target": "de"}


def keys(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "keys", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    model = make_model_dir(root / "model", train_steps=0)
    db = root / "keys.db"
    key = keys("add", "--db", str(db))
    srv = ServerProcess(model, "--api-keys", str(db), access_log=True)
    end = time.monotonic() + 60  # uvicorn's start-up lines come after the URL: let them pass
    while time.monotonic() < end and not any("startup complete" in x for x in srv.lines):
        time.sleep(0.05)
    yield srv, db, key
    srv.stop()


def _logged(srv: ServerProcess, before: int, *, lines: int) -> list[str]:
    """The log lines after ``before``, once at least ``lines`` of them came (or 30 s); the
    access-log line of the ``GET /ready`` that ServerProcess waited for is left out (it may
    come after ``before``)."""
    end = time.monotonic() + 30

    def got() -> list[str]:
        return [line for line in srv.lines[before:] if '"GET /ready ' not in line]

    while time.monotonic() < end and len(got()) < lines:
        time.sleep(0.05)
    return got()


def test_keys_and_download_tokens_never_reach_the_log(served):
    srv, _db, key = served
    before = len(srv.lines)
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        ok = client.post(f"/translate?api_key={key}", json={"q": "A dog.", **GOOD})
        bad = client.post("/translate?api_key=not-the-key&x=1", json={"q": "A dog.", **GOOD})
        up = client.post(
            f"/translate_file?api_key={key}",
            files={"file": ("a.txt", b"A dog runs.\n", "text/plain")},
            data=GOOD,
        )
        url = up.json()["translatedFileUrl"]
        token = url.split("/download_file/")[1].split("/")[0]
        got = client.get(url)
        missing = client.get(url.replace(token, token[::-1]))
    assert (ok.status_code, bad.status_code, up.status_code) == (200, 403, 200)
    assert (got.status_code, missing.status_code) == (200, 404)
    log = "".join(_logged(srv, before, lines=5))
    assert log.count('HTTP/1.1"') == 5, log  # the five access-log lines, all here
    for secret in (key, "not-the-key", token, token[::-1]):
        assert secret not in log, log
    # what the log shows instead: /metrics' label of the key, and the token's
    assert f"api_key=<sha256:{key_label(key)}>" in log
    assert f"/download_file/<sha256:{key_label(token)}>/a.de.txt" in log
    assert "&x=1" in log  # the rest of the query string stays


def test_redact_finds_keys_however_the_query_spells_them():
    key = "Ab-c_d.e~f"
    shown = f"<sha256:{key_label(key)}>"
    assert redact(f'"GET /x?api_key={key}&q=1 HTTP/1.1" 200') == (
        f'"GET /x?api_key={shown}&q=1 HTTP/1.1" 200'
    )
    assert redact(f"/x?q=1&API%5Fkey={key}") == f"/x?q=1&API%5Fkey={shown}"
    assert redact("/x?api_key=Ab%2Dc_d.e~f") == f"/x?api_key={shown}"  # decoded, as served
    assert redact("/download_file/TOKEN/a.de.txt") == (
        f"/download_file/<sha256:{key_label('TOKEN')}>/a.de.txt"
    )
    assert redact("nothing secret here") == "nothing secret here"


def test_a_broken_key_file_is_a_503_for_keyed_requests_only_and_logged_once(served):
    srv, db, key = served
    saved = db.read_bytes()
    before = len(srv.lines)
    try:
        db.write_bytes(b"this is not an SQLite database" * 100)  # broken in place
        time.sleep(1.2)  # the server looks at the file again at most once a second
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            keyed = [
                client.post("/translate", json={"q": "A dog.", "api_key": key, **GOOD})
                for _ in range(3)
            ]
            keyless = client.post("/translate", json={"q": "A dog.", **GOOD})
            health = client.get("/health")
    finally:
        db.write_bytes(saved)
    for answer in keyed:
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        error = answer.json()["error"]
        assert str(db) not in error and "keys.db" not in error and "Error" not in error, error
    assert keyless.status_code == 200 and health.status_code == 200
    log = _logged(srv, before, lines=6)
    causes = [line for line in log if "API key" in line and "WARNING" in line]
    assert len(causes) == 1, log  # the cause once, not once a request
    # repaired in place: keys work again within a second or two
    end = time.monotonic() + 10
    while True:
        again = httpx.post(
            f"{srv.url}/translate", json={"q": "A dog.", "api_key": key, **GOOD}, timeout=60
        )
        if again.status_code == 200 or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert again.status_code == 200, again.text


def test_a_locked_key_file_is_a_503_and_health_still_answers(served):
    """(Reading the key file runs off the event loop: /health answers while it is locked.)"""
    srv, db, key = served
    import sqlite3

    con = sqlite3.connect(db, timeout=1)
    try:
        con.execute("BEGIN EXCLUSIVE")  # another process holds the file locked
        con.execute("INSERT INTO api_keys VALUES ('held-key', NULL)")
        time.sleep(1.2)
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            locked = client.post("/translate", json={"q": "A dog.", "api_key": key, **GOOD})
            health = client.get("/health")
    finally:
        con.rollback()
        con.close()
    assert health.status_code == 200
    assert locked.status_code == 503, locked.text
    assert "locked" not in locked.json()["error"] and "Error" not in locked.json()["error"]

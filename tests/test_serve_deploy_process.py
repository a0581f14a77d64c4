"""``seq2seq serve`` deployed as a user runs it: a model directory holding an int8 CTranslate2
export is served with it, keys from ``seq2seq keys`` (added and removed while it runs), and the
web page in a headless browser with its language selectors and a key (skips without chromium).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir
from test_serve_process import ServerProcess, _chromium

pytestmark = pytest.mark.slow

GOOD = {"source": "en", "target": "de"}


def keys(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "keys", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from seq2seq.export import export_model

    root = tmp_path_factory.mktemp("deployed")
    model = make_model_dir(root / "model", train_steps=150)
    export_model(
        model, model / "export" / "ctranslate2-int8", fmt="ctranslate2", quantization="int8"
    )
    db = root / "keys.db"
    added = keys("add", "--db", str(db))
    assert added.returncode == 0, added.stderr
    key = added.stdout.splitlines()[-1]
    srv = ServerProcess(model, "--api-keys", str(db), "--require-api-key")
    yield srv, db, key
    srv.stop()


def test_the_held_export_is_served_and_said_so(deployed):
    srv, _db, key = deployed
    assert any("ctranslate2 engine" in line for line in srv.lines), srv.lines
    (model,) = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["models"]
    assert model["engine"] == "ctranslate2" and model["path"].endswith("ctranslate2-int8")
    assert model["api_keys"] == {"enabled": True, "required": True}


def _until(request, status: int, within: float = 5.0):
    """``request()`` every 0.2 s until it answers ``status`` (a server re-reads its key file
    at most once a second) or ``within`` seconds pass; the last answer."""
    deadline = time.monotonic() + within
    while True:
        answer = request()
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def test_keys_from_the_command_line_apply_while_it_runs(deployed):
    srv, db, key = deployed
    url = f"{srv.url}/translate"
    assert httpx.post(url, json={"q": "A dog.", **GOOD}, timeout=30).status_code == 403
    assert (
        httpx.post(url, json={"q": "A dog.", "api_key": key, **GOOD}, timeout=30).status_code == 200
    )
    added = keys("add", "--db", str(db), "--req-limit", "1")
    new = added.stdout.splitlines()[-1]
    assert new in keys("list", "--db", str(db)).stdout
    first = _until(
        lambda: httpx.post(url, data={"q": "A dog.", "api_key": new, **GOOD}, timeout=30), 200
    )
    second = httpx.post(url, data={"q": "A dog.", "api_key": new, **GOOD}, timeout=30)
    assert (first.status_code, second.status_code) == (200, 429)
    assert second.json() == {"error": "Slowdown: 1 per 1 minute"}
    assert keys("remove", new, "--db", str(db)).returncode == 0
    gone = _until(
        lambda: httpx.post(url, json={"q": "A dog.", "api_key": new, **GOOD}, timeout=30), 403
    )
    assert gone.status_code == 403 and gone.json() == {"error": "Invalid API key"}
    bad = keys("remove", new, "--db", str(db))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_the_page_fills_its_selectors_and_translates_with_a_key(deployed):
    srv, _db, key = deployed
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless browser installed (apt-get install chromium; .ci/run does)")
    text = "A man runs in the park."
    want = httpx.post(
        f"{srv.url}/translate", json={"q": text, "api_key": key, **GOOD}, timeout=30
    ).json()["translatedText"]
    url = f"{srv.url}/?" + urllib.parse.urlencode({"q": text, "api_key": key})
    with tempfile.TemporaryDirectory(prefix="seq2seq-chromium-") as profile:
        r = subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=30000",
                "--dump-dom", url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    dom = r.stdout
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<div id="translation"[^>]*data-state="done"[^>]*>(.*?)</div>', dom, re.S)
    assert m, dom[-3000:]
    assert m.group(1) == html.escape(want, quote=False)
    source = re.search(r'<select id="from">(.*?)</select>', dom, re.S).group(1)
    target = re.search(r'<select id="to">(.*?)</select>', dom, re.S).group(1)
    assert re.findall(r'value="([^"]+)"', source) == ["auto", "en"]
    assert re.findall(r'value="([^"]+)"', target) == ["de"]
    assert re.search(r'<label id="key-label">', dom)  # shown: the server takes keys


def test_an_ensemble_starts_from_the_command_line(tmp_path):
    a = make_model_dir(tmp_path / "a", train_steps=0)
    b = Path(tmp_path / "b")
    shutil.copytree(a, b)
    srv = ServerProcess([a, b])
    try:
        (model,) = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["models"]
        assert model["members"] == [str(a.resolve()), str(b.resolve())]
        assert model["engine"] == "torch"
        r = httpx.post(f"{srv.url}/translate", json={"q": "A dog.", **GOOD}, timeout=30)
        assert r.status_code == 200
    finally:
        assert srv.stop() == 0

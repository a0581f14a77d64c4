"""``seq2seq serve`` as a user runs it: a real server process on a free port of 127.0.0.1.

SIGTERM with requests in flight (every one answered, then a clean exit), the CLI's one-line
errors, and the web page in a real headless browser (Debian's chromium; the test skips with
the reason where none is installed).
"""

from __future__ import annotations

import ast
import html
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir

from seq2seq.decode.paragraphs import split_text
from seq2seq.decode.translator import Translator

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man runs in the park.",
    "Two dogs play with a red ball.",
    "A young woman sits on a bench near the water.",
    "The old car is black.",
    "Three children walk under the big tree.",
    "A small cat jumps on the house.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("serve") / "model", train_steps=150)


@pytest.fixture(scope="module")
def reference(model_dir) -> Translator:
    return Translator.load(model_dir)


class ServerProcess:
    """``seq2seq serve MODEL_DIR --port 0 ...`` in a subprocess; its log is read as it comes."""

    def __init__(self, model_dir: Path | list[Path], *args: str, access_log: bool = False) -> None:
        dirs = [str(d) for d in (model_dir if isinstance(model_dir, list) else [model_dir])]
        cmd = [sys.executable, "-m", "seq2seq.cli", "serve", *dirs, "--port", "0"]
        cmd += ["--threads", "1", *([] if access_log else ["--no-access-log"]), *args]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_for_url(timeout=90)
        self._wait_until_ready(timeout=90)  # the models load after the port opens

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def _wait_for_url(self, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self._queue.get(timeout=max(end - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                break
            m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if m:
                return m.group(1)
        self.proc.kill()
        raise AssertionError("the server did not start:\n" + "".join(self.lines))

    def _wait_until_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/ready", timeout=10).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError("the server did not get ready:\n" + "".join(self.lines))

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(model_dir):
    srv = ServerProcess(model_dir)
    yield srv
    srv.stop()


def translate(url: str, q, **fields) -> httpx.Response:
    body = {"q": q, "source": "en", "target": "de", **fields}
    return httpx.post(f"{url}/translate", json=body, timeout=60)


def test_a_running_server_answers_like_libretranslate(server, reference):
    with httpx.Client(base_url=server.url, timeout=60) as client:  # keep-alive connection
        langs = client.get("/languages").json()
        assert [lang["code"] for lang in langs] == ["en", "de"]
        for sentence in SENTENCES[:3]:
            r = client.post("/translate", json={"q": sentence, "source": "en", "target": "de"})
            assert r.json() == {"translatedText": reference.translate([sentence])[0]}
        r = client.post("/translate", data={"q": SENTENCES[3], "source": "en", "target": "de"})
        assert r.json() == {"translatedText": reference.translate(SENTENCES[3:4])[0]}
        assert client.get("/health").json()["status"] == "ok"


def test_continuous_batching_is_opt_in_on_the_command_line(server, model_dir, reference):
    """Static batches by default (faster on 2 cores: docs/benchmarks.md); ``--continuous`` turns the
    continuous search on, and its answers are the offline ones too."""

    def continuous(url: str) -> bool:
        (model,) = httpx.get(f"{url}/v1/models").json()["models"]
        return model["batching"]["continuous"]

    assert continuous(server.url) is False
    srv = ServerProcess(model_dir, "--continuous")
    try:
        assert continuous(srv.url) is True
        r = translate(srv.url, SENTENCES[:3])
        assert r.json() == {"translatedText": reference.translate(SENTENCES[:3])}
        assert httpx.get(f"{srv.url}/health").json()["stream_steps"] > 0  # it ran the search
    finally:
        assert srv.stop() == 0


def test_sigterm_finishes_the_requests_in_flight_then_exits(model_dir, reference):
    # Requests wait up to 3 s in the queue for company, so they are surely in flight when
    # SIGTERM arrives; none may be lost, and no new connection is accepted meanwhile.
    srv = ServerProcess(model_dir, "--max-wait-ms", "3000")
    requests = [SENTENCES[i : i + 1 + i % 2] for i in range(6)]
    answers: dict[int, httpx.Response | BaseException] = {}

    def send(i: int) -> None:
        try:
            answers[i] = translate(srv.url, requests[i])
        except BaseException as e:  # reported below
            answers[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while httpx.get(f"{srv.url}/health").json()["in_flight_requests"] < len(requests):
        assert time.monotonic() < deadline, "the requests never reached the server"
        time.sleep(0.05)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert srv.proc.poll() is None  # still finishing the queued requests
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{srv.url}/health", timeout=5)
    for t in threads:
        t.join(timeout=60)
    assert srv.proc.wait(timeout=60) == 0, "".join(srv.lines)
    want = dict(zip(SENTENCES, reference.translate(SENTENCES)))
    for i, req in enumerate(requests):
        answer = answers[i]
        assert isinstance(answer, httpx.Response), repr(answer)
        assert answer.status_code == 200
        assert answer.json()["translatedText"] == [want[s] for s in req]
    log = "".join(srv.lines)
    assert "Traceback" not in log and "Shutting down" in log


def test_a_taken_port_is_a_one_line_error(model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "seq2seq.cli", "serve", str(model_dir), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 2
    assert re.fullmatch(
        rf"seq2seq serve: error: cannot listen on 127\.0\.0\.1:{port}: .*in use\n", r.stderr
    )


def test_a_missing_model_directory_is_a_one_line_error(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "serve", str(tmp_path / "nope"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "seq2seq serve: error:" in r.stderr
    assert "nope" in r.stderr


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def test_the_web_page_shows_the_translation_and_heatmap_in_a_browser(server, reference):
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless browser installed (apt-get install chromium; .ci/run does)")
    text = f"{SENTENCES[0]} {SENTENCES[1]}\n{SENTENCES[2]}"
    url = f"{server.url}/?" + urllib.parse.urlencode({"q": text, "attention": "1"})
    with tempfile.TemporaryDirectory(prefix="seq2seq-chromium-") as profile:
        r = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=30000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    dom = r.stdout
    assert r.returncode == 0, r.stderr[-2000:]
    t = reference.translate(SENTENCES[:3])
    want = html.escape(f"{t[0]} {t[1]}\n{t[2]}", quote=False)
    m = re.search(r'<div id="translation"[^>]*data-state="done"[^>]*>(.*?)</div>', dom, re.S)
    assert m, dom[-3000:]
    assert m.group(1) == want
    # One heatmap per sentence, one row per target piece.
    tables = re.findall(r'<table class="heatmap">.*?</table>', dom, re.S)
    assert len(tables) == 3
    n_rows = [table.count("<tr>") - 1 for table in tables]  # minus the header row
    pieces = [len(reference.tokenizer.encode_tgt([x])[0]) + 1 for x in t]  # + </s>
    assert n_rows == pieces


def _serving_section() -> str:
    """The examples at the top of docs/serving.md, before its first section."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    return page[: page.index("\n## ")]


def test_the_readme_examples_work_as_written(server, reference):
    section = _serving_section()
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "http://127.0.0.1:8080" in python
    r = subprocess.run(
        [sys.executable, "-c", python.replace("http://127.0.0.1:8080", server.url)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    sentences = re.search(r"print\(translate\((\[.*?\])\)\)", python).group(1)
    assert r.stdout == f"{reference.translate(ast.literal_eval(sentences))}\n"
    if shutil.which("curl") is None:
        return
    sh = re.search(r"```sh\n(curl .*?)```", section, re.S).group(1).replace("\\\n", " ")
    for line in sh.splitlines():
        if not line.startswith("curl "):
            continue
        command = line.split("  #")[0].replace("http://127.0.0.1:8080", server.url)
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        q = re.search(r"""(?:"q": "|q=')(.*?)['"]""", command).group(1)
        want = " ".join(reference.translate(split_text(q, language="en").sentences))
        assert answer["translatedText"] == want
        if "alternatives=2" in command:
            assert isinstance(answer["alternatives"], list) and len(answer["alternatives"]) <= 2

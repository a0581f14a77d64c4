"""Work that grows with a request's size stays off the server's event loop and linear: an HTML
run is rebuilt in time linear in its inline elements (counted in executed lines, not timed),
a run with more than :data:`~seq2seq.documents.html.MAX_INLINE_ELEMENTS` is a 400, and parsing
HTML, uploads and the key file runs on worker threads. (``benchmarks/serve_stall.py`` measures
``/health`` while one client sends the worst request the limits allow.)"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest
from factories import make_model_dir, run_app

import seq2seq.documents.html as html_module
from seq2seq.decode.translator import Translator
from seq2seq.documents.html import MAX_INLINE_ELEMENTS, HtmlDocument, RunTranslation
from seq2seq.serve.app import create_app
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.keys import KeyStore, KeyTable
from seq2seq.serve.served_model import model_info

GOOD = {"source": "en", "target": "de"}


def _lines_to_rebuild(n: int) -> int:
    """Lines of seq2seq/documents/html.py executed to rebuild a run of ``n`` inline elements."""
    markup = "<p>" + "one <b>two</b> " * n + "</p>"
    doc = HtmlDocument(markup)
    translations = []
    for text in doc.texts:
        words = text.split()
        pairs = [(i, len(words) - 1 - i) for i in range(len(words))]  # reversed: spans move
        translations.append(RunTranslation([(text, text.upper(), pairs)]))
    source = html_module.__file__
    lines = 0

    def trace(frame, event, _arg):
        nonlocal lines
        if frame.f_code.co_filename != source:
            return None
        if event == "line":
            lines += 1
        return trace

    sys.settrace(trace)
    try:
        doc.apply(translations)
    finally:
        sys.settrace(None)
    return lines


def test_rebuilding_a_run_is_linear_in_its_inline_elements():
    small, large = _lines_to_rebuild(200), _lines_to_rebuild(800)
    # 4x the elements: about 4x the lines when linear, 16x when quadratic
    assert large / small < 6, (small, large)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("loop") / "model", train_steps=0)


def _serve(model_dir, body, **config):
    translator = Translator.load(model_dir)
    info = model_info(translator, model_dir, "torch")
    return run_app(create_app(translator, info=info, config=ServeConfig(**config)), body)


def test_too_many_inline_elements_in_a_paragraph_is_a_400(model_dir):
    over = "<p>" + "a <b>b</b> " * (MAX_INLINE_ELEMENTS + 1) + "</p>"
    within = "<p>" + "a <b>b</b> " * 3 + "</p>"

    async def body(client):
        return [
            await client.post("/translate", json={"q": q, "format": "html", **GOOD})
            for q in (over, within)
        ]

    refused, fine = _serve(model_dir, body, max_chars=100_000)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == (
        f"q: a paragraph has more than {MAX_INLINE_ELEMENTS:,} inline elements "
        "(the limit per paragraph)"
    )
    assert fine.status_code == 200, fine.text


def test_parsing_and_the_key_file_run_off_the_event_loop(model_dir, tmp_path, monkeypatch):
    seen: dict[str, set[str]] = {}

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            seen.setdefault(name, set()).add(threading.current_thread().name)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(HtmlDocument, "__init__", spy("html parse", HtmlDocument.__init__))
    monkeypatch.setattr(HtmlDocument, "apply", spy("html rebuild", HtmlDocument.apply))
    import seq2seq.serve.files as files

    monkeypatch.setattr(files, "_parse_upload", spy("upload parse", files._parse_upload))
    monkeypatch.setattr(KeyTable, "_read", spy("key file", KeyTable._read))
    db = tmp_path / "keys.db"
    key = KeyStore(db, create=True).add()

    async def body(client):
        loop_thread = threading.current_thread().name
        seen.clear()  # (the key table's first read is in create_app, before the loop runs)
        await asyncio.sleep(1.1)  # the key file is due for a check
        answers = [
            await client.post(
                "/translate", json={"q": "<p>A <b>dog</b>.</p>", "format": "html", **GOOD}
            ),
            await client.post(
                "/translate_file",
                data=GOOD,
                files={"file": ("a.html", b"<p>A <b>dog</b>.</p>")},
            ),
            await client.post("/translate", json={"q": "A dog.", "api_key": key, **GOOD}),
        ]
        return loop_thread, answers

    loop_thread, answers = _serve(model_dir, body, api_keys=str(db))
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert set(seen) == {"html parse", "html rebuild", "upload parse", "key file"}, seen
    for name, threads in seen.items():
        assert loop_thread not in threads, (name, threads)

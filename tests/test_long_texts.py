"""Long texts lose no sentence: a 5,000-character paragraph is cut with the Moses rules
(seq2seq.decode.paragraphs) and translated sentence by sentence, by ``seq2seq translate`` and by
the server, with an echo engine (every sentence must come back exactly) and a tiny model."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from factories import WORDS, make_model_dir, run_app

from seq2seq.data import Tokenizer
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.paragraphs import split_text, translate_lines
from seq2seq.decode.search_base import Hypothesis
from seq2seq.decode.translator import Translator
from seq2seq.serve.app import create_app
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.served_model import model_info


class EchoEngine:
    """Each source as its own translation: a lost, doubled or moved sentence shows."""

    def translate_ids(self, src, opts, constraints=None):
        return [[Hypothesis(tokens=list(s), score=0.0, token_scores=[0.0] * len(s))] for s in src]


def paragraph(chars: int, seed: int = 0) -> list[str]:
    """Sentences of the tiny vocabulary, together at least ``chars`` characters."""
    rng = random.Random(seed)
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
        out.append(
            " ".join(words).capitalize() + rng.choice([".", "!"])
        )  # no "?" in the vocabulary
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("long") / "model", train_steps=150)


@pytest.fixture(scope="module")
def echo(model_dir) -> Translator:
    real = Translator.load(model_dir)
    return Translator(
        EchoEngine(),
        Tokenizer.load(model_dir),
        max_src_positions=64,
        opts=SearchOptions(method="greedy"),
        cfg=real.cfg,
    )


def test_a_5000_character_paragraph_keeps_every_sentence(echo):
    sentences = paragraph(5000)
    text = " ".join(sentences)
    assert len(text) >= 5000 and len(sentences) > 100
    lines = ["A short line.", text, "", "  Two. Sentences here!"]
    out = translate_lines(echo, lines, split="auto")
    # only the line that does not fit is cut: the others are translated whole, as before
    assert out == ["A short line.", text, "", "Two. Sentences here!"]
    cut = translate_lines(echo, lines, split="always")
    assert cut == ["A short line.", text, "", "  Two. Sentences here!"]  # indentation kept
    truncated: list[tuple[int, int]] = []
    whole = translate_lines(
        echo, lines, split="never", on_truncated=lambda i, n: truncated.append((i, n))
    )
    assert [i for i, _ in truncated] == [2] and len(whole[1]) < len(text) // 10  # what it costs


def test_languages_without_rules_fall_back_to_english_rules_and_unspaced_ends():
    assert split_text("我爱你。你好吗？他说：「好。」然后走了！", language="zh").sentences == [
        "我爱你。",
        "你好吗？",
        "他说：「好。」",
        "然后走了！",
    ]
    assert split_text("नमस्ते। आप कैसे हैं? ठीक।", language="hi").sentences == [
        "नमस्ते।",
        "आप कैसे हैं?",
        "ठीक।",
    ]
    # "xx" has no rules of its own: the English ones ("Dr." does not end a sentence)
    assert split_text("Dr. Who is here. So am I!", language="xx").sentences == [
        "Dr. Who is here.",
        "So am I!",
    ]


def test_the_server_keeps_every_sentence_and_every_line(echo, model_dir):
    sentences = paragraph(5000, seed=1)
    text = "Title\n\n" + " ".join(sentences) + "\n  Big one. Really!\n"
    info = model_info(Translator.load(model_dir), model_dir, "torch")
    app = create_app(echo, info=info, config=ServeConfig(max_sentences=1000))

    async def body(client):
        native = await client.post("/v1/translate", json={"text": text, "scores": True})
        upload = await client.post(
            "/translate_file",
            files={"file": ("a.txt", text.encode())},
            data={"source": "en", "target": "de"},
        )
        return native, await client.get(upload.json()["translatedFileUrl"])

    native, file = run_app(app, body)
    assert native.status_code == 200, native.text
    got = native.json()["translations"][0]
    assert [s["source"] for s in got["sentences"]][1:-2] == sentences  # sentences in ...
    want = "Title\n\n" + " ".join(sentences) + "\n  Big one. Really!\n"
    assert got["text"] == want and file.text == want  # ... = sentences out, lines kept


def _translate(*args: str, stdin: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEQ2SEQ_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "translate", *args],
        input=stdin.encode(),
        capture_output=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_the_cli_translates_a_long_line_sentence_by_sentence(model_dir, tmp_path):
    translator = Translator.load(model_dir)
    sentences = paragraph(600, seed=2)
    text = f"Two people.\n{' '.join(sentences)}\n\nA red ball.\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    r = _translate(str(model_dir), "-i", str(tmp_path / "in.txt"), stdin="")
    assert r.returncode == 0, r.stderr.decode()
    assert b"truncated" not in r.stderr
    out = r.stdout.decode().split("\n")
    assert len(out) == 5 and out[2] == "" and out[4] == ""
    assert out[1] == " ".join(translator.translate(sentences))  # each sentence on its own
    assert out[0] == translator.translate(["Two people."])[0]
    r = _translate(str(model_dir), "--split-sentences", "never", stdin=text)
    assert b"<stdin>:2:" in r.stderr and b"truncated" in r.stderr
    r = _translate(str(model_dir), "--split-sentences", "always", "--scores", stdin=text)
    assert r.returncode == 2 and b"--split-sentences always gives plain text" in r.stderr

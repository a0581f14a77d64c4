"""Constrained decoding through the Translator, the engines and `seq2seq translate`, on a tiny
model trained in the fixture (the copy task of tests/factories.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from factories import WORDS, make_model_dir, synthetic_pairs

from seq2seq.core.errors import UserError
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.stream import LineConstraints
from seq2seq.decode.terminology import Terminology
from seq2seq.decode.translator import Translator


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("trained") / "model", train_steps=150)


def holds(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def random_phrases(rng: random.Random, k: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 2))) for _ in range(k)]


class Recorder:
    """Wraps an engine; keeps the hypotheses it returns (tokens), per sentence."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.hyps: list = []

    def translate_ids(self, src, opts, constraints=None):
        out = self.engine.translate_ids(src, opts, constraints=constraints)
        self.hyps.extend(out)
        return out


def test_hundreds_of_sentences_hold_every_constraint_batched_equals_alone(trained_dir: Path):
    translator = Translator.load(trained_dir, beam_size=4, nbest=2, max_tokens=200)
    rng = random.Random(0)
    sentences = [s for s, _ in synthetic_pairs(300, seed=7)]
    constraints = [random_phrases(rng, rng.randint(1, 3)) for _ in sentences]
    ordered = False
    out = translator.translate_nbest(sentences, constraints=constraints, ordered=ordered)
    tok = translator.tokenizer
    for sentence, phrases, entries in zip(sentences, constraints, out):
        assert len(entries) == 2
        for t in entries:
            ids = tok.encode_tgt([t.text])[0]  # the text re-encodes to the pieces searched
            for p in phrases:
                assert p in t.text, (sentence, phrases, t.text)
                assert holds(ids, tok.encode_tgt([p])[0]), (t.text, p)
    # One at a time: the same outputs and scores (batching pads sources differently).
    for i in range(0, 300, 10):
        (alone,) = translator.translate_nbest([sentences[i]], constraints=[constraints[i]])
        assert [t.text for t in alone] == [t.text for t in out[i]]
        assert [t.score for t in alone] == pytest.approx([t.score for t in out[i]], abs=1e-4)


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_ordered_constraints_hold_in_order(trained_dir: Path, method: str):
    translator = Translator.load(trained_dir, method=method)
    rng = random.Random(1)
    sentences = [s for s, _ in synthetic_pairs(60, seed=8)]
    constraints = [random_phrases(rng, 2) for _ in sentences]
    out = translator.translate(sentences, constraints=constraints, ordered=True)
    for phrases, text in zip(constraints, out):
        first = text.find(phrases[0])
        assert first >= 0 and text.find(phrases[1], first + len(phrases[0])) >= 0, (
            phrases,
            text,
        )


def test_prefix_starts_the_output_in_one_pass_and_avoid_is_never_output(trained_dir: Path):
    translator = Translator.load(trained_dir)
    sentences = [s for s, _ in synthetic_pairs(80, seed=9)]
    rng = random.Random(2)
    prefixes = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) for _ in sentences]
    out = translator.translate(sentences, prefix=prefixes)
    for p, text in zip(prefixes, out):
        assert text.startswith(p), (p, text)
    # The copy model would output the source; avoiding its second word changes that.
    avoid = [[s.split()[1]] for s in sentences]
    out = translator.translate(sentences, avoid=avoid)
    tok = translator.tokenizer
    for a, text in zip(avoid, out):
        assert not holds(tok.encode_tgt([text])[0], tok.encode_tgt(a)[0]), (a, text)


def test_prefix_is_decoded_in_one_forward_pass(trained_dir: Path, monkeypatch):
    translator = Translator.load(trained_dir, method="greedy")
    model = translator.engine.model
    widths = []
    original = model.decode_step

    def spy(prefix, state, **kw):
        widths.append(prefix.size(1) - state.position)
        return original(prefix, state, **kw)

    monkeypatch.setattr(model, "decode_step", spy)
    (text,) = translator.translate(["Two dogs play"], prefix=["two dogs play on the"])
    n_prefix = len(translator.tokenizer.encode_tgt(["two dogs play on the"])[0])
    assert text.startswith("two dogs play on the")
    assert widths[0] == n_prefix + 1  # BOS and the whole prefix at once
    assert all(w == 1 for w in widths[1:])


@pytest.mark.parametrize("method", ["beam", "greedy", "sample"])
def test_every_option_gives_the_same_output_without_the_kv_cache(trained_dir: Path, method):
    cached = Translator.load(trained_dir, method=method)
    uncached = Translator.load(trained_dir, engine="torch-nocache", method=method)
    sentences = [s for s, _ in synthetic_pairs(30, seed=10)]
    rng = random.Random(3)
    kw = dict(prefix=[rng.choice(WORDS) for _ in sentences])
    if method != "sample":
        kw["constraints"] = [random_phrases(rng, 2) for _ in sentences]
    used = [" ".join([p, *c]).split() for p, c in zip(kw["prefix"], kw.get("constraints", []))]
    used += [[p] for p in kw["prefix"][len(used) :]]
    kw["avoid"] = [[rng.choice([w for w in WORDS if w not in u])] for u in used]
    a = cached.translate_nbest(sentences, **kw)
    b = uncached.translate_nbest(sentences, **kw)
    assert [x[0].text for x in a] == [x[0].text for x in b]
    assert [x[0].score for x in a] == pytest.approx([x[0].score for x in b], abs=1e-4)


def test_terminology_becomes_constraints(trained_dir: Path, tmp_path: Path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tcat bench\nred ball\tgreen car\n", encoding="utf-8")
    translator = Translator.load(trained_dir)
    out = translator.translate(
        ["A dog sits", "The red ball", "Dogs run"], terminology=Terminology.load(terms)
    )
    assert "cat bench" in out[0]
    assert "green car" in out[1]
    assert "cat bench" not in out[2]  # "Dogs" is not the term "dog"


def test_user_errors_name_the_sentence(trained_dir: Path):
    translator = Translator.load(trained_dir)
    with pytest.raises(UserError, match="sentence 2: .*contains the avoided phrase"):
        translator.translate(["a", "b"], constraints=[[], ["red ball"]], avoid=[[], ["ball"]])
    with pytest.raises(UserError, match="sentence 1: an empty constraint"):
        translator.translate(["a"], constraints=[[" "]])
    with pytest.raises(UserError, match="sampling"):
        translator.translate(["a man"], constraints=[["dog"]], method="sample")
    long = " ".join(["big red"] * 40)
    with pytest.raises(UserError, match="sentence 1: the prefix and constraints take"):
        translator.translate(["a"], prefix=[long])


def test_line_format(tmp_path: Path):
    lc = LineConstraints(constraints="unordered", prefix=True, avoid=True)
    src, kw = lc.parse(["Hello\tHi\tdog\tcat\t\tbird", "Bye"], lambda i: f"x:{i + 1}")
    assert src == ["Hello", "Bye"]
    assert kw["prefix"] == ["Hi", ""]
    assert kw["constraints"] == [["dog", "cat"], []]
    assert kw["avoid"] == [["bird"], []]
    with pytest.raises(UserError, match="x:1: 1 field"):
        LineConstraints(prefix=True).parse(["a\tb\tc"], lambda i: f"x:{i + 1}")
    src, kw = LineConstraints().parse(["a\tb"], str)
    assert src == ["a\tb"]  # no option: tabs stay in the source
    with pytest.raises(UserError, match="unordered"):
        LineConstraints(constraints="ordered", terminology=Terminology([("a", "b")]))


def _run(*args: str, stdin: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SEQ2SEQ_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "translate", *args],
        input=stdin.encode(),
        capture_output=True,
        env=env,
        timeout=300,
    )


def test_cli_constraints_prefix_avoid_and_terminology(trained_dir: Path, tmp_path: Path):
    lines = "Big red ball\tgreen car\nA man walks\tcat\tdog\n"
    r = _run(str(trained_dir), "--constraints", "ordered", stdin=lines)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode().splitlines()
    assert "green car" in out[0]
    assert out[1].find("cat") >= 0 and out[1].find("dog", out[1].find("cat")) > 0

    r = _run(str(trained_dir), "--prefix", "--avoid", stdin="A man walks\tthe old\tman\n")
    assert r.returncode == 0, r.stderr.decode()
    (line,) = r.stdout.decode().splitlines()
    assert line.startswith("the old") and " man" not in line

    terms = tmp_path / "t.tsv"
    terms.write_text("walks\tsits near\n", encoding="utf-8")
    r = _run(str(trained_dir), "--terminology", str(terms), stdin="A man walks\nA dog\n")
    assert r.returncode == 0, r.stderr.decode()
    assert "sits near" in r.stdout.decode().splitlines()[0]

    bad = tmp_path / "bad.tsv"
    bad.write_text("walks\n", encoding="utf-8")
    r = _run(str(trained_dir), "--terminology", str(bad), stdin="A man\n")
    assert r.returncode == 2 and b"bad.tsv:1:" in r.stderr and b"Traceback" not in r.stderr

    r = _run(str(trained_dir), "--constraints", "unordered", "--avoid", stdin="a\tdog\t\tdog\n")
    assert r.returncode == 2 and b"<stdin>:1:" in r.stderr


def test_ctranslate2_prefix_avoid_and_a_clear_error_for_constraints(trained_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from seq2seq.export.ctranslate2 import export_ctranslate2

    ct2_dir = export_ctranslate2(trained_dir, tmp_path / "ct2")
    ct2 = Translator.load(ct2_dir, engine="ctranslate2", method="greedy")
    torch_tr = Translator.load(trained_dir, method="greedy")
    sentences = [s for s, _ in synthetic_pairs(20, seed=11)]
    rng = random.Random(4)
    prefix = [rng.choice(WORDS) for _ in sentences]
    kw = dict(prefix=prefix, avoid=[[rng.choice([w for w in WORDS if w != p])] for p in prefix])
    assert ct2.translate(sentences, **kw) == torch_tr.translate(sentences, **kw)
    with pytest.raises(UserError, match="--engine torch"):
        ct2.translate(["a man"], constraints=[["dog"]])
    r = _run(
        str(ct2_dir), "--engine", "ctranslate2", "--constraints", "unordered", stdin="a\tdog\n"
    )
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "--engine torch" in err[0]


def test_outputs_end_with_eos_and_carry_the_prefix_length(trained_dir: Path):
    translator = Translator.load(trained_dir)
    rec = Recorder(translator.engine)
    translator.engine = rec
    translator.translate(["A man walks", "Big red"], prefix=["two", None])
    n = len(translator.tokenizer.encode_tgt(["two"])[0])
    assert [h[0].prefix_len for h in rec.hyps] in ([n, 0], [0, n])
    assert all(h[0].tokens[-1] == EOS_ID for h in rec.hyps)


def test_onnx_engine_gives_the_torch_engines_constrained_output(trained_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from seq2seq.export.onnx import export_onnx

    onnx_dir = export_onnx(trained_dir, tmp_path / "onnx")
    onnx = Translator.load(onnx_dir, engine="onnx")
    torch_tr = Translator.load(trained_dir)
    sentences = [s for s, _ in synthetic_pairs(16, seed=12)]
    rng = random.Random(5)
    prefix = [rng.choice(WORDS) for _ in sentences]
    constraints = [[rng.choice([w for w in WORDS if w != p])] for p in prefix]
    kw = dict(prefix=prefix, constraints=constraints)
    assert onnx.translate(sentences, **kw) == torch_tr.translate(sentences, **kw)

"""Issue 34's decoding root causes: CTranslate2 beam alignments that depended on the batch (7),
a resumed constrained translation that was not byte-identical (8), and constraint errors that
showed token ids instead of the user's text (9). Terminology files (6): tests/test_termbase.py.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
import torch
from factories import WORDS, make_model_dir, synthetic_pairs

import seq2seq.decode.stream
from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.decode.lines import LineReader
from seq2seq.decode.stream import LineConstraints, translate_stream
from seq2seq.decode.terminology import Terminology
from seq2seq.decode.translator import Translator


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("reliability") / "model", train_steps=150)


# ---- 7: CTranslate2 alignments with beam search ---------------------------------------------


@pytest.fixture(scope="module")
def ct2_dir(trained_dir, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2")
    from seq2seq.export.exporter import export_model

    out = tmp_path_factory.mktemp("reliability_ct2") / "ct2"
    return export_model(trained_dir, out, fmt="ctranslate2", quantization="none")


def test_ctranslate2_beam_alignments_match_torch_in_a_batch(trained_dir, ct2_dir):
    sentences = [s for s, _ in synthetic_pairs(20, seed=7)]
    torch_out = Translator.load(trained_dir, beam_size=4).translate_nbest(
        sentences, alignments=True
    )
    ct2 = Translator.load(ct2_dir, engine="ctranslate2", beam_size=4)
    ct2_out = ct2.translate_nbest(sentences, alignments=True)  # one batch of 20
    assert [e[0].text for e in ct2_out] == [e[0].text for e in torch_out]
    assert [e[0].alignment for e in ct2_out] == [e[0].alignment for e in torch_out]
    # every hypothesis' attention, every row, is the one it gets decoded alone
    src = ct2.encode(sentences)
    opts = ct2.opts.replace(nbest=2)
    batched = ct2.engine.translate_ids(src, opts, attention=True)
    for s, hyps in zip(src, batched):
        alone = ct2.engine.translate_ids([s], opts, attention=True)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        for h, a in zip(hyps, alone):
            torch.testing.assert_close(h.attention, a.attention)


# ---- 8: a resumed constrained run is byte-identical -------------------------------------------


class BatchLog:
    """Wraps an engine; logs the sources of each call (a batch) in order."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.batches: list[tuple[tuple[int, ...], ...]] = []

    def translate_ids(self, src, opts, constraints=None, **kwargs):
        self.batches.append(tuple(tuple(s) for s in src))
        return self.engine.translate_ids(src, opts, constraints=constraints, **kwargs)


def _constrained_lines(n: int) -> list[str]:
    """SOURCE<TAB>PREFIX<TAB>CONSTRAINT<TAB><TAB>AVOID lines."""
    rng = random.Random(5)
    lines = []
    for (source, _), i in zip(synthetic_pairs(n, seed=11), range(n)):
        prefix, phrase = rng.choice(WORDS), rng.choice(WORDS)
        avoid = rng.choice([w for w in WORDS if w not in (prefix, phrase)])
        lines.append(f"{source}\t{prefix if i % 3 else ''}\t{phrase}\t\t{avoid}")
    return lines


def test_a_resumed_constrained_nbest_run_is_byte_identical(trained_dir, tmp_path):
    base = Translator.load(trained_dir, beam_size=4, nbest=3, max_tokens=40)
    log = BatchLog(base.engine)
    translator = Translator(
        log, base.tokenizer, max_src_positions=base.max_src_positions, opts=base.opts
    )
    data = "".join(line + "\n" for line in _constrained_lines(13)).encode()
    kwargs = dict(
        stdout=io.BytesIO(),
        buffer_lines=5,
        warn=lambda m: None,
        line_constraints=LineConstraints(constraints="unordered", prefix=True, avoid=True),
    )
    full = tmp_path / "full.txt"
    translate_stream(translator, LineReader(io.BytesIO(data), name="in"), output=full, **kwargs)
    whole_run = list(log.batches)
    # A crash after 7 lines (in the second block of 5): their 3 entries each, and half a line.
    rows = full.read_bytes().splitlines(keepends=True)
    assert len(rows) == 13 * 3
    out = tmp_path / "out.txt"
    out.with_name("out.txt.partial").write_bytes(b"".join(rows[:21]) + rows[21][:5])
    log.batches.clear()
    translate_stream(
        translator, LineReader(io.BytesIO(data), name="in"), output=out, resume=True, **kwargs
    )
    assert out.read_bytes() == full.read_bytes()
    # The resumed run batched lines 6-13 (blocks 2 and 3) exactly as the whole run did.
    assert sum(len(b) for b in log.batches) == 8
    assert log.batches == whole_run[-len(log.batches) :]


def test_resuming_with_another_buffer_size_is_refused(trained_dir, tmp_path, monkeypatch, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a dog runs\ntwo cats sit\nthe big tree\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    real = seq2seq.decode.stream.translate_stream

    def stopped(translator, reader, *, output, **kwargs):
        partial = output.with_name(output.name + ".partial")
        partial.write_text(translator.translate([reader.read_chunk(1)[0]])[0] + "\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(seq2seq.decode.stream, "translate_stream", stopped)
    args = ["translate", str(trained_dir), "-i", str(src), "-o", str(out), "--buffer-lines", "2"]
    assert main(args) == 130
    monkeypatch.setattr(seq2seq.decode.stream, "translate_stream", real)
    capsys.readouterr()
    assert main([*args[:-1], "3", "--resume"]) == 2
    assert "another buffer_lines (2 -> 3)" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3


# ---- 9: constraint errors name the user's text and where it came from --------------------


def test_constraint_errors_show_the_users_phrases(trained_dir, tmp_path, capsys):
    translator = Translator.load(trained_dir)
    with pytest.raises(UserError) as e:
        translator.translate(["a", "b"], constraints=[[], ["red ball"]], avoid=[[], ["ball"]])
    assert str(e.value) == "sentence 2: constraint 'red ball' contains the avoided phrase 'ball'"
    with pytest.raises(UserError, match=r"^sentence 1: the prefix 'big red' contains the avoided"):
        translator.translate(["a"], prefix=["big red"], avoid=[["red"]])
    with pytest.raises(UserError, match=r"constraint 'red red' repeats a 1-gram"):
        translator.translate(["a"], constraints=[["red red"]], no_repeat_ngram=1)
    # a term's target: named with its termbase line
    terms = tmp_path / "terms.tsv"
    terms.write_text("# terms\ndog\tgreen car\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        translator.translate(
            ["the dog"], avoid=[["car"]], terminology=Terminology.load(terms), where=lambda i: "x:9"
        )
    assert str(e.value) == (
        f"x:9: constraint 'green car' (terminology {terms}:2) contains the avoided phrase 'car'"
    )
    # the command line: the input file and line
    src = tmp_path / "in.txt"
    src.write_text("a man\tbig\nthe dog\tred ball\t\tball\n", encoding="utf-8")
    args = ["translate", str(trained_dir), "-i", str(src), "--constraints", "unordered"]
    assert main([*args, "--avoid"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{src}:2: constraint 'red ball' contains the avoided phrase 'ball'"), err

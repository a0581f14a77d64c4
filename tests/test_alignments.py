"""Word alignments (`--alignments`), `--scores` and `--output-format jsonl`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from factories import make_model_dir

from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.data.tokenizer import BOS_ID, EOS_ID
from seq2seq.decode.alignments import align_pieces, format_alignment, parse_alignment, word_index
from seq2seq.decode.translator import Translator
from seq2seq.model.directory import load_model_dir

SENTENCES = [
    "Big red",
    "Two dogs play on the grass near the old tree .",
    "",
    "Young child sits on the bench with a black cat !",
]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("align") / "a", train_steps=150)


# ---------------------------------------------------------------------------------------------
# The rule, on a scripted attention matrix


def test_pieces_merge_to_words():
    assert word_index(["▁A", "▁big", "ger", "▁dog", "."]) == [0, 1, 1, 2, 2]
    assert word_index(["un", "▁", ","]) == [0, 1, 1]  # the first piece always starts a word


def test_scripted_attention_gives_exactly_the_expected_pairs():
    src = ["▁A", "▁big", "ger", "▁dog"]  # words: A(0) bigger(1) dog(2); then EOS, pad
    tgt = ["▁Ein", "▁Hund", "▁groß", "er"]  # words: Ein(0) Hund(1) grosser(2); then EOS
    #       A    big  ger  dog  EOS  pad
    attn = torch.tensor(
        [
            [0.70, 0.10, 0.05, 0.05, 0.10, 0.00],  # Ein   -> A
            [0.05, 0.10, 0.05, 0.30, 0.50, 0.00],  # Hund  -> dog (EOS is left out)
            [0.10, 0.20, 0.60, 0.10, 0.00, 0.00],  # groß  -> ger (word 1)
            [0.10, 0.40, 0.10, 0.10, 0.00, 0.30],  # er    -> big (word 1, again: one pair)
            [0.00, 0.00, 0.00, 0.00, 1.00, 0.00],  # EOS row: not aligned
        ]
    )
    pairs = align_pieces(attn, src, tgt)
    assert pairs == [(0, 0), (1, 2), (2, 1)]
    assert format_alignment(pairs) == "0-0 1-2 2-1"
    assert parse_alignment("0-0 1-2 2-1") == pairs
    assert align_pieces(attn, [], tgt) == [] and align_pieces(attn, src, []) == []
    with pytest.raises(ValueError):
        align_pieces(attn[:2], src, tgt)


# ---------------------------------------------------------------------------------------------
# The torch engine: the last decoder layer's cross-attention, mean over heads


def test_alignment_attention_is_the_last_layers_mean_over_heads(tmp_path):
    model_dir = make_model_dir(
        tmp_path / "two", cfg_overrides=("model.n_decoder_layers=2",), train_steps=60
    )
    translator = Translator.load(model_dir, method="greedy")
    src = translator.encode(SENTENCES[:2])
    hyps = translator.engine.translate_ids(src, translator.opts, attention=True)
    model = load_model_dir(model_dir).model
    for s, (h,) in zip(src, hyps):
        tgt_in = torch.tensor([[BOS_ID, *h.tokens[:-1]]])
        with torch.no_grad():
            _, weights = model.forward_with_attention(torch.tensor([s]), tgt_in)
        want = weights.cross[-1][0].mean(dim=0)  # (T, S) last layer, mean over heads
        torch.testing.assert_close(h.attention[:, : len(s)], want, atol=1e-5, rtol=1e-4)


def test_translator_alignments_cover_every_target_word(trained_dir):
    translator = Translator.load(trained_dir)
    out = translator.translate_nbest(SENTENCES, alignments=True, nbest=2)
    for sentence, entries in zip(SENTENCES, out):
        for t in entries:
            if not sentence:
                assert t.alignment == [] and t.text == ""
                continue
            n_src, n_tgt = len(sentence.split()), len(t.text.split())
            assert t.alignment == sorted(set(t.alignment))
            assert all(0 <= i < n_src and 0 <= j < n_tgt for i, j in t.alignment)
            assert {j for _, j in t.alignment} == set(range(n_tgt))  # each target word
    # asking for alignments changes neither the translations nor their scores (the explicit
    # attention path rounds differently from SDPA's: float noise only)
    plain = translator.translate_nbest(SENTENCES, nbest=2)
    for e, p in zip(out, plain):
        assert [t.tokens for t in e] == [t.tokens for t in p]
        assert [t.score for t in e] == pytest.approx([t.score for t in p], abs=1e-5)
    # an ensemble of the model with itself aligns the same way
    twice = Translator.load([trained_dir, trained_dir]).translate_nbest(
        SENTENCES, alignments=True, nbest=2
    )
    assert twice == out


def test_ctranslate2_alignments_match_the_torch_engines(trained_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from seq2seq.export.exporter import export_model

    ct2 = export_model(trained_dir, tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    torch_out = Translator.load(trained_dir, method="greedy").translate_nbest(
        SENTENCES, alignments=True
    )
    ct2_out = Translator.load(ct2, engine="ctranslate2", method="greedy").translate_nbest(
        SENTENCES, alignments=True
    )
    assert [e[0].text for e in ct2_out] == [e[0].text for e in torch_out]
    assert [e[0].alignment for e in ct2_out] == [e[0].alignment for e in torch_out]


# ---------------------------------------------------------------------------------------------
# The command line: --scores, --alignments, --output-format jsonl


def run_translate(trained_dir: Path, tmp_path: Path, *args: str) -> list[str]:
    src = tmp_path / "in.txt"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_dir), "-i", str(src), "-o", str(out), *args]) == 0
    return out.read_text(encoding="utf-8").splitlines()


def test_scores_and_alignments_text_format(trained_dir, tmp_path):
    translator = Translator.load(trained_dir)
    want = translator.translate_nbest(SENTENCES, alignments=True)
    lines = run_translate(trained_dir, tmp_path, "--scores", "--alignments")
    assert len(lines) == len(SENTENCES)
    for line, (t,) in zip(lines, want):
        text, score, align = line.split(" ||| ")
        assert text == t.text and float(score) == pytest.approx(t.score, abs=1e-4)
        assert parse_alignment(align) == t.alignment
    lines = run_translate(trained_dir, tmp_path, "--scores")
    assert [ln.split(" ||| ")[0] for ln in lines] == [t[0].text for t in want]
    lines = run_translate(trained_dir, tmp_path, "--nbest", "2", "--alignments")
    assert len(lines) == 2 * len(SENTENCES)
    assert all(len(ln.split(" ||| ")) == 4 for ln in lines)
    assert [int(ln.split(" ||| ")[0]) for ln in lines] == [1, 1, 2, 2, 3, 3, 4, 4]


def test_jsonl_one_object_per_input_line(trained_dir, tmp_path):
    translator = Translator.load(trained_dir)
    want = translator.translate_nbest(SENTENCES, alignments=True, nbest=3)
    lines = run_translate(trained_dir, tmp_path, "--output-format", "jsonl", "--alignments")
    objs = [json.loads(x) for x in lines]
    assert [o["line"] for o in objs] == [1, 2, 3, 4]
    for o in objs:
        assert set(o) == {"line", "text", "score", "tokens", "token_scores", "alignment", "nbest"}
        assert len(o["nbest"]) == 1 and o["nbest"][0]["text"] == o["text"]
    lines = run_translate(
        trained_dir, tmp_path, "--output-format", "jsonl", "--alignments", "--nbest", "3"
    )
    objs = [json.loads(x) for x in lines]
    assert len(objs) == len(SENTENCES)
    for o, entries in zip(objs, want):
        assert [n["text"] for n in o["nbest"]] == [t.text for t in entries]
        assert o["text"] == entries[0].text
        for n, t in zip(o["nbest"], entries):
            assert n["score"] == pytest.approx(t.score)
            assert n["token_scores"] == pytest.approx(t.token_scores)
            assert parse_alignment(n["alignment"]) == t.alignment
            assert len(n["tokens"]) == len(n["token_scores"])
            assert n["tokens"] == translator.tokenizer.tgt_pieces(t.tokens)
            if n["tokens"]:
                assert n["tokens"][-1] == "</s>"
    assert objs[2]["text"] == "" and objs[2]["tokens"] == [] and objs[2]["alignment"] == ""
    lines = run_translate(trained_dir, tmp_path, "--output-format", "jsonl")
    assert "alignment" not in json.loads(lines[0])


def test_an_engine_without_attention_is_a_clear_error(trained_dir):
    from seq2seq.decode.onnx_engine import OnnxEngine

    with pytest.raises(UserError, match="no attention"):
        OnnxEngine.start(object.__new__(OnnxEngine), [[5, EOS_ID]], attention=True)


def test_a_tensor_and_its_rows_give_the_same_alignment():
    """align_pieces argmaxes a tensor in one call and a list of rows in Python: the same
    pairs, ties to the first source piece included."""
    import torch

    from seq2seq.decode.alignments import align_pieces

    gen = torch.Generator().manual_seed(0)
    src, tgt = ["▁a", "b", "▁c", "▁d"], ["▁x", "▁y", "z", "▁w"]
    for _ in range(200):
        att = torch.randint(0, 3, (5, 6), generator=gen).float()  # many ties
        assert align_pieces(att, src, tgt) == align_pieces(att.tolist(), src, tgt)

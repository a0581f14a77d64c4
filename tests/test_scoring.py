"""Forced decoding (`seq2seq score`): the search's own scores, batching invariance, ensembles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from factories import make_model_dir, perturbed_copy

from seq2seq.cli import main
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.scoring import Scorer
from seq2seq.decode.translator import Translator

SENTENCES = [
    "Big red",
    "Two dogs play on the grass near the old tree .",
    "A man walks",
    "Young child sits on the bench with a black cat !",
    "Old woman",
    "Three people ride a bike in the park.",
]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("score") / "a", train_steps=150)


@pytest.fixture(scope="module")
def second_dir(trained_dir, tmp_path_factory) -> Path:
    return perturbed_copy(trained_dir, tmp_path_factory.mktemp("score") / "b", seed=11)


def search_outputs(translator: Translator, **opts):
    """(source ids, hypotheses) of the translator's own search, n-best included."""
    src = translator.encode(SENTENCES)
    options = translator.opts.replace(**opts)
    return src, translator.engine.translate_ids(src, options), options


@pytest.mark.parametrize("ensemble", [False, True])
@pytest.mark.parametrize("opts", [{}, {"nbest": 4, "beam_size": 4, "len_penalty": 0.6}])
def test_score_of_the_search_output_is_the_score_it_reported(
    trained_dir, second_dir, ensemble, opts
):
    dirs = [trained_dir, second_dir] if ensemble else [trained_dir]
    src, hyps, options = search_outputs(Translator.load(dirs), **opts)
    scorer = Scorer.load(dirs)
    pairs = [(s, h) for s, sent in zip(src, hyps) for h in sent]
    scores = scorer.score_ids(
        [s for s, _ in pairs], [h.tokens for _, h in pairs], len_penalty=options.len_penalty
    )
    for (_, h), sc in zip(pairs, scores):
        assert h.tokens[-1] == EOS_ID and sc.n_tokens == len(h.tokens)
        assert sc.token_log_probs == pytest.approx(h.token_scores, abs=2e-5)
        assert sc.score == pytest.approx(h.score, abs=2e-5)
        assert sc.log_prob == pytest.approx(sum(h.token_scores), abs=1e-4)


def test_batching_and_padding_change_nothing(trained_dir):
    scorer = Scorer.load(trained_dir)
    refs = SENTENCES[::-1]
    together = scorer.score(SENTENCES, refs)
    alone = [scorer.score([s], [r])[0] for s, r in zip(SENTENCES, refs)]
    scorer.max_tokens = 20  # several small batches
    small = scorer.score(SENTENCES, refs)
    for a, b, c in zip(together, alone, small):
        assert a.n_tokens == b.n_tokens == c.n_tokens
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-5)
        assert a.token_log_probs == pytest.approx(c.token_log_probs, abs=1e-5)


def test_ensemble_score_is_the_log_of_the_mean_probability(trained_dir, second_dir):
    a = Scorer.load(trained_dir).score(SENTENCES, SENTENCES)
    b = Scorer.load(second_dir).score(SENTENCES, SENTENCES)
    ab = Scorer.load([trained_dir, second_dir]).score(SENTENCES, SENTENCES)
    for x, y, z in zip(a, b, ab):
        want = [
            math.log((math.exp(p) + math.exp(q)) / 2)
            for p, q in zip(x.token_log_probs, y.token_log_probs)
        ]
        assert z.token_log_probs == pytest.approx(want, abs=1e-5)


def test_score_command_lines_and_perplexity(trained_dir, tmp_path, capsys):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("".join(s + "\n" for s in SENTENCES) + "\n", encoding="utf-8")
    tgt.write_text("".join(s + "\n" for s in SENTENCES) + "\n", encoding="utf-8")
    assert main(["score", str(trained_dir), "--src", str(src), "--tgt", str(tgt)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == len(SENTENCES) + 1  # the empty pair scores EOS alone
    rows = [line.split("\t") for line in lines]
    assert all(len(r) == 3 for r in rows)
    assert rows[-1][2] == "1"
    total = sum(float(r[0]) for r in rows)
    tokens = sum(int(r[2]) for r in rows)
    for lp, score, n in rows:  # default len_penalty 1: score = log_prob / n
        assert float(score) == pytest.approx(float(lp) / int(n), abs=2e-6)
    ppl = float(captured.err.strip().rsplit("perplexity ", 1)[1])
    assert ppl == pytest.approx(math.exp(-total / tokens), rel=1e-4)

    out = tmp_path / "scores.jsonl"
    argv = ["score", str(trained_dir), "--src", str(src), "--tgt", str(tgt), "-o", str(out)]
    assert main([*argv, "--output-format", "jsonl", "--len-penalty", "0"]) == 0
    objs = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [o["line"] for o in objs] == list(range(1, len(SENTENCES) + 2))
    for o, r in zip(objs, rows):
        assert o["score"] == pytest.approx(o["log_prob"]) == pytest.approx(float(r[0]), abs=1e-5)
        assert len(o["token_log_probs"]) == o["n_tokens"] == int(r[2])


def test_score_user_mistakes_are_one_line_errors(trained_dir, tmp_path, capsys):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("a\nb\n", encoding="utf-8")
    tgt.write_text("a\n", encoding="utf-8")
    out = tmp_path / "o.txt"
    argv = ["score", str(trained_dir), "--src", str(src), "--tgt", str(tgt), "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line counts differ" in err
    assert not out.exists()  # nothing half-written
    tgt.write_text("a\n" + "big " * 80 + "\n", encoding="utf-8")  # > 64 positions
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tgt}:2:" in err
    assert main(["score", str(tmp_path / "nope"), "--src", str(src), "--tgt", str(tgt)]) == 2

"""Ensembles: the mean-probability rule, one step function for search, per-model state."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from factories import make_model_dir, perturbed_copy

from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.decode.beam import beam_search
from seq2seq.decode.ensemble import Ensemble, combine_log_probs
from seq2seq.decode.greedy import greedy_search
from seq2seq.decode.options import StepDecoder
from seq2seq.decode.translator import Translator

SENTENCES = [
    "Big red",
    "Two dogs play on the grass near the old tree .",
    "A man walks",
    "Young child sits on the bench with a black cat !",
]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("ens") / "a", train_steps=150)


@pytest.fixture(scope="module")
def second_dir(trained_dir, tmp_path_factory) -> Path:
    """Another model with the same vocabulary: the first one's weights, perturbed."""
    return perturbed_copy(trained_dir, tmp_path_factory.mktemp("ens") / "b", seed=7)


# ---------------------------------------------------------------------------------------------
# The rule


def test_combine_is_the_log_of_the_mean_probability():
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]])  # (M=2, V=2)
    got = combine_log_probs(p.log())
    assert got.tolist() == pytest.approx([math.log(0.4), math.log(0.6)], abs=1e-6)
    # -inf in one member keeps the other's mass; -inf in all stays -inf
    lp = torch.tensor([[-math.inf, -math.inf], [math.log(0.5), -math.inf]])
    got = combine_log_probs(lp)
    assert got[0].item() == pytest.approx(math.log(0.25)) and got[1].item() == -math.inf


def test_one_member_or_identical_members_are_exact():
    lp = torch.randn(3, 7).log_softmax(-1)
    assert torch.equal(combine_log_probs(lp[None]), lp)
    assert torch.equal(combine_log_probs(torch.stack([lp, lp, lp])), lp)


# ---------------------------------------------------------------------------------------------
# Scripted members: the search sees one step function, each member keeps its own state

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
V = 5


def scripted(table: dict[tuple[int, ...], list[float]]) -> StepDecoder:
    """A member whose next-token distribution depends on the tokens in ITS OWN state.

    The state (N, t) records the tokens seen, appended from the prefix at each step: a
    reorder that mixed up rows, or members, would change the distributions.
    """

    def step(prefix, state):
        state = torch.cat([state, prefix[:, -1:]], dim=1)  # (N, t+1)
        rows = [table.get(tuple(r[1:]), [0, 0, 0.5, 0.25, 0.25]) for r in state.tolist()]
        return torch.tensor(rows, dtype=torch.float64).log(), state

    return StepDecoder(
        step=step,
        reorder=lambda s, i: s[i],
        state=torch.zeros((2, 0), dtype=torch.long),  # two sentences
        attention=None,
        max_positions=64,
    )


T1 = {(): [0, 0, 0.0, 0.6, 0.4], (A,): [0, 0, 0.5, 0.5, 0.0], (B,): [0, 0, 0.2, 0.1, 0.7]}
T2 = {(): [0, 0, 0.0, 0.1, 0.9], (A,): [0, 0, 0.9, 0.1, 0.0], (B,): [0, 0, 0.6, 0.2, 0.2]}


def hand_step(prefix, state):
    """The same two tables, combined by hand: log((p1 + p2) / 2) in float64."""
    rows = []
    for r in prefix.tolist():
        key = tuple(r[1:])
        p1 = T1.get(key, [0, 0, 0.5, 0.25, 0.25])
        p2 = T2.get(key, [0, 0, 0.5, 0.25, 0.25])
        rows.append([math.log((a + b) / 2) if a + b > 0 else -math.inf for a, b in zip(p1, p2)])
    return torch.tensor(rows, dtype=torch.float64), state


RULES = dict(batch_size=2, bos_id=BOS, eos_id=EOS, pad_id=PAD, max_lens=4)


def test_ensemble_greedy_follows_the_mean_not_either_member():
    ens = Ensemble([scripted(T1), scripted(T2)])
    hyps = greedy_search(ens.step, ens.reorder, ens.state, **RULES)
    # step 0: mean(A) = 0.35, mean(B) = 0.65 (member 1 alone would pick A); then
    # after B: mean(EOS) = 0.4, mean(B) = 0.45 -> B; after B B: default table -> EOS 0.5
    for h in hyps:
        assert h.tokens == [B, B, EOS]
        want = [math.log(0.65), math.log(0.45), math.log(0.5)]
        assert h.token_scores == pytest.approx(want, abs=1e-12)
        assert h.score == pytest.approx(sum(want) / 3, abs=1e-12)


def test_ensemble_beam_equals_the_hand_combined_model():
    ens = Ensemble([scripted(T1), scripted(T2)])
    got = beam_search(ens.step, ens.reorder, ens.state, beam_size=3, nbest=3, **RULES)
    want = beam_search(hand_step, lambda s, i: s, None, beam_size=3, nbest=3, **RULES)
    for g_sent, w_sent in zip(got, want):
        assert [h.tokens for h in g_sent] == [h.tokens for h in w_sent]
        for g, w in zip(g_sent, w_sent):
            assert g.score == pytest.approx(w.score, abs=1e-12)
            assert g.token_scores == pytest.approx(w.token_scores, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Real models


def test_a_model_ensembled_with_itself_gives_its_own_output_and_scores(trained_dir):
    alone = Translator.load(trained_dir)
    twice = Translator.load([trained_dir, trained_dir])
    for opts in ({}, {"method": "greedy"}, {"nbest": 3, "beam_size": 4}):
        assert twice.translate_nbest(SENTENCES, **opts) == alone.translate_nbest(SENTENCES, **opts)


def test_ensemble_of_two_models_is_neither(trained_dir, second_dir):
    a = Translator.load(trained_dir).translate_nbest(SENTENCES)
    b = Translator.load(second_dir).translate_nbest(SENTENCES)
    ab = Translator.load([trained_dir, second_dir]).translate_nbest(SENTENCES)
    assert ab != a and ab != b
    # and the ensemble is symmetric
    ba = Translator.load([second_dir, trained_dir]).translate_nbest(SENTENCES)
    assert [t[0].text for t in ab] == [t[0].text for t in ba]


def test_members_with_another_vocabulary_are_a_one_line_error(trained_dir, tmp_path, capsys):
    other = make_model_dir(tmp_path / "other", train_steps=0, seed=3)
    with pytest.raises(UserError, match="share the target vocabulary"):
        Translator.load([trained_dir, other])
    src = tmp_path / "in.txt"
    src.write_text("Big red\n", encoding="utf-8")
    assert main(["translate", str(trained_dir), str(other), "-i", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "share the target vocabulary" in err


def test_ctranslate2_cannot_be_an_ensemble_member(trained_dir):
    with pytest.raises(UserError, match="ctranslate2"):
        Translator.load([trained_dir, trained_dir], engine="ctranslate2")


def test_translate_and_evaluate_take_several_model_dirs(trained_dir, second_dir, tmp_path, capsys):
    src = tmp_path / "test.src"
    ref = tmp_path / "test.ref"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    ref.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    out = tmp_path / "hyp.txt"
    assert (
        main(["translate", str(trained_dir), str(second_dir), "-i", str(src), "-o", str(out)]) == 0
    )
    want = Translator.load([trained_dir, second_dir]).translate(SENTENCES)
    assert out.read_text(encoding="utf-8").splitlines() == want
    rc = main(["evaluate", str(trained_dir), str(second_dir), "--src", str(src), "--ref", str(ref)])
    assert rc == 0
    hyp = trained_dir / "eval-ensemble" / "test.src.hyp"
    assert hyp.read_text(encoding="utf-8").splitlines() == want


def test_each_member_keeps_its_own_kv_cache(trained_dir, second_dir):
    # Without caches (every step recomputes each member's prefix) the ensemble finds the same
    # hypotheses: the members' caches were reordered with the beams, not mixed up.
    cached = Translator.load([trained_dir, second_dir]).translate_nbest(SENTENCES, nbest=3)
    uncached = Translator.load([trained_dir, second_dir], engine="torch-nocache")
    for a, b in zip(cached, uncached.translate_nbest(SENTENCES, nbest=3)):
        assert [t.tokens for t in a] == [t.tokens for t in b]
        assert [t.score for t in a] == pytest.approx([t.score for t in b], abs=1e-5)

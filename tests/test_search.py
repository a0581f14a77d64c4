"""Tests for seq2seq/decode/beam.py, greedy.py and sampling.py with hand-written step functions
(no model).

The fake model's distribution is a pure function of (sentence id, generated prefix), looked up
from a table or drawn from a seeded hash, so every expected score below is plain arithmetic.
Its state mimics a KV cache: the rows it has consumed so far, which the next step checks
against the prefix (so a wrong ``reorder`` fails every test).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from seq2seq.core.errors import UserError
from seq2seq.decode import beam as beam_module
from seq2seq.decode import greedy as greedy_module
from seq2seq.decode import rules as rules_module
from seq2seq.decode.beam import beam_search
from seq2seq.decode.greedy import greedy_search
from seq2seq.decode.sampling import sample
from seq2seq.decode.search_base import Hypothesis

PAD, BOS, EOS, UNK, A, B, C, D = range(8)
V = 8
S = 4  # source length the fake attention reports
SPECIAL = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}

Dist = Callable[
    [int, tuple[int, ...]], list[float]
]  # (sentence, generated tokens) -> (V,) log-probs


@dataclass
class FakeState:
    sent: torch.Tensor  # (N,) sentence id of each row
    seen: torch.Tensor  # (N, t) tokens consumed so far, like a KV cache


class FakeModel:
    """Step/reorder/attention over a distribution function; records the rows of every call."""

    def __init__(self, dist: Dist, *, dtype: torch.dtype = torch.float64) -> None:
        self.dist = dist
        self.dtype = dtype
        self.calls: list[int] = []  # N of each step call

    def initial(self, sents: list[int]) -> FakeState:
        return FakeState(torch.tensor(sents), torch.zeros((len(sents), 0), dtype=torch.long))

    def step(self, prefix: torch.Tensor, state: FakeState) -> tuple[torch.Tensor, FakeState]:
        n, length = prefix.shape
        assert prefix.dtype == torch.long
        assert (prefix[:, 0] == BOS).all()
        assert state.sent.shape == (n,)
        # The "cache" must hold exactly the prefix minus its last token, row for row.
        assert torch.equal(state.seen, prefix[:, :-1])
        self.calls.append(n)
        rows = [self.dist(s, tuple(p[1:])) for s, p in zip(state.sent.tolist(), prefix.tolist())]
        return torch.tensor(rows, dtype=self.dtype), FakeState(state.sent, prefix.clone())

    def reorder(self, state: FakeState, index: torch.Tensor) -> FakeState:
        assert index.dtype == torch.long and index.dim() == 1
        return FakeState(state.sent[index], state.seen[index])

    def attention(self, state: FakeState) -> torch.Tensor:
        rows = [
            fake_attention(s, tuple(p)) for s, p in zip(state.sent.tolist(), state.seen.tolist())
        ]
        return torch.tensor(rows, dtype=torch.float32)  # (N, S)


def fake_attention(sent: int, prefix: tuple[int, ...]) -> list[float]:
    """A distinct (S,) row for each (sentence, prefix with BOS)."""
    return [sent * 1000 + len(prefix) * 10 + prefix[-1] + j / 10 for j in range(S)]


def logs(probs: dict[int, float]) -> list[float]:
    assert math.isclose(sum(probs.values()), 1.0), probs
    return [math.log(probs[v]) if probs.get(v, 0) > 0 else -math.inf for v in range(V)]


def table(entries: dict[tuple[int, ...], dict[int, float]]) -> Dist:
    """Distribution by exact prefix; prefixes not listed (dead beams only) end at once."""
    return lambda sent, prefix: logs(entries.get(prefix, {EOS: 1.0}))


def by_last(entries: dict[int, dict[int, float]]) -> Dist:
    """Distribution by the last token (BOS for the empty prefix)."""
    return lambda sent, prefix: logs(entries[prefix[-1] if prefix else BOS])


def random_dist(vocab: int = V, eos_bias: float = 0.7) -> Dist:
    """A seeded pseudo-random distribution per (sentence, prefix); EOS likelier with length."""

    def dist(sent: int, prefix: tuple[int, ...]) -> list[float]:
        g = torch.Generator().manual_seed(zlib.crc32(repr((sent, prefix)).encode()))
        logits = torch.randn(vocab, generator=g, dtype=torch.float64) * 2.0
        logits[EOS] += eos_bias * len(prefix) - 1.5
        return torch.log_softmax(logits, -1).tolist()

    return dist


def model_log_prob(
    dist: Dist, sent: int, tokens: list[int], unk_penalty: float = 0.0
) -> list[float]:
    """Log-prob of each token of a hypothesis, recomputed from the distribution itself."""
    out = []
    for i, tok in enumerate(tokens):
        lp = dist(sent, tuple(tokens[:i]))[tok]
        out.append(lp - unk_penalty if tok == UNK else lp)
    return out


def run_beam(model: FakeModel, sents: list[int], **kw) -> list[list[Hypothesis]]:
    return beam_search(
        model.step, model.reorder, model.initial(sents), batch_size=len(sents), **SPECIAL, **kw
    )


def run_greedy(model: FakeModel, sents: list[int], **kw) -> list[Hypothesis]:
    return greedy_search(
        model.step, model.reorder, model.initial(sents), batch_size=len(sents), **SPECIAL, **kw
    )


def run_sample(model: FakeModel, sents: list[int], **kw) -> list[Hypothesis]:
    return sample(
        model.step, model.reorder, model.initial(sents), batch_size=len(sents), **SPECIAL, **kw
    )


# ---------------------------------------------------------------------------------------------
# Hand-computed beam search, beam 2
#
# Table (probabilities of the next token given the generated prefix):
#   ()      : A .6, B .4
#   (A,)    : EOS .5, A .3, C .2
#   (B,)    : C .9, EOS .1
#   (B, C)  : EOS .55, C .45
#   (A, A)  : EOS .95, C .05
#
# step 0: EOS is blocked (min_len 1); only beam 0 is live: candidates A .6, B .4 -> beams [A], [B].
# step 1: cumulative: BC .36, A-EOS .30, AA .18, AC .12, B-EOS .04. Top 4 = BC, A-EOS, AA, AC.
#         A-EOS is in the first K=2 -> finalized H1 = [A, EOS], log .6 + log .5, len 2.
#         The first two non-EOS candidates continue: [B C] .36, [A A] .18.
# step 2: BC-EOS .36*.55 = .198, AA-EOS .18*.95 = .171, BC-C .162, AA-C .009.
#         Both of the first 2 end in EOS. In rank order, BC-EOS is finalized:
#         H2 = [B, C, EOS], log .4 + log .9 + log .55, len 3. The sentence now has K=2 finished
#         hypotheses and is done: AA-EOS is dropped, although with len_penalty 1 its normalized
#         score log(.171)/3 = -0.589 would beat H1's -0.602 (fairseq drops it too).
# Ranking: unnormalized H1 (log .30 = -1.204) beats H2 (log .198 = -1.619); normalized by
# len ** p the crossover is at (3/2) ** p = 1.345, p = 0.73: H1 wins for p = 0 and 0.6, H2 for
# p = 1 and 5.

BEAM_TABLE = {
    (): {A: 0.6, B: 0.4},
    (A,): {EOS: 0.5, A: 0.3, C: 0.2},
    (B,): {C: 0.9, EOS: 0.1},
    (B, C): {EOS: 0.55, C: 0.45},
    (A, A): {EOS: 0.95, C: 0.05},
}
H1 = [A, EOS]
H1_TOKEN_SCORES = [math.log(0.6), math.log(0.5)]
H2 = [B, C, EOS]
H2_TOKEN_SCORES = [math.log(0.4), math.log(0.9), math.log(0.55)]


@pytest.mark.parametrize(
    ("len_penalty", "expected"),
    [
        (
            0.0,
            [
                (H1, math.log(0.6) + math.log(0.5)),
                (H2, math.log(0.4) + math.log(0.9) + math.log(0.55)),
            ],
        ),
        (
            0.6,
            [
                (H1, (math.log(0.6) + math.log(0.5)) / 2**0.6),
                (H2, (math.log(0.4) + math.log(0.9) + math.log(0.55)) / 3**0.6),
            ],
        ),
        (
            1.0,
            [
                (H2, (math.log(0.4) + math.log(0.9) + math.log(0.55)) / 3),
                (H1, (math.log(0.6) + math.log(0.5)) / 2),
            ],
        ),
        (
            5.0,
            [
                (H2, (math.log(0.4) + math.log(0.9) + math.log(0.55)) / 3**5),
                (H1, (math.log(0.6) + math.log(0.5)) / 2**5),
            ],
        ),
    ],
)
def test_beam_hand_computed(len_penalty, expected):
    model = FakeModel(table(BEAM_TABLE))
    [hyps] = run_beam(model, [0], beam_size=2, nbest=2, max_lens=10, len_penalty=len_penalty)
    assert [h.tokens for h in hyps] == [tokens for tokens, _ in expected]
    for h, (_, score) in zip(hyps, expected):
        assert h.score == pytest.approx(score, abs=1e-6, rel=0)
        want = H1_TOKEN_SCORES if h.tokens == H1 else H2_TOKEN_SCORES
        assert h.token_scores == pytest.approx(want, abs=1e-9, rel=0)
        assert h.attention is None
    assert model.calls == [2, 2, 2]  # three steps, then the sentence is done
    # nbest=1 is the head of the same list.
    [best] = run_beam(
        FakeModel(table(BEAM_TABLE)), [0], beam_size=2, max_lens=10, len_penalty=len_penalty
    )
    assert [h.tokens for h in best] == [expected[0][0]]


def test_beam_max_len_forces_eos_at_step_two():
    # Same table, max_len 2: at step 1 every non-EOS token is -inf. Candidates: A-EOS .30 and
    # B-EOS .04 (the model's own EOS probabilities, not renormalized); both are in the first K
    # and both are finalized.
    model = FakeModel(table(BEAM_TABLE))
    [hyps] = run_beam(model, [0], beam_size=2, nbest=2, max_lens=2, len_penalty=1.0)
    assert [h.tokens for h in hyps] == [[A, EOS], [B, EOS]]
    assert hyps[0].score == pytest.approx((math.log(0.6) + math.log(0.5)) / 2, abs=1e-6, rel=0)
    assert hyps[1].score == pytest.approx((math.log(0.4) + math.log(0.1)) / 2, abs=1e-6, rel=0)
    assert model.calls == [2, 2]


# A model that rarely ends: the next token depends on the last one.
#   last BOS: A .6, B .3, EOS .1      last A: A .5, B .4, EOS .1      last B: A .6, B .3, EOS .1
# Beam 2, max_len 3:
# step 0: EOS blocked -> beams [A] .6, [B] .3.
# step 1: AA .30, AB .24, BA .18, BB .09, A-EOS .06, B-EOS .03 -> no EOS in the first 2; AA, AB go on.
# step 2 (forced): AA-EOS .30*.1 = .030 and AB-EOS .24*.1 = .024, both finalized with len 3.
ENDLESS = by_last(
    {
        BOS: {A: 0.6, B: 0.3, EOS: 0.1},
        A: {A: 0.5, B: 0.4, EOS: 0.1},
        B: {A: 0.6, B: 0.3, EOS: 0.1},
    }
)


def test_beam_max_len_forces_eos_on_long_hypotheses():
    model = FakeModel(ENDLESS)
    [hyps] = run_beam(model, [0], beam_size=2, nbest=2, max_lens=3, len_penalty=1.0)
    assert [h.tokens for h in hyps] == [[A, A, EOS], [A, B, EOS]]
    assert hyps[0].score == pytest.approx(
        (math.log(0.6) + math.log(0.5) + math.log(0.1)) / 3, abs=1e-6, rel=0
    )
    assert hyps[1].score == pytest.approx(
        (math.log(0.6) + math.log(0.4) + math.log(0.1)) / 3, abs=1e-6, rel=0
    )
    [g] = run_greedy(FakeModel(ENDLESS), [0], max_lens=3)
    assert g.tokens == [A, A, EOS]
    assert g.score == pytest.approx((math.log(0.6) + math.log(0.5) + math.log(0.1)) / 3, abs=1e-6)


def test_finished_sentences_are_dropped():
    # Three sentences of the endless model with max lengths 2, 3 and 5: each ends exactly at
    # its max length, and its rows leave the state right after.
    model = FakeModel(ENDLESS, dtype=torch.float32)
    out = run_beam(model, [0, 1, 2], beam_size=2, max_lens=torch.tensor([2, 3, 5]))
    assert model.calls == [6, 6, 4, 2, 2]
    assert [len(h[0].tokens) for h in out] == [2, 3, 5]
    assert all(h[0].tokens[-1] == EOS for h in out)

    model = FakeModel(ENDLESS, dtype=torch.float32)
    out = run_greedy(model, [0, 1, 2], max_lens=torch.tensor([2, 3, 5]))
    assert model.calls == [3, 3, 2, 1, 1]
    assert [h.tokens for h in out] == [[A, EOS], [A, A, EOS], [A, A, A, A, EOS]]


def test_sentences_finishing_at_different_steps_shrink_n():
    # Sentence 0 finds its two EOS hypotheses at step 2 (BEAM_TABLE), sentence 1 runs to 4.
    tables = [table(BEAM_TABLE), ENDLESS]
    model = FakeModel(lambda sent, prefix: tables[sent](sent, prefix))
    out = run_beam(model, [0, 1], beam_size=2, max_lens=torch.tensor([10, 4]), nbest=2)
    assert model.calls == [4, 4, 4, 2]
    assert [h.tokens for h in out[0]] == [H2, H1]
    assert all(len(h.tokens) == 4 for h in out[1])


# ---------------------------------------------------------------------------------------------
# Consistency: batching, beam 1 vs greedy, n-best


def test_batched_equals_one_at_a_time():
    dist = random_dist()
    sents = [0, 1, 2, 3, 4]
    max_lens = [3, 9, 6, 12, 1]
    for kw in (
        {"beam_size": 3, "nbest": 3, "len_penalty": 1.0},
        {"beam_size": 4, "nbest": 2, "len_penalty": 0.6, "min_len": 2},
    ):
        model = FakeModel(dist)
        batched = run_beam(model, sents, max_lens=torch.tensor(max_lens), **kw)
        assert sorted(model.calls, reverse=True) == model.calls  # never grows
        assert model.calls[-1] < model.calls[0]
        for s, m in zip(sents, max_lens):
            [alone] = run_beam(FakeModel(dist), [s], max_lens=m, **kw)
            assert [h.tokens for h in batched[s]] == [h.tokens for h in alone]
            assert [h.score for h in batched[s]] == pytest.approx(
                [h.score for h in alone], abs=1e-9
            )
            assert all(len(h.tokens) <= m for h in alone)

    model = FakeModel(dist)
    batched_g = run_greedy(model, sents, max_lens=torch.tensor(max_lens))
    for s, m in zip(sents, max_lens):
        [alone] = run_greedy(FakeModel(dist), [s], max_lens=m)
        assert batched_g[s].tokens == alone.tokens
        assert batched_g[s].score == pytest.approx(alone.score, abs=1e-9)


def test_beam_one_equals_greedy():
    dist = random_dist()
    sents = list(range(12))
    for kw in ({}, {"min_len": 3}, {"no_repeat_ngram": 2}, {"len_penalty": 0.5}):
        greedy = run_greedy(FakeModel(dist), sents, max_lens=10, **kw)
        beam = run_beam(FakeModel(dist), sents, max_lens=10, beam_size=1, **kw)
        for g, [b] in zip(greedy, beam):
            assert g.tokens == b.tokens
            assert g.score == pytest.approx(b.score, abs=1e-9)
            assert g.token_scores == pytest.approx(b.token_scores, abs=1e-9)


def reference_beam(
    dist: Dist,
    sent: int,
    *,
    vocab: int,
    K: int,
    max_len: int,
    min_len: int = 1,
    lp_pow: float = 1.0,
) -> list[tuple[list[int], float]]:
    """The beam search of beam_search's docstring, one sentence, plain Python over all K * V
    continuations: the top 2K by cumulative score; EOS among the first K finalized; the first K
    others continue (EOS candidates fill in as dead beams when fewer exist)."""
    beams = [((), 0.0)] + [((), -math.inf)] * (K - 1)
    final: list[tuple[list[int], float]] = []
    for t in range(max_len):
        cands = []
        for toks, cum in beams:
            lp = list(dist(sent, toks))
            lp[PAD] = lp[BOS] = -math.inf
            if len(toks) < min_len:
                eos, lp[EOS] = lp[EOS], -math.inf
            if len(toks) + 1 >= max_len:  # only EOS, with its own log-prob
                eos = dist(sent, toks)[EOS]
                lp = [-math.inf] * vocab
                lp[EOS] = eos
            cands += [(cum + lp[v], toks, v) for v in range(vocab)]
        top = sorted(cands, key=lambda c: -c[0])[: min(2 * K, K * vocab)]
        for score, toks, v in top[:K]:
            if v == EOS and math.isfinite(score) and len(final) < K:
                final.append(([*toks, EOS], score / (t + 1) ** lp_pow))
        if len(final) >= K or t + 1 >= max_len:
            break
        live = [c for c in top if c[2] != EOS]
        dead = [(-math.inf, c[1], c[2]) for c in top if c[2] == EOS]
        beams = [((*toks, v), score) for score, toks, v in (live + dead)[:K]]
    return sorted(final, key=lambda h: -h[1])


@pytest.mark.parametrize(
    ("vocab", "K", "min_len", "lp_pow"),
    [
        (8, 2, 1, 1.0),
        (8, 5, 2, 0.6),
        (20, 4, 1, 1.0),
        (5, 5, 1, 1.0),
        (5, 3, 2, 0.0),
        (64, 4, 2, 1.0),  # large enough for the fused candidate path
        (120, 5, 1, 0.6),
    ],
)
def test_beam_equals_the_plain_reference(vocab, K, min_len, lp_pow):
    # vocab 5 leaves three producible tokens (EOS, UNK, A) for up to 5 beams: fewer than 2K
    # continuations per beam, and dead beams.
    dist = random_dist(vocab=vocab, eos_bias=0.4)
    sents = list(range(8))
    max_lens = [2, 4, 6, 7, 9, 11, 12, 3]
    got = run_beam(
        FakeModel(dist),
        sents,
        max_lens=torch.tensor(max_lens),
        beam_size=K,
        nbest=K,
        min_len=min_len,
        len_penalty=lp_pow,
    )
    for s, m in zip(sents, max_lens):
        want = reference_beam(dist, s, vocab=vocab, K=K, max_len=m, min_len=min_len, lp_pow=lp_pow)
        assert [h.tokens for h in got[s]] == [toks for toks, _ in want], s
        assert [h.score for h in got[s]] == pytest.approx([sc for _, sc in want], abs=1e-9)


def test_nbest_sorted_distinct_and_scores_add_up():
    dist = random_dist()
    out = run_beam(
        FakeModel(dist), [0, 1, 2, 3], beam_size=4, nbest=4, max_lens=12, len_penalty=0.8
    )
    for s, hyps in enumerate(out):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 4
        for h in hyps:
            assert h.tokens[-1] == EOS and EOS not in h.tokens[:-1] and PAD not in h.tokens
            assert len(h.token_scores) == len(h.tokens)
            # Per-token scores are the model's own log-probs and add up to the unnormalized score.
            assert h.token_scores == pytest.approx(model_log_prob(dist, s, h.tokens), abs=1e-9)
            assert sum(h.token_scores) / len(h.tokens) ** 0.8 == pytest.approx(h.score, abs=1e-9)


def test_min_len_blocks_early_eos():
    # EOS is the likeliest token everywhere; min_len m forces exactly m tokens before it.
    model_dist = by_last({t: {EOS: 0.9, A: 0.06, B: 0.04} for t in (BOS, A, B)})
    for m in range(4):
        [g] = run_greedy(FakeModel(model_dist), [0], max_lens=10, min_len=m)
        assert g.tokens == [A] * m + [EOS]
        assert g.score == pytest.approx((m * math.log(0.06) + math.log(0.9)) / (m + 1), abs=1e-9)
        [hyps] = run_beam(FakeModel(model_dist), [0], beam_size=2, nbest=2, max_lens=10, min_len=m)
        assert hyps[0].tokens == [A] * m + [EOS]
        assert all(len(h.tokens) >= m + 1 for h in hyps)
    # The default min_len 1 means no empty output.
    [g] = run_greedy(FakeModel(model_dist), [0], max_lens=10)
    assert g.tokens == [A, EOS]


# ---------------------------------------------------------------------------------------------
# n-gram blocking and unk penalty

LOOP = by_last(
    {
        BOS: {A: 0.9, C: 0.05, EOS: 0.05},
        A: {B: 0.85, C: 0.1, EOS: 0.05},
        B: {A: 0.85, C: 0.1, EOS: 0.05},
        C: {EOS: 0.6, A: 0.2, B: 0.2},
    }
)


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    seq = [BOS, *tokens]
    return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]


def test_no_repeat_ngram_blocks_the_loop():
    [g] = run_greedy(FakeModel(LOOP), [0], max_lens=8)
    assert g.tokens == [A, B, A, B, A, B, A, EOS]  # loops until the forced EOS
    # n=2: after "A B A", B would repeat the bigram (A, B): C (.1) instead, then EOS.
    [g] = run_greedy(FakeModel(LOOP), [0], max_lens=8, no_repeat_ngram=2)
    assert g.tokens == [A, B, A, C, EOS]
    assert g.token_scores == pytest.approx(
        [math.log(0.9), math.log(0.85), math.log(0.85), math.log(0.1), math.log(0.6)]
    )
    # n=3: after "A B A B", A would repeat (A, B, A).
    [g] = run_greedy(FakeModel(LOOP), [0], max_lens=8, no_repeat_ngram=3)
    assert g.tokens == [A, B, A, B, C, EOS]
    [hyps] = run_beam(FakeModel(LOOP), [0], beam_size=2, nbest=2, max_lens=8, no_repeat_ngram=2)
    for h in hyps:
        assert len(set(ngrams(h.tokens, 2))) == len(ngrams(h.tokens, 2))


def test_no_repeat_ngram_on_random_model_and_bos_counts():
    dist = random_dist(eos_bias=0.2)
    for n in (2, 3):
        for hyps in run_beam(
            FakeModel(dist), list(range(6)), beam_size=3, nbest=3, max_lens=20, no_repeat_ngram=n
        ):
            for h in hyps:
                grams = ngrams(h.tokens, n)
                assert len(set(grams)) == len(grams), (n, h.tokens)
    # BOS only starts a prefix: even a model that prefers it never emits it (nor PAD).
    bos_lover = by_last({t: {BOS: 0.6, A: 0.3, EOS: 0.1} for t in (BOS, A)})
    [g] = run_greedy(FakeModel(bos_lover), [0], max_lens=5)
    assert g.tokens == [A, A, A, A, EOS]
    bos_lover2 = by_last({t: {BOS: 0.5, A: 0.3, B: 0.1, EOS: 0.1} for t in (BOS, A, B)})
    [hyps] = run_beam(FakeModel(bos_lover2), [0], beam_size=2, nbest=2, max_lens=5)
    assert len(hyps) == 2 and all(BOS not in h.tokens for h in hyps)
    # BOS is part of the hypothesis for n-gram blocking (fairseq): with n=2, "BOS A" blocks
    # nothing later, "A A" is blocked after its first use.
    [g] = run_greedy(FakeModel(bos_lover), [0], max_lens=5, no_repeat_ngram=2)
    assert g.tokens == [A, A, EOS]


UNK_TABLE = by_last(
    {BOS: {UNK: 0.5, A: 0.4, EOS: 0.1}, UNK: {EOS: 0.9, A: 0.1}, A: {EOS: 0.9, A: 0.1}}
)


def test_unk_penalty_changes_the_choice():
    common = {"max_lens": 5, "unk_id": UNK}
    [g] = run_greedy(FakeModel(UNK_TABLE), [0], **common)
    assert g.tokens == [UNK, EOS]
    # A small penalty keeps UNK, and the penalized log-prob is what enters the score.
    [g] = run_greedy(FakeModel(UNK_TABLE), [0], unk_penalty=0.1, **common)
    assert g.tokens == [UNK, EOS]
    assert g.token_scores[0] == pytest.approx(math.log(0.5) - 0.1)
    assert g.score == pytest.approx((math.log(0.5) - 0.1 + math.log(0.9)) / 2, abs=1e-9)
    # log .5 - .5 = -1.193 < log .4 = -0.916: A wins.
    [g] = run_greedy(FakeModel(UNK_TABLE), [0], unk_penalty=0.5, **common)
    assert g.tokens == [A, EOS]
    # Beam 2: step 0 beams [A] (log .4), [UNK] (log .5 - .5); step 1 both end (EOS .9) in the
    # first K: A-EOS -1.022, UNK-EOS -1.298.
    [hyps] = run_beam(FakeModel(UNK_TABLE), [0], beam_size=2, nbest=2, unk_penalty=0.5, **common)
    assert [h.tokens for h in hyps] == [[A, EOS], [UNK, EOS]]
    assert hyps[0].score == pytest.approx((math.log(0.4) + math.log(0.9)) / 2, abs=1e-6, rel=0)
    assert hyps[1].score == pytest.approx(
        (math.log(0.5) - 0.5 + math.log(0.9)) / 2, abs=1e-6, rel=0
    )
    # Without unk_id the penalty has nothing to act on.
    [g] = run_greedy(FakeModel(UNK_TABLE), [0], max_lens=5, unk_penalty=0.5)
    assert g.tokens == [UNK, EOS]


# ---------------------------------------------------------------------------------------------
# Sampling


def test_sampling_is_reproducible_and_seed_dependent():
    dist = random_dist()
    a = run_sample(FakeModel(dist), list(range(8)), max_lens=10, seed=3)
    b = run_sample(FakeModel(dist), list(range(8)), max_lens=10, seed=3)
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.score for h in a] == [h.score for h in b]
    flat = lambda sent, prefix: [-math.log(40)] * 40  # noqa: E731
    x = run_sample(FakeModel(flat), list(range(4)), max_lens=10, seed=0)
    y = run_sample(FakeModel(flat), list(range(4)), max_lens=10, seed=1)
    assert [h.tokens for h in x] != [h.tokens for h in y]
    for h in x + y:
        assert h.token_scores == pytest.approx([-math.log(40)] * len(h.tokens))


def test_sampling_truncated_to_one_token_equals_greedy():
    dist = random_dist()
    sents = list(range(10))
    greedy = run_greedy(FakeModel(dist), sents, max_lens=12)
    for kw in ({"top_k": 1}, {"top_p": 1e-3}, {"top_k": 1, "top_p": 0.5, "seed": 7}):
        sampled = run_sample(FakeModel(dist), sents, max_lens=12, **kw)
        for g, s in zip(greedy, sampled):
            assert s.tokens == g.tokens
            assert s.score == pytest.approx(g.score, abs=1e-9)
    cold = run_sample(FakeModel(dist), sents, max_lens=12, temperature=1e-3)
    assert [h.tokens for h in cold] == [h.tokens for h in greedy]


def test_sampling_top_k_stays_in_the_top_k():
    dist = random_dist(vocab=20, eos_bias=0.3)
    out = run_sample(FakeModel(dist), list(range(40)), max_lens=30, top_k=2, seed=5)
    seen_second = False
    for s, h in enumerate(out):
        assert h.token_scores == pytest.approx(model_log_prob(dist, s, h.tokens), abs=1e-9)
        for i, tok in enumerate(h.tokens):
            lp = torch.tensor(dist(s, tuple(h.tokens[:i])))
            lp[PAD] = -math.inf
            lp[BOS] = -math.inf
            if i == 0:
                lp[EOS] = -math.inf  # min_len 1
            top2 = lp.topk(2).indices.tolist()
            assert tok in top2
            seen_second |= tok == top2[1]
    assert seen_second  # it samples, it does not just take the best


def test_sampling_frequencies_top_p_and_temperature():
    two = table({(): {A: 0.7, B: 0.3}})  # then EOS with probability 1
    n = 2000
    out = run_sample(FakeModel(two), list(range(n)), max_lens=5, seed=11)
    first = [h.tokens[0] for h in out]
    assert abs(first.count(A) / n - 0.7) < 0.04  # 4 standard deviations
    assert all(h.tokens[1:] == [EOS] for h in out)
    for h in out:
        assert h.token_scores == pytest.approx([math.log(0.7 if h.tokens[0] == A else 0.3), 0.0])
    # Temperature 2: probabilities proportional to sqrt(.7) and sqrt(.3).
    p_a = math.sqrt(0.7) / (math.sqrt(0.7) + math.sqrt(0.3))
    out = run_sample(FakeModel(two), list(range(n)), max_lens=5, seed=12, temperature=2.0)
    first = [h.tokens[0] for h in out]
    assert abs(first.count(A) / n - p_a) < 0.045
    for h in out:
        assert h.token_scores[0] == pytest.approx(math.log(p_a if h.tokens[0] == A else 1 - p_a))
    # Nucleus: A .5, B .3, C .15, D .05. top_p .7 keeps {A, B} (A alone is .5 < .7);
    # top_p .5 keeps {A} (A alone reaches .5).
    four = table({(): {A: 0.5, B: 0.3, C: 0.15, D: 0.05}})
    out = run_sample(FakeModel(four), list(range(400)), max_lens=5, top_p=0.7)
    first = [h.tokens[0] for h in out]
    assert set(first) == {A, B}
    assert abs(first.count(A) / 400 - 0.5 / 0.8) < 0.1
    out = run_sample(FakeModel(four), list(range(50)), max_lens=5, top_p=0.5)
    assert {h.tokens[0] for h in out} == {A}


def test_sampling_drops_finished_sentences():
    model = FakeModel(ENDLESS)
    out = run_sample(model, [0, 1, 2], max_lens=torch.tensor([2, 3, 5]), top_k=1)
    assert model.calls == [3, 3, 2, 1, 1]
    assert [len(h.tokens) for h in out] == [2, 3, 5]


# ---------------------------------------------------------------------------------------------
# Attention collection


def check_attention(sent: int, h: Hypothesis) -> None:
    assert h.attention is not None
    assert h.attention.shape == (len(h.tokens), S)
    for i in range(len(h.tokens)):
        # Row i comes from the step whose prefix was BOS + tokens[:i].
        want = torch.tensor(fake_attention(sent, (BOS, *h.tokens[:i])))
        assert torch.equal(h.attention[i], want)


def test_attention_rows_follow_the_hypothesis():
    dist = random_dist()
    sents = [0, 1, 2]
    max_lens = torch.tensor([4, 10, 7])
    model = FakeModel(dist)
    beam = beam_search(
        model.step,
        model.reorder,
        model.initial(sents),
        batch_size=3,
        beam_size=3,
        nbest=3,
        max_lens=max_lens,
        attention=model.attention,
        **SPECIAL,
    )
    for s, hyps in zip(sents, beam):
        for h in hyps:
            check_attention(s, h)
    for search in (greedy_search, sample):
        model = FakeModel(dist)
        out = search(
            model.step,
            model.reorder,
            model.initial(sents),
            batch_size=3,
            max_lens=max_lens,
            attention=model.attention,
            **SPECIAL,
        )
        for s, h in zip(sents, out):
            check_attention(s, h)


# ---------------------------------------------------------------------------------------------
# Options


def test_bad_options_are_user_errors():
    model = FakeModel(ENDLESS)
    with pytest.raises(UserError, match="nbest"):
        run_beam(model, [0], beam_size=2, nbest=3, max_lens=5)
    with pytest.raises(UserError, match="beam_size"):
        run_beam(model, [0], beam_size=0, max_lens=5)
    with pytest.raises(UserError, match="max length"):
        run_greedy(model, [0, 1], max_lens=torch.tensor([3, 0]))
    with pytest.raises(UserError, match="temperature"):
        run_sample(model, [0], max_lens=5, temperature=0.0)
    with pytest.raises(UserError, match="top_p"):
        run_sample(model, [0], max_lens=5, top_p=0.0)
    assert model.calls == []
    assert run_beam(model, [], beam_size=2, max_lens=torch.zeros(0, dtype=torch.long)) == []


def test_float_max_lens_are_floored():
    # Callers may pass max_len_a * src_len + max_len_b as floats.
    [g] = run_greedy(FakeModel(ENDLESS), [0], max_lens=torch.tensor([3.7]))
    assert len(g.tokens) == 3


def test_half_precision_log_probs_are_promoted():
    # fp16 model output: scores are accumulated in float32, results match the float64 model.
    ref = run_beam(FakeModel(ENDLESS), [0, 1], beam_size=2, nbest=2, max_lens=torch.tensor([4, 6]))
    half = run_beam(
        FakeModel(ENDLESS, dtype=torch.float16),
        [0, 1],
        beam_size=2,
        nbest=2,
        max_lens=torch.tensor([4, 6]),
    )
    for r, h in zip(ref, half):
        assert [x.tokens for x in r] == [x.tokens for x in h]
        assert [x.score for x in r] == pytest.approx([x.score for x in h], abs=1e-3)


# ---------------------------------------------------------------------------------------------
# The fused candidate selection (one top-k over the step's log-probs) against the exact one


def _candidates(lp, prefix, max_lens, scores, *, fused, monkeypatch, **kw):
    monkeypatch.setattr(rules_module, "_FUSED_MIN_VOCAB", 0 if fused else 10**9)
    return beam_module.beam_candidates(lp, prefix, max_lens, scores, **SPECIAL, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize(
    "rules",
    [
        {},
        {"unk_id": UNK, "unk_penalty": 0.7},
        {"unk_id": UNK, "unk_penalty": -3.0},  # unk promoted into the top from far below
        {"min_len": 5},
    ],
)
def test_fused_candidates_equal_the_exact_ones(dtype, rules, monkeypatch):
    K, Ba, V = 4, 6, 300
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(Ba * K, V, generator=gen, dtype=torch.float64) * 3
    logits[:, PAD] += 8  # specials that the rules move rank high in the raw log-probs
    logits[:, BOS] += 8
    logits[0:3, EOS] += 9
    logits[3:6, UNK] -= 20
    logits[6, 10:] = -math.inf  # a row with few finite tokens
    lp = logits.log_softmax(-1).to(dtype)
    scores = torch.randn(Ba * K, generator=gen, dtype=torch.float64).to(torch.float32)
    scores[1::K] = -math.inf  # dead beams
    prefix = torch.full((Ba * K, 4), A)
    prefix[:, 0] = BOS
    max_lens = torch.tensor([4, 9, 9, 5, 9, 4]).repeat_interleave(K)  # rows at 4: only EOS
    kw = dict(beam_size=K, min_len=rules.get("min_len", 1), no_repeat_ngram=0)
    kw.update(unk_id=rules.get("unk_id"), unk_penalty=rules.get("unk_penalty", 0.0))
    exact = _candidates(lp, prefix, max_lens, scores, fused=False, monkeypatch=monkeypatch, **kw)
    fused = _candidates(lp, prefix, max_lens, scores, fused=True, monkeypatch=monkeypatch, **kw)
    for e, f in zip(exact, fused):
        assert e.dtype == f.dtype and e.shape == f.shape == (Ba, 2 * K)
    assert torch.equal(exact[0], fused[0])  # the same scores, in the same order
    finite = exact[0].isfinite()
    for e, f in zip(exact[1:], fused[1:]):  # and the same (beam, token, log-prob) for each
        assert torch.equal(e[finite], f[finite])
    # forced sentences (0, 5): EOS only, from each of the 3 live beams; the others: 2K
    assert finite.sum(-1).tolist() == [3, 8, 8, 8, 8, 3]


def test_fused_candidates_fall_back_on_nan_and_ngrams(monkeypatch):
    K, V = 2, 200
    lp = torch.randn(2 * K, V, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
    lp[1, 7] = math.nan  # NaN -> -inf, as on the exact path
    prefix = torch.full((2 * K, 3), A)
    prefix[:, 0] = BOS
    scores = torch.zeros(2 * K)
    max_lens = torch.full((2 * K,), 9)
    kw = dict(beam_size=K, min_len=1, unk_id=None, unk_penalty=0.0)
    for ngram in (0, 2):
        exact = _candidates(
            lp, prefix, max_lens, scores, fused=False, monkeypatch=monkeypatch,
            no_repeat_ngram=ngram, **kw,
        )  # fmt: skip
        fused = _candidates(
            lp, prefix, max_lens, scores, fused=True, monkeypatch=monkeypatch,
            no_repeat_ngram=ngram, **kw,
        )  # fmt: skip
        for e, f in zip(exact, fused):
            assert torch.equal(e, f)
        assert not ((fused[1] == 1) & (fused[2] == 7) & fused[0].isfinite()).any()
    assert not lp.isfinite().all()  # the input was not modified


@pytest.mark.parametrize(
    "rules",
    [
        {},
        {"unk_id": UNK, "unk_penalty": -30.0},
        {"unk_id": UNK, "unk_penalty": 2.0},
        {"min_len": 9},
    ],
)
def test_greedy_pick_is_the_argmax_of_the_constrained_row(rules):
    V = 300
    gen = torch.Generator().manual_seed(9)
    lp = (torch.randn(8, V, generator=gen) * 3).log_softmax(-1)
    lp[0, PAD] = lp[1, BOS] = 0.0  # banned tokens on top of the raw ranking
    lp[2, 40] = lp[2, 17] = lp[2].max() + 1  # a tie: the lower id wins, as with argmax
    lp[3, UNK] = lp[3].max()
    lp[4, EOS] = lp[4].max() + 0.5
    prefix = torch.full((8, 4), A)
    prefix[:, 0] = BOS
    max_lens = torch.tensor([9, 9, 9, 9, 9, 9, 4, 9])  # row 6: forced EOS
    kw = dict(min_len=rules.get("min_len", 1), no_repeat_ngram=0)
    kw.update(unk_id=rules.get("unk_id"), unk_penalty=rules.get("unk_penalty", 0.0))
    tok, tok_lp = greedy_module._greedy_pick(lp, prefix, max_lens, **SPECIAL, **kw)
    exact = rules_module.constrain(lp, prefix, max_lens, **SPECIAL, **kw)
    assert torch.equal(tok, exact.argmax(-1))
    assert torch.equal(tok_lp, exact.gather(1, tok[:, None]).squeeze(1))
    assert tok[6] == EOS and (tok[2] == 17 or rules.get("unk_penalty", 0) < 0)
    # a row whose maximum ties beyond the columns looked at: the exact path decides
    flat = torch.full((2, V), -math.log(V))
    plain = dict(min_len=1, no_repeat_ngram=0, unk_id=None, unk_penalty=0.0)
    assert greedy_module._greedy_pick(flat, prefix[:2], max_lens[:2], **SPECIAL, **plain) is None

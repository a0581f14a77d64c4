"""Constrained search (seq2seq/decode/constraints.py through seq2seq/decode/beam.py, greedy.py,
sampling.py) on scripted models.

The fake model's distribution is a pure function of (sentence, generated tokens), as in
tests/test_search.py; its state records the tokens consumed so far, and a step may consume
several new tokens at once (the one-pass prefix), which it records.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

import pytest
import torch

from seq2seq.core.errors import UserError
from seq2seq.decode import rules as rules_module
from seq2seq.decode.beam import beam_search
from seq2seq.decode.constraints import Constraints, ConstraintState, allocate
from seq2seq.decode.greedy import greedy_search
from seq2seq.decode.sampling import sample
from seq2seq.decode.search_base import Hypothesis
from seq2seq.decode.terminology import Terminology

PAD, BOS, EOS, UNK, A, B, C, D = range(8)
SPECIAL = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}


@dataclass
class State:
    sent: torch.Tensor  # (N,)
    seen: torch.Tensor  # (N, t) tokens consumed so far (BOS first)


class Fake:
    """Step/reorder over ``dist(sent, generated) -> (V,) log-probs``; records (rows, new tokens)."""

    def __init__(self, dist, vocab: int = 8) -> None:
        self.dist = dist
        self.vocab = vocab
        self.calls: list[tuple[int, int]] = []

    def initial(self, n: int) -> State:
        return State(torch.arange(n), torch.zeros((n, 0), dtype=torch.long))

    def step(self, prefix: torch.Tensor, state: State):
        n, length = prefix.shape
        seen = state.seen.size(1)
        assert length > seen and torch.equal(state.seen, prefix[:, :seen])
        self.calls.append((n, length - seen))
        rows = [self.dist(s, tuple(p[1:])) for s, p in zip(state.sent.tolist(), prefix.tolist())]
        return torch.tensor(rows, dtype=torch.float64), State(state.sent, prefix.clone())

    def reorder(self, state: State, index: torch.Tensor) -> State:
        return State(state.sent[index], state.seen[index])


def logs(probs: dict[int, float], vocab: int = 8) -> list[float]:
    assert math.isclose(sum(probs.values()), 1.0)
    return [math.log(probs[v]) if probs.get(v, 0) > 0 else -math.inf for v in range(vocab)]


def by_last(entries: dict[int, dict[int, float]]):
    return lambda sent, gen: logs(entries.get(gen[-1] if gen else BOS, {EOS: 1.0}))


def random_dist(vocab: int = 8, eos_bias: float = 0.5):
    def dist(sent: int, gen: tuple[int, ...]) -> list[float]:
        g = torch.Generator().manual_seed(zlib.crc32(repr((sent, gen)).encode()))
        logits = torch.randn(vocab, generator=g, dtype=torch.float64) * 2.0
        logits[EOS] += eos_bias * len(gen) - 1.5
        return torch.log_softmax(logits, -1).tolist()

    return dist


def beam(model: Fake, n: int, cons, **kw) -> list[list[Hypothesis]]:
    kw.setdefault("max_lens", 10)
    kw.setdefault("beam_size", 2)
    return beam_search(
        model.step,
        model.reorder,
        model.initial(n),
        batch_size=n,
        constraints=cons,
        **SPECIAL,
        **kw,
    )


def holds(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


def lg(*ps: float) -> float:
    return sum(math.log(p) for p in ps)


# ---------------------------------------------------------------------------------------------
# The state on its own


def test_matching_keeps_overlaps_and_repeated_tokens():
    cs = ConstraintState.start(
        [Constraints(include=[(A, A, B)]), Constraints(include=[(A, B), (B, C)])],
        torch.device("cpu"),
    )
    met = []
    for y in ([A, A], [A, B], [A, C], [B, C]):  # sentence 0: A A A B; sentence 1: A B C C
        cs = cs.advance(torch.tensor(y))
        met.append(cs.met().tolist())
    # A A A B: after the third A the match falls back to "A A", not to nothing.
    assert [m[0] for m in met] == [1, 2, 2, 3]
    # A B C: "A B" met (2) and "B C" met through the shared B (2 more).
    assert [m[1] for m in met] == [1, 3, 4, 4]
    assert cs.done.all()


def test_ordered_phrases_are_met_one_after_the_other():
    cs = ConstraintState.start(
        [Constraints(include=[(C,), (B,)], ordered=True)], torch.device("cpu")
    )
    assert cs.next_tokens().tolist() == [[C, -1]]
    assert cs.met_after(torch.tensor([[B, C]])).tolist() == [[0, 1]]  # B before C: nothing
    cs = cs.advance(torch.tensor([B]))
    assert cs.met().item() == 0
    cs = cs.advance(torch.tensor([C]))
    assert cs.next_tokens().tolist() == [[-1, B]]
    cs = cs.advance(torch.tensor([B]))
    assert cs.done.all()


def test_allocation_takes_banks_in_turns_fullest_first():
    cum = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -math.inf, -0.5]])
    bank = torch.tensor([[0, 0, 1, 2, 2, 0]])
    order = allocate(cum, bank, torch.tensor([2]), 6)
    # round 0: bank 2 (-4), bank 1 (-3), bank 0 (-0.5); round 1: bank 0 (-1); ...; -inf last
    assert order.tolist() == [[3, 2, 5, 0, 1, 4]]


def test_bad_constraints_are_one_line_user_errors():
    special = (PAD, BOS, EOS)
    with pytest.raises(UserError, match="empty constraint"):
        Constraints(include=[()]).check(special=special)
    with pytest.raises(UserError, match="special token"):
        Constraints(include=[(A, EOS)]).check(special=special)
    with pytest.raises(UserError, match="the prefix .* contains the avoided"):
        Constraints(prefix=(A, B, C), avoid=[(B, C)]).check(special=special)
    with pytest.raises(UserError, match="contains the avoided"):
        Constraints(include=[(A, B)], avoid=[(B,)]).check(special=special)
    with pytest.raises(UserError, match="repeats a 1-gram"):
        Constraints(include=[(A, A)]).check(special=special, no_repeat_ngram=1)
    Constraints(include=[(A, B)], avoid=[(C,)]).check(special=special, no_repeat_ngram=2)


# ---------------------------------------------------------------------------------------------
# Hand-computed constrained searches

DIST_1 = {
    BOS: {A: 0.6, B: 0.3, C: 0.1},
    A: {EOS: 0.7, B: 0.2, C: 0.1},
    B: {EOS: 0.8, C: 0.2},
    C: {EOS: 0.9, D: 0.1},
    D: {EOS: 1.0},
}


def test_unordered_constraint_hand_computed_beam_2():
    # Step 0, banks: C (1 met) | A, B (0). Beams: C, A.
    # Step 1: EOS after C (.09, bank 1), B after A (.12, bank 0), C after A (.06, bank 1),
    #   D after C (.01): "C EOS" is finished; beams A B, A C.
    # Step 2: EOS after A C (.054) finishes the second hypothesis.
    model = Fake(by_last(DIST_1))
    (hyps,) = beam(model, 1, [Constraints(include=[(C,)])], nbest=2)
    assert [h.tokens for h in hyps] == [[A, C, EOS], [C, EOS]]
    assert hyps[0].score == pytest.approx(lg(0.6, 0.1, 0.9) / 3)
    assert hyps[1].score == pytest.approx(lg(0.1, 0.9) / 2)
    assert hyps[0].token_scores == pytest.approx([math.log(p) for p in (0.6, 0.1, 0.9)])


def test_constraint_that_is_the_greedy_choice_changes_nothing():
    model = Fake(by_last(DIST_1))
    free = beam(model, 1, None, nbest=2)
    model2 = Fake(by_last(DIST_1))
    (hyps,) = beam(model2, 1, [Constraints(include=[(A,)])], nbest=2)
    # Unconstrained: "A EOS" (.42) and "B EOS" (.24). Constrained to hold A: "A EOS" first.
    assert free[0][0].tokens == hyps[0].tokens == [A, EOS]
    assert hyps[0].score == pytest.approx(free[0][0].score)
    assert all(A in h.tokens for h in hyps)


DIST_2 = {
    BOS: {A: 0.5, B: 0.3, C: 0.2},
    A: {EOS: 0.6, B: 0.3, C: 0.1},
    B: {EOS: 0.5, C: 0.4, A: 0.1},
    C: {EOS: 0.7, B: 0.2, A: 0.1},
}


def test_ordered_and_unordered_hand_computed_beam_1():
    # Unordered {B}, {C}: B (bank 1, .3 > C's .2), then C (bank 2), then EOS.
    (free,) = beam(Fake(by_last(DIST_2)), 1, [Constraints(include=[(B,), (C,)])], beam_size=1)
    assert free[0].tokens == [B, C, EOS]
    assert free[0].score == pytest.approx(lg(0.3, 0.4, 0.7) / 3)
    # Ordered C then B: B first would meet nothing, so C (bank 1), then B, then EOS.
    (ordered,) = beam(
        Fake(by_last(DIST_2)), 1, [Constraints(include=[(C,), (B,)], ordered=True)], beam_size=1
    )
    assert ordered[0].tokens == [C, B, EOS]
    assert ordered[0].score == pytest.approx(lg(0.2, 0.2, 0.5) / 3)


def test_constraint_that_cannot_fit_late_is_placed_in_time():
    # max length 4 (3 tokens + EOS), phrase C D. After A at step 0, A again would leave no
    # room for C D: that candidate is dropped, and "A C D EOS" wins over "C D EOS".
    dist = {BOS: {A: 0.9, C: 0.1}, A: {A: 0.5, EOS: 0.4, C: 0.1}, C: {D: 0.5, EOS: 0.5}}
    dist[D] = {EOS: 1.0}
    (hyps,) = beam(Fake(by_last(dist)), 1, [Constraints(include=[(C, D)])], max_lens=4, nbest=2)
    assert [h.tokens for h in hyps] == [[A, C, D, EOS], [C, D, EOS]]
    assert hyps[0].score == pytest.approx(lg(0.9, 0.1, 0.5, 1.0) / 4)
    assert hyps[1].score == pytest.approx(lg(0.1, 0.5, 1.0) / 3)


def test_a_limit_too_short_for_the_constraints_is_raised():
    dist = {BOS: {A: 0.9, C: 0.1}, A: {A: 0.5, EOS: 0.4, C: 0.1}, C: {D: 0.5, EOS: 0.5}}
    dist[D] = {EOS: 1.0}
    (hyps,) = beam(Fake(by_last(dist)), 1, [Constraints(include=[(C, D)])], max_lens=1)
    assert hyps[0].tokens == [C, D, EOS]  # the limit became 3: C D + EOS


def test_overlapping_constraints_share_a_token():
    dist = {
        BOS: {A: 0.7, B: 0.2, C: 0.1},
        A: {B: 0.8, EOS: 0.2},
        B: {C: 0.7, EOS: 0.3},
        C: {EOS: 0.9, A: 0.1},
    }
    cons = [Constraints(include=[(A, B), (B, C)])]
    (hyps,) = beam(Fake(by_last(dist)), 1, cons, beam_size=1)
    assert hyps[0].tokens == [A, B, C, EOS]
    assert hyps[0].score == pytest.approx(lg(0.7, 0.8, 0.7, 0.9) / 4)


def test_a_phrase_that_repeats_a_token_is_found_after_a_false_start():
    # The model says A A A B: "A A B" is met there (the third A keeps "A A" matched).
    seq = [A, A, A, B, EOS]

    def dist(sent, gen):
        nxt = seq[len(gen)] if len(gen) < len(seq) else EOS
        probs = {nxt: 0.9, C: 0.1} if nxt != C else {C: 1.0}
        return logs(probs)

    (hyps,) = beam(Fake(dist), 1, [Constraints(include=[(A, A, B)])], beam_size=2)
    assert hyps[0].tokens == seq
    assert hyps[0].score == pytest.approx(5 * math.log(0.9) / 5)


# ---------------------------------------------------------------------------------------------
# Prefix


def test_prefix_goes_through_one_step_call_then_the_search_continues():
    model = Fake(by_last(DIST_1))
    (hyps,) = beam(model, 1, [Constraints(prefix=(B, C))], beam_size=2, nbest=2)
    # B C is given; after C: EOS .9, D .1 (then EOS).
    assert [h.tokens for h in hyps] == [[B, C, EOS], [B, C, D, EOS]]
    assert hyps[0].prefix_len == 2
    assert hyps[0].token_scores == pytest.approx([0.0, 0.0, math.log(0.9)])
    assert hyps[0].score == pytest.approx(math.log(0.9) / 1)
    assert hyps[1].score == pytest.approx(lg(0.1, 1.0) / 2)
    # BOS + the two prefix tokens in one call on the 1 sentence row, then K rows one by one.
    assert model.calls[0] == (1, 3)
    assert all(new == 1 for _, new in model.calls[1:])


def test_prefix_greedy_and_sampling_start_with_it():
    model = Fake(by_last(DIST_1))
    cons = [Constraints(prefix=(C,)), Constraints(prefix=(B, C, D))]
    out = greedy_search(
        model.step,
        model.reorder,
        model.initial(2),
        batch_size=2,
        max_lens=8,
        constraints=cons,
        **SPECIAL,
    )
    assert [h.tokens for h in out] == [[C, EOS], [B, C, D, EOS]]
    assert model.calls[0] == (2, 2)  # the common prefix (1 token) in one pass
    assert out[1].token_scores == [0.0, 0.0, 0.0, 0.0]  # D -> EOS has probability 1
    drawn = sample(
        model.step,
        model.reorder,
        model.initial(2),
        batch_size=2,
        max_lens=8,
        constraints=cons,
        seed=3,
        **SPECIAL,
    )
    assert drawn[0].tokens[:1] == [C] and drawn[1].tokens[:3] == [B, C, D]


def test_prefix_longer_than_the_limit_raises_it():
    (hyps,) = beam(Fake(by_last(DIST_1)), 1, [Constraints(prefix=(B, C, D))], max_lens=2)
    assert hyps[0].tokens == [B, C, D, EOS]


# ---------------------------------------------------------------------------------------------
# Avoid


def test_avoided_token_and_phrase_never_appear():
    (hyps,) = beam(Fake(by_last(DIST_1)), 1, [Constraints(avoid=[(A,)])], nbest=2)
    assert [h.tokens for h in hyps] == [[B, EOS], [C, EOS]]
    # avoid "B EOS"? EOS is special; avoid "C EOS"-like phrases use real tokens: "B C"
    (hyps,) = beam(Fake(by_last(DIST_1)), 1, [Constraints(avoid=[(A,), (B, C)])], nbest=2)
    assert all(not holds(h.tokens, (B, C)) and A not in h.tokens for h in hyps)
    assert hyps[0].tokens == [B, EOS]


# ---------------------------------------------------------------------------------------------
# Random models: every constraint held, batched equals one at a time, fused equals exact


def random_constraints(rng: random.Random, vocab: int, *, with_prefix: bool, with_avoid: bool):
    words = list(range(4, vocab))
    include = [
        tuple(rng.choice(words) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 3))
    ]
    if rng.random() < 0.3 and include:
        include.append(include[0][:1] * 2)  # a repeated token
    prefix = tuple(rng.choice(words) for _ in range(rng.randint(0, 3))) if with_prefix else ()
    avoid = []
    if with_avoid:
        for _ in range(rng.randint(0, 2)):
            a = tuple(rng.choice(words) for _ in range(rng.randint(1, 2)))
            if not any(holds(list(p), a) for p in (*include, prefix)):
                avoid.append(a)
    return Constraints(prefix=prefix, include=include, ordered=rng.random() < 0.4, avoid=avoid)


def check_holds(h: Hypothesis, c: Constraints) -> None:
    assert h.tokens[-1] == EOS
    assert tuple(h.tokens[: len(c.prefix)]) == c.prefix
    for p in c.include:
        assert holds(h.tokens, p), (h.tokens, p)
    if c.ordered and c.include:  # greedy left-to-right placement exists
        pos = 0
        for p in c.include:
            found = [i for i in range(pos, len(h.tokens)) if tuple(h.tokens[i : i + len(p)]) == p]
            assert found, (h.tokens, c.include)
            pos = found[0] + len(p)
    for a in c.avoid:
        assert not holds(h.tokens, a), (h.tokens, a)


@pytest.mark.parametrize("vocab", [8, 80])  # 80: the fused candidate path
@pytest.mark.parametrize("K,nbest,lp,ngram", [(3, 2, 1.0, 0), (4, 4, 0.5, 0), (2, 1, 1.0, 3)])
def test_random_constraints_hold_and_batched_equals_alone(vocab, K, nbest, lp, ngram):
    rng = random.Random(vocab * 100 + K)
    n = 12
    cons = []
    for _ in range(n):
        c = random_constraints(rng, vocab, with_prefix=True, with_avoid=True)
        try:
            c.check(special=(PAD, BOS, EOS), no_repeat_ngram=ngram)
        except UserError:
            c = Constraints(prefix=c.prefix[:1])
        cons.append(c)
    dist = random_dist(vocab)
    max_lens = torch.tensor([rng.randint(2, 9) for _ in range(n)])
    kw = dict(beam_size=K, nbest=nbest, len_penalty=lp, no_repeat_ngram=ngram)
    batched = beam(Fake(dist, vocab), n, cons, max_lens=max_lens, **kw)

    for i in range(n):
        assert len(batched[i]) >= 1
        reserve = len(cons[i].include) if (cons[i].avoid or ngram) else 0
        for h in batched[i]:
            check_holds(h, cons[i])
            assert len(h.tokens) <= max(int(max_lens[i]), cons[i].min_len + reserve)
        # one at a time (sentence id i: the fake's distribution depends on it)
        model = Fake(lambda s, g, i=i: dist(i, g), vocab)
        alone = beam(model, 1, [cons[i]], max_lens=max_lens[i : i + 1], **kw)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]])


def test_fused_path_equals_the_exact_path_under_constraints(monkeypatch):
    rng = random.Random(5)
    vocab, n = 80, 10
    cons = [random_constraints(rng, vocab, with_prefix=True, with_avoid=True) for _ in range(n)]
    dist = random_dist(vocab)
    fused = beam(Fake(dist, vocab), n, cons, beam_size=4, nbest=3)
    monkeypatch.setattr(rules_module, "_FUSED_MIN_VOCAB", 10**9)
    exact = beam(Fake(dist, vocab), n, cons, beam_size=4, nbest=3)
    for f, e in zip(fused, exact):
        assert [h.tokens for h in f] == [h.tokens for h in e]
        assert [h.score for h in f] == pytest.approx([h.score for h in e], abs=1e-12)


def test_greedy_and_sampling_keep_prefix_and_avoid_on_random_models(monkeypatch):
    rng = random.Random(7)
    vocab, n = 80, 16
    cons = [
        Constraints(prefix=c.prefix, avoid=c.avoid)
        for c in (
            random_constraints(rng, vocab, with_prefix=True, with_avoid=True) for _ in range(n)
        )
    ]
    # Avoid what the model likes most, so that the bans bite: each sentence's first free pick.
    dist = random_dist(vocab)
    cons = [
        Constraints(
            prefix=c.prefix,
            avoid=[*c.avoid, (max(range(4, vocab), key=lambda v: dist(i, c.prefix)[v]),)],
        )
        for i, c in enumerate(cons)
    ]
    m = Fake(dist, vocab)

    def greedy():
        return greedy_search(
            m.step, m.reorder, m.initial(n), batch_size=n, max_lens=9, constraints=cons, **SPECIAL
        )

    fused = greedy()
    for h, c in zip(fused, cons):
        check_holds(h, c)
    monkeypatch.setattr(rules_module, "_FUSED_MIN_VOCAB", 10**9)
    assert [h.tokens for h in greedy()] == [h.tokens for h in fused]  # the exact path agrees
    monkeypatch.undo()
    for h, c in zip(
        sample(
            m.step, m.reorder, m.initial(n), batch_size=n, max_lens=9, constraints=cons, **SPECIAL
        ),
        cons,
    ):
        check_holds(h, c)
    with pytest.raises(UserError, match="beam search"):
        greedy_search(
            m.step,
            m.reorder,
            m.initial(1),
            batch_size=1,
            max_lens=9,
            constraints=[Constraints(include=[(A,)])],
            **SPECIAL,
        )


# ---------------------------------------------------------------------------------------------
# Terminology


def test_terminology_file_and_matching(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text(
        "# source\ttarget\nNew York\tNeu York\nYork\tJork\ndog\tHund\n\n", encoding="utf-8"
    )
    terms = Terminology.load(path)
    assert terms.targets_for("A dog in New York.") == ["Hund", "Neu York"]
    assert terms.targets_for("York dogs") == ["Jork"]  # "dogs" is not "dog"
    bad = tmp_path / "bad.tsv"
    bad.write_text("dog\tHund\ncat\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.tsv:2: expected SOURCE<TAB>TARGET"):
        Terminology.load(bad)
    with pytest.raises(UserError, match="not found"):
        Terminology.load(tmp_path / "missing.tsv")

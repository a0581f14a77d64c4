"""Continuous batching (seq2seq.decode.continuous): sentences that join a running beam search at any
step get exactly the hypotheses a static beam search gives them."""

from __future__ import annotations

import random

import pytest
import torch
from factories import WORDS, make_model_dir

from seq2seq.decode.continuous import ContinuousSearch, supports
from seq2seq.decode.options import SearchOptions, max_target_lens
from seq2seq.decode.translator import Translator


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Translator:
    return Translator.load(make_model_dir(tmp_path_factory.mktemp("c") / "m", train_steps=150))


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Translator:
    overrides = ("model.positions=learned", "model.n_decoder_layers=2")
    path = make_model_dir(tmp_path_factory.mktemp("u") / "m", cfg_overrides=overrides)
    return Translator.load(path)


def _continuous(translator: Translator, src: list[list[int]], opts: SearchOptions, joins):
    """Run ContinuousSearch, adding ``src`` in the chunks ``joins`` gives: (step, count)."""
    search = ContinuousSearch.for_engine(translator.engine, opts)
    out: dict[int, list] = {}
    pending = list(enumerate(src))
    plan = dict(joins)
    step, widest = 0, 0
    while pending or search.active:
        n = plan.get(step, 0) if search.active else max(plan.get(step, 0), 1)
        search.add(pending[:n])
        pending = pending[n:]
        for key, hyps in search.step():
            out[key] = hyps
        if search.tokens is not None:
            widest = max(widest, search.tokens.size(1))
        step += 1
    return [out[i] for i in range(len(src))], widest


def _assert_same(got, want) -> None:
    assert len(got) == len(want)
    for g_hyps, w_hyps in zip(got, want):
        assert [h.tokens for h in g_hyps] == [h.tokens for h in w_hyps]
        for g, w in zip(g_hyps, w_hyps):
            assert g.score == pytest.approx(w.score, abs=1e-4)
            assert g.token_scores == pytest.approx(w.token_scores, abs=1e-4)


JOINS = [(0, 3), (1, 2), (2, 4), (5, 1), (9, 6), (10, 2), (17, 5)]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"nbest": 3, "len_penalty": 0.6},
        {"beam_size": 1, "nbest": 1},
        {"min_len": 4, "len_penalty": 2.0, "unk_penalty": -1.0},
        {"max_len_a": 0.0, "max_len_b": 3},  # every sentence ends at its length limit
    ],
)
def test_joining_sentences_get_the_static_search_result(trained, overrides):
    opts = trained.opts.replace(**overrides)
    sentences = _sentences(25, seed=1)
    src = trained.encode(sentences)
    want = trained.engine.translate_ids(src, opts)
    got, _ = _continuous(trained, src, opts, JOINS)
    _assert_same(got, want)


def test_one_at_a_time_and_all_at_once_agree(trained):
    opts = trained.opts
    src = trained.encode(_sentences(12, seed=2))
    alone = [trained.engine.translate_ids([s], opts)[0] for s in src]
    got, _ = _continuous(trained, src, opts, [(0, len(src))])
    _assert_same(got, alone)


def test_untrained_model_learned_positions_and_long_outputs(untrained):
    """Random weights run to the length limit; learned positions are per row too."""
    opts = untrained.opts.replace(beam_size=3, nbest=2)
    src = untrained.encode(_sentences(14, seed=3))
    want = untrained.engine.translate_ids(src, opts)
    got, _ = _continuous(untrained, src, opts, [(0, 2), (3, 3), (4, 1), (20, 4), (21, 4)])
    _assert_same(got, want)


def test_columns_no_row_needs_are_trimmed(trained):
    """The time axis does not grow with the run: it is as wide as the oldest live row."""
    opts = trained.opts
    src = trained.encode(_sentences(60, seed=4))
    joins = [(s, 1) for s in range(0, 120, 2)]  # a new sentence every other step
    got, widest = _continuous(trained, src, opts, joins)
    limit = max(max_target_lens([len(s) for s in src], opts, trained.engine.max_positions))
    assert widest <= limit + 1  # BOS + the longest hypothesis a sentence may have
    assert widest < 60  # the run took over 120 steps
    _assert_same(got, trained.engine.translate_ids(src, opts))


def test_supports_only_what_it_searches(trained, tmp_path):
    model = trained.engine.model
    assert supports(model, trained.opts)
    assert not supports(model, trained.opts.replace(method="sample"))
    assert not supports(model, trained.opts.replace(method="greedy"))
    assert not supports(model, trained.opts.replace(no_repeat_ngram=2))
    assert not supports(model, trained.opts, alignments=True)
    window = Translator.load(
        make_model_dir(tmp_path / "w", cfg_overrides=("model.decoder_mask=window",))
    )
    assert not supports(window.engine.model, window.opts)
    with pytest.raises(ValueError, match="continuous search"):
        ContinuousSearch(model, trained.opts.replace(method="sample"), pad_id=0, bos_id=1,
                         eos_id=2, unk_id=3)  # fmt: skip


def test_per_row_positions_equal_the_offset_path(trained):
    """Decoder.forward with per-row positions and key padding == the plain cached step."""
    model = trained.engine.model
    torch.manual_seed(0)
    src = torch.tensor([trained.encode(["a man runs in the park"])[0]])
    state = model.start_state(src)
    prefix = torch.tensor([[trained.engine.bos_id, 7, 9, 11]])
    want, _ = model.decode_step_uncached(prefix, state)
    # the same prefix, shifted right by 2 padded columns in a cache-free decoder call
    cache = None
    for t in range(prefix.size(1)):
        hidden, cache, _ = model.decoder(
            prefix[:, t : t + 1], state.cross_kv, state.src_pad, cache=cache, offset=t
        )
    plain = model.project(hidden[:, -1]).float().log_softmax(-1)
    padded_cache = [
        (torch.cat([k.new_zeros(1, k.size(1), 2, k.size(3)), k[:, :, :-1]], 2),
         torch.cat([v.new_zeros(1, v.size(1), 2, v.size(3)), v[:, :, :-1]], 2))
        for k, v in cache
    ]  # fmt: skip
    key_pad = torch.tensor([[True, True, False, False, False, False]])
    hidden, _, _ = model.decoder(
        prefix[:, -1:], state.cross_kv, state.src_pad, cache=padded_cache,
        positions=torch.tensor([3]), self_key_pad=key_pad,
    )  # fmt: skip
    shifted = model.project(hidden[:, -1]).float().log_softmax(-1)
    assert torch.allclose(plain, want, atol=1e-5)
    assert torch.allclose(shifted, want, atol=1e-5)

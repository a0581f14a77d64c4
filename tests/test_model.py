"""Seq2SeqTransformer: causality, bidirectionality, padding, the KV cache, and the options."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F

from seq2seq.config.schema import ModelConfig
from seq2seq.model.layers import FeedForward, PositionalEncoding, sinusoidal_table
from seq2seq.model.loss import label_smoothed_nll
from seq2seq.model.transformer import Seq2SeqTransformer, build_model

PAD, BOS, EOS = 0, 2, 3
V = 20
MASKS = {
    "causal": {"decoder_mask": "causal"},
    "window": {"decoder_mask": "window", "window": 3},
    "block": {"decoder_mask": "block", "block_size": 3, "prev_blocks": 1},
}


def make_model(seed: int = 0, dtype: torch.dtype = torch.float64, **kw) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    args = dict(
        src_vocab_size=V,
        tgt_vocab_size=V,
        pad_id=PAD,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        max_positions=64,
    )
    args.update(kw)
    return Seq2SeqTransformer(**args).to(dtype).eval()


def rand_ids(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, shape, generator=g)


def padded_src(lens: list[int], seed: int = 0) -> torch.Tensor:
    """(B, max(lens)) source ids: random tokens, EOS last, then padding."""
    src = torch.full((len(lens), max(lens)), PAD)
    body = rand_ids(len(lens), max(lens), seed=seed)
    for b, n in enumerate(lens):
        src[b, : n - 1] = body[b, : n - 1]
        src[b, n - 1] = EOS
    return src


def tgt_prefix(b: int, t: int, seed: int = 1) -> torch.Tensor:
    tgt = rand_ids(b, t, seed=seed)
    tgt[:, 0] = BOS
    return tgt


def different(ids: torch.Tensor) -> torch.Tensor:
    """Another token id in 4..V-1 at every position (ids in 4..V-1 shift by one, cyclically)."""
    return 4 + (ids - 3) % (V - 4)


def changed(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """Per position (B, T): did the logits move?"""
    return (a - b).abs().amax(-1) > tol


# ---- decoder causality ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(MASKS))
def test_future_target_tokens_never_change_earlier_logits(kind: str) -> None:
    model = make_model(**MASKS[kind])
    src = padded_src([6, 4])
    tgt = tgt_prefix(2, 10)
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(9):
            other = tgt.clone()
            other[:, t + 1 :] = different(tgt[:, t + 1 :])
            out = model(src, other)
            assert torch.equal(out[:, : t + 1], base[:, : t + 1]), (kind, t)
            assert changed(out, base)[:, t + 1].all(), "the change itself must be visible"


def influenced_positions(kind: str, p: int, length: int, n_layers: int) -> set[int]:
    """Positions whose output may depend on the token at position p, through n_layers."""
    if kind == "window":
        w = MASKS["window"]["window"]
        return {i for i in range(length) if p <= i <= p + n_layers * (w - 1)}
    bs, k = MASKS["block"]["block_size"], MASKS["block"]["prev_blocks"]
    return {i for i in range(length) if i >= p and i // bs <= p // bs + n_layers * k}


@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("kind", ["window", "block"])
def test_window_and_block_receptive_field(kind: str, n_layers: int) -> None:
    """Changing the token at p moves exactly the outputs its (stacked) receptive field reaches."""
    model = make_model(n_decoder_layers=n_layers, **MASKS[kind])
    src = padded_src([5, 7])
    length = 16
    tgt = tgt_prefix(2, length)
    with torch.no_grad():
        base = model(src, tgt)
        for p in range(length):
            other = tgt.clone()
            other[:, p] = different(tgt[:, p])  # a different token at p only
            moved = changed(model(src, other), base)  # (B, T)
            expected = influenced_positions(kind, p, length, n_layers)
            for b in range(2):
                got = {i for i in range(length) if bool(moved[b, i])}
                assert got == expected, (kind, n_layers, p, b)
    # the stacked field really is wider than one layer's
    if n_layers == 2:
        assert influenced_positions(kind, 0, length, 2) != influenced_positions(kind, 0, length, 1)


@pytest.mark.parametrize("kind", list(MASKS))
def test_decoder_self_attention_weights_follow_the_mask(kind: str) -> None:
    model = make_model(**MASKS[kind])
    src = padded_src([6, 3])
    tgt = tgt_prefix(2, 9)
    with torch.no_grad():
        logits, attn = model.forward_with_attention(src, tgt)
        torch.testing.assert_close(logits, model(src, tgt), atol=1e-12, rtol=1e-10)
    allowed = model.decoder.structural_mask(9, 9, torch.device("cpu"))
    for w in attn.decoder_self:
        assert w.shape == (2, 4, 9, 9)
        assert torch.equal(w.masked_fill(allowed, 0.0), torch.zeros_like(w))
        assert (w[allowed.expand_as(w)] > 0).all()


# ---- encoder: bidirectional; cross-attention: whole source ------------------------------------


def test_encoder_is_bidirectional() -> None:
    model = make_model()
    src = padded_src([7, 7])
    with torch.no_grad():
        memory, src_pad = model.encode(src)
        assert memory.shape == (2, 7, 32) and not src_pad.any()
        for p in range(7):
            other = src.clone()
            other[:, p] = different(src[:, p])
            moved = changed(model.encode(other)[0], memory)
            assert moved.all(), f"changing source token {p} must move every position"


def test_cross_attention_covers_the_source_and_skips_padding() -> None:
    model = make_model()
    lens = [7, 4, 2]
    src = padded_src(lens)
    tgt = tgt_prefix(3, 5)
    with torch.no_grad():
        _, attn = model.forward_with_attention(src, tgt)
    src_pad = src.eq(PAD)
    assert len(attn.cross) == 2 and len(attn.encoder) == 2
    for w in attn.cross:
        assert w.shape == (3, 4, 5, 7)
        hidden = src_pad[:, None, None, :].expand_as(w)
        assert torch.equal(w[hidden], torch.zeros(int(hidden.sum()), dtype=w.dtype))
        assert (w[~hidden] > 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, 5, dtype=w.dtype))
    for w in attn.encoder:
        assert w.shape == (3, 4, 7, 7)
        hidden = src_pad[:, None, None, :].expand_as(w)
        assert torch.equal(w[hidden], torch.zeros(int(hidden.sum()), dtype=w.dtype))
        assert (w[~hidden] > 0).all()


# ---- padding ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batching_with_padding_changes_nothing(kind: str, dtype: torch.dtype) -> None:
    model = make_model(dtype=dtype, **MASKS[kind])
    src_lens, tgt_lens = [3, 8, 5, 6], [7, 4, 9, 2]
    src = padded_src(src_lens, seed=5)
    tgt = tgt_prefix(4, max(tgt_lens), seed=6)
    for b, n in enumerate(tgt_lens):
        tgt[b, n:] = PAD
    atol = 1e-10 if dtype == torch.float64 else 1e-5
    with torch.no_grad():
        batched = model(src, tgt)
        for b in range(4):
            alone = model(src[b : b + 1, : src_lens[b]], tgt[b : b + 1, : tgt_lens[b]])
            torch.testing.assert_close(batched[b : b + 1, : tgt_lens[b]], alone, atol=atol, rtol=0)
            # extra padding on both sides of a single sentence changes nothing either
            wide_src = F.pad(src[b : b + 1, : src_lens[b]], (0, 5), value=PAD)
            wide_tgt = F.pad(tgt[b : b + 1, : tgt_lens[b]], (0, 3), value=PAD)
            wide = model(wide_src, wide_tgt)
            torch.testing.assert_close(wide[:, : tgt_lens[b]], alone, atol=atol, rtol=0)


def test_padded_source_tokens_have_no_influence() -> None:
    """Whatever sits at padded positions of memory is invisible to the decoder."""
    model = make_model()
    src = padded_src([7, 3])
    tgt = tgt_prefix(2, 6)
    with torch.no_grad():
        memory, src_pad = model.encode(src)
        base = model.project(model.decode(tgt, memory, src_pad))
        noisy = memory.clone()
        noisy[src_pad] = torch.randn(int(src_pad.sum()), 32, dtype=memory.dtype) * 100
        out = model.project(model.decode(tgt, noisy, src_pad))
    torch.testing.assert_close(out, base, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(base, model(src, tgt), atol=1e-12, rtol=1e-10)


def test_all_padding_source_row_is_finite_on_both_paths() -> None:
    """A batch row whose source is all padding attends to nothing: zeros, never NaN."""
    model = make_model()
    src = padded_src([5, 2])
    src[1] = PAD
    tgt = tgt_prefix(2, 4)
    with torch.no_grad():
        fast = model(src, tgt)
        slow, attn = model.forward_with_attention(src, tgt)
        alone = model(src[:1], tgt[:1])
    assert torch.isfinite(fast).all() and torch.isfinite(slow).all()
    torch.testing.assert_close(slow, fast, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(fast[:1], alone, atol=1e-10, rtol=0)
    assert torch.equal(attn.cross[-1][1], torch.zeros_like(attn.cross[-1][1]))


# ---- incremental decoding -------------------------------------------------------------------------

CACHE_MASKS = {
    **MASKS,
    "window1": {"decoder_mask": "window", "window": 1},
    "block0": {"decoder_mask": "block", "block_size": 4, "prev_blocks": 0},
}


@pytest.mark.parametrize("kind", list(CACHE_MASKS))
def test_decode_step_matches_teacher_forcing_with_reorder(kind: str) -> None:
    model = make_model(dtype=torch.float32, **CACHE_MASKS[kind])
    src = padded_src([6, 3, 5], seed=7)
    tgt = tgt_prefix(3, 12, seed=8)
    with torch.no_grad():
        ref = model(src, tgt).log_softmax(-1)  # (B, T, V)
        ref_attn = model.forward_with_attention(src, tgt)[1].cross[-1].mean(1)  # (B, T, S)
        state = model.start_state(src)
        state_u = model.start_state(src)
        src_pad = src.eq(PAD)
        for t in range(1, 13):
            if t == 6:  # beam-style reorder mid-way: a permutation and a duplication
                index = torch.tensor([2, 0, 0, 1])
                state, state_u = state.reorder(index), state_u.reorder(index)
                tgt, ref, ref_attn, src_pad = (
                    tgt[index],
                    ref[index],
                    ref_attn[index],
                    src_pad[index],
                )
            prefix = tgt[:, :t]
            lp, state = model.decode_step(prefix, state, need_weights=t % 2 == 0)
            lp_u, state_u = model.decode_step_uncached(prefix, state_u)
            assert lp.dtype == torch.float32 and lp.shape == (prefix.size(0), V)
            torch.testing.assert_close(lp, ref[:, t - 1], atol=1e-5, rtol=0)
            torch.testing.assert_close(lp_u, lp, atol=1e-5, rtol=0)
            assert state.position == t and state_u.position == t
            if t % 2 == 0:
                cross = state.cross_attention
                assert cross.shape == src_pad.shape
                torch.testing.assert_close(cross, ref_attn[:, t - 1], atol=1e-5, rtol=0)
                assert torch.equal(cross[src_pad], torch.zeros(int(src_pad.sum())))
            else:
                assert state.cross_attention is None
            if kind.startswith("window"):
                keep = CACHE_MASKS[kind]["window"] - 1
                assert all(k.size(2) == min(t, keep) for k, _ in state.self_kv)
                assert all(v.size(2) == min(t, keep) for _, v in state.self_kv)
            else:
                assert all(k.size(2) == t for k, _ in state.self_kv)


@pytest.mark.parametrize("kind", list(MASKS))
def test_decode_step_accepts_several_new_tokens(kind: str) -> None:
    """prefix[:, position:] may hold more than one new token (e.g. a forced prefix)."""
    model = make_model(dtype=torch.float32, **MASKS[kind])
    src = padded_src([5, 7], seed=9)
    tgt = tgt_prefix(2, 11, seed=10)
    with torch.no_grad():
        ref = model(src, tgt).log_softmax(-1)
        state = model.start_state(src)
        for stop in [4, 5, 8, 11]:
            lp, state = model.decode_step(tgt[:, :stop], state)
            torch.testing.assert_close(lp, ref[:, stop - 1], atol=1e-5, rtol=0)


def test_uncached_step_with_weights() -> None:
    model = make_model(dtype=torch.float32)
    src = padded_src([4, 6], seed=11)
    tgt = tgt_prefix(2, 5, seed=12)
    with torch.no_grad():
        state = model.start_state(src)
        lp_c, st_c = model.decode_step(tgt[:, :5], state, need_weights=True)
        lp_u, st_u = model.decode_step_uncached(tgt[:, :5], state, need_weights=True)
    torch.testing.assert_close(lp_u, lp_c, atol=1e-5, rtol=0)
    torch.testing.assert_close(st_u.cross_attention, st_c.cross_attention, atol=1e-6, rtol=0)
    torch.testing.assert_close(lp_c.exp().sum(-1), torch.ones(2))


def test_reorder_selects_every_cached_tensor() -> None:
    model = make_model(dtype=torch.float32)
    src = padded_src([4, 6, 2], seed=13)
    with torch.no_grad():
        state = model.start_state(src)
        _, state = model.decode_step(tgt_prefix(3, 3), state, need_weights=True)
    index = torch.tensor([1, 1, 2])
    picked = state.reorder(index)
    pad, cross = picked.row_memory()  # the memory as the decoder rows see it
    assert torch.equal(pad, state.src_pad[index])
    assert picked.position == state.position
    assert torch.equal(picked.cross_attention, state.cross_attention[index])
    for (k0, v0), (k1, v1) in zip(state.cross_kv + state.self_kv, cross + picked.self_kv):
        assert torch.equal(k1, k0[index]) and torch.equal(v1, v0[index])
    # sentence 0 has no row left: its memory row is dropped, the other two are kept once
    assert picked.src_pad.size(0) == 2 and picked.cross_kv[0][0].size(0) == 2
    assert picked.memory_rows.tolist() == [0, 0, 1]
    # the original is untouched (reorder returns a new state)
    assert state.src_pad.size(0) == 3 and state.self_kv[0][0].size(0) == 3


def _concat_step(model, prefix, state):
    """decode_step as it was before the preallocated cache: the cache is concatenated."""
    hidden, kv, _ = model.decoder(
        prefix[:, state.position :],
        state.cross_kv,
        state.src_pad,
        cache=state.self_kv,
        offset=state.position,
        memory_rows=state.memory_rows,
    )
    log_probs = model.project(hidden[:, -1]).float().log_softmax(dim=-1)
    return log_probs, dataclasses.replace(state, self_kv=kv, position=prefix.size(1))


@pytest.mark.parametrize("kind", ["causal", "block"])
@pytest.mark.parametrize("recycle", [False, True])
def test_preallocated_cache_equals_concatenation_bit_for_bit(kind: str, recycle: bool) -> None:
    """Through beam-style reorders, dropped rows and growth past the first capacity (16)."""
    model = make_model(dtype=torch.float32, max_positions=64, **MASKS[kind])
    src = padded_src([6, 3, 5], seed=31)
    tgt = tgt_prefix(6, 24, seed=32)
    index = {3: [0, 0, 1, 2, 2, 1], 10: [5, 4, 3, 2, 1, 0], 14: [0, 2, 3, 5], 20: [3, 3, 1]}
    with torch.no_grad():
        state = model.start_state(src).reorder(torch.tensor([0, 0, 1, 1, 2, 2]))
        ref = state
        rows = torch.arange(6)
        for t in range(1, 25):
            lp, state = model.decode_step(tgt[rows, :t], state)
            lp_ref, ref = _concat_step(model, tgt[rows, :t], ref)
            assert torch.equal(lp, lp_ref), t
            assert state.kv_cache is not None and state.kv_cache.holds(state.self_kv)
            for (k, v), (k_ref, v_ref) in zip(state.self_kv, ref.self_kv):
                assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
            if t in index:
                i = torch.tensor(index[t])
                state, ref, rows = state.reorder(i, recycle=recycle), ref.reorder(i), rows[i]
        assert state.kv_cache.capacity >= 24


def test_stepping_a_state_twice_copies_instead_of_overwriting() -> None:
    """States are values: a second step from the same state (the cache's frontier has moved)
    copies the cache, and the first step's result is unchanged."""
    model = make_model(dtype=torch.float32)
    src = padded_src([5, 4], seed=33)
    a, b = tgt_prefix(2, 4, seed=34), tgt_prefix(2, 4, seed=35)
    with torch.no_grad():
        state = model.start_state(src)
        for t in range(1, 3):
            _, state = model.decode_step(a[:, :t], state)
        lp_a, st_a = model.decode_step(a[:, :3], state)
        kv_a = [(k.clone(), v.clone()) for k, v in st_a.self_kv]
        lp_b, st_b = model.decode_step(b[:, :3], state)  # another token at position 2
        assert st_b.kv_cache is not st_a.kv_cache
        for (k, v), (k0, v0) in zip(st_a.self_kv, kv_a):  # untouched by the second step
            assert torch.equal(k, k0) and torch.equal(v, v0)
        lp_a2, _ = model.decode_step(a[:, :4], st_a)
        fresh = model.start_state(src)
        for t in range(1, 5):
            lp_f, fresh = model.decode_step(a[:, :t], fresh)
        assert torch.equal(lp_a2, lp_f)
        # a replaced self_kv (not the cache's views) is copied in, not ignored
        swapped = dataclasses.replace(st_a, self_kv=st_b.self_kv)
        lp_s, _ = model.decode_step(torch.cat([b[:, :3], a[:, 3:4]], 1), swapped)
        lp_ref, _ = model.decode_step(torch.cat([b[:, :3], a[:, 3:4]], 1), st_b)
        assert torch.equal(lp_s, lp_ref)
        assert not torch.equal(lp_a, lp_b)


@pytest.mark.parametrize("kind", list(MASKS))
def test_beams_share_the_memory_and_match_per_row_memory(kind: str) -> None:
    """Beam-style states (K rows per sentence, memory kept once) give the same log-probs and
    cross-attention as the memory copied to every row, through expansion, reordering within
    sentences, dropping a sentence, and an irregular selection."""
    model = make_model(dtype=torch.float64, **MASKS[kind])
    src = padded_src([4, 6, 3], seed=21)
    K = 3
    with torch.no_grad():
        shared = model.start_state(src).reorder(torch.arange(3).repeat_interleave(K))
        assert shared.cross_kv[0][0].size(0) == 3  # not copied K times
        tgt = tgt_prefix(3 * K, 6, seed=22)
        steps = [
            torch.tensor([0, 0, 1, 3, 4, 4, 8, 6, 7]),  # beams reordered within sentences
            torch.tensor([3, 4, 5, 6, 7, 8]),  # sentence 0 finished: memory compacted
            torch.tensor([5, 0, 2]),  # irregular: the memory is expanded per row
        ]
        rows = torch.arange(3 * K)
        for t in range(1, 5):
            pad, cross = shared.row_memory()
            copied = dataclasses.replace(shared, src_pad=pad, cross_kv=cross, memory_rows=None)
            lp_s, shared = model.decode_step(tgt[rows, :t], shared, need_weights=True)
            lp_c, copied = model.decode_step(tgt[rows, :t], copied, need_weights=True)
            torch.testing.assert_close(lp_s, lp_c, atol=1e-12, rtol=0)
            torch.testing.assert_close(shared.cross_attention, copied.cross_attention)
            lp_u, _ = model.decode_step_uncached(tgt[rows, :t], shared)
            torch.testing.assert_close(lp_u, lp_s, atol=1e-10, rtol=0)
            if t <= len(steps):
                index = steps[t - 1]
                shared = shared.reorder(index)
                rows = rows[index]
        assert shared.src_pad.size(0) == 2  # sentences 1 and 2 remain


# ---- options ------------------------------------------------------------------------------------


def copy_batch(gen: torch.Generator, batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences of ids 4..19, length 5-8: src = x + EOS, tgt = BOS + x + EOS, padded."""
    lens = torch.randint(5, 9, (batch,), generator=gen)
    src = torch.full((batch, 9), PAD)
    tgt = torch.full((batch, 10), PAD)
    for b, n in enumerate(lens.tolist()):
        x = torch.randint(4, 20, (n,), generator=gen)
        src[b, :n] = x
        src[b, n] = EOS
        tgt[b, 0] = BOS
        tgt[b, 1 : n + 1] = x
        tgt[b, n + 1] = EOS
    return src, tgt


OPTIONS = list(itertools.product([True, False], ["sinusoidal", "learned"], [True, False]))


@pytest.mark.parametrize(("norm_first", "positions", "shared"), OPTIONS)
def test_every_option_combination_learns_to_copy(
    norm_first: bool, positions: str, shared: bool
) -> None:
    model = make_model(
        dtype=torch.float32,
        norm_first=norm_first,
        positions=positions,
        share_embeddings=shared,
        tie_output=shared,
        n_encoder_layers=1,
        n_decoder_layers=1,
    ).train()
    assert (model.encoder.final_norm is not None) == norm_first
    assert (model.decoder.final_norm is not None) == norm_first
    assert model.encoder.positions.kind == positions
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(100):
        src, tgt = copy_batch(gen)
        logits = model(src, tgt[:, :-1])
        out = label_smoothed_nll(logits, tgt[:, 1:], epsilon=0.0, ignore_index=PAD)
        loss = out.loss / out.n_tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first, (first, last)
    if shared:
        assert model.encoder.embedding.weight is model.decoder.embedding.weight
        assert model.output_proj.weight is model.decoder.embedding.weight
    else:
        assert model.encoder.embedding.weight is not model.decoder.embedding.weight
        assert model.output_proj.weight is not model.decoder.embedding.weight
        assert not torch.equal(model.output_proj.weight, model.decoder.embedding.weight)


def test_tied_and_shared_weights_are_one_tensor() -> None:
    model = make_model(share_embeddings=True, tie_output=True)
    emb = model.decoder.embedding.weight
    assert model.encoder.embedding.weight is emb
    assert model.output_proj.weight is emb
    assert model.encoder.embedding.weight.data_ptr() == emb.data_ptr()
    # one parameter, not three: parameters() de-duplicates shared tensors
    assert sum(p is emb for p in model.parameters()) == 1
    # a change through one name is seen through the others
    with torch.no_grad():
        model.output_proj.weight[5, 0] = 123.0
    assert model.encoder.embedding.weight[5, 0].item() == 123.0
    # gradients from both embeddings and the projection land on the one tensor
    model.train()
    src, tgt = padded_src([4, 5]), tgt_prefix(2, 4)
    model(src, tgt).sum().backward()
    assert emb.grad is not None and emb.grad.abs().sum() > 0

    untied = make_model(share_embeddings=False, tie_output=False)
    assert untied.encoder.embedding.weight is not untied.decoder.embedding.weight
    assert untied.output_proj.weight is not untied.decoder.embedding.weight
    tied_only = make_model(share_embeddings=False, tie_output=True, src_vocab_size=25)
    assert tied_only.output_proj.weight is tied_only.decoder.embedding.weight
    assert tied_only.encoder.embedding.weight.shape == (25, 32)
    assert tied_only.output_proj.weight.shape == (V, 32)


def test_share_embeddings_needs_a_joint_vocabulary() -> None:
    with pytest.raises(ValueError, match="joint"):
        make_model(share_embeddings=True, src_vocab_size=25)


def test_embedding_scale_positions_and_pad_row() -> None:
    model = make_model(dtype=torch.float64)
    emb = model.encoder.embedding
    assert torch.equal(emb.weight[PAD], torch.zeros(32, dtype=torch.float64))
    ids = torch.tensor([[5, 6, PAD]])
    torch.testing.assert_close(emb(ids)[0, 1], emb.weight[6] * 32**0.5)
    table = sinusoidal_table(10, 32)
    assert torch.equal(table[0], torch.cat([torch.zeros(16), torch.ones(16)]))
    freqs = 10000.0 ** (-torch.arange(16, dtype=torch.float64) / 15)
    torch.testing.assert_close(table[7, :16].double(), torch.sin(7 * freqs), atol=1e-5, rtol=0)
    torch.testing.assert_close(table[7, 16:].double(), torch.cos(7 * freqs), atol=1e-5, rtol=0)
    pe = PositionalEncoding(kind="sinusoidal", max_positions=10, d_model=32)
    assert torch.equal(pe(3, offset=4), table[4:7])
    assert "weight" not in pe.state_dict()  # fixed table: not saved
    learned = PositionalEncoding(kind="learned", max_positions=10, d_model=32)
    assert "weight" in learned.state_dict() and learned.weight.requires_grad
    with pytest.raises(ValueError):
        PositionalEncoding(kind="rotary", max_positions=10, d_model=32)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_activations(activation: str) -> None:
    torch.manual_seed(0)
    ff = FeedForward(d_model=8, d_ff=16, activation=activation, activation_dropout=0.0)
    x = torch.randn(2, 3, 8)
    act = F.relu if activation == "relu" else F.gelu
    torch.testing.assert_close(ff(x), ff.linear2(act(ff.linear1(x))))
    model = make_model(activation=activation)
    src, tgt = padded_src([4, 6]), tgt_prefix(2, 5)
    with torch.no_grad():
        out = model(src, tgt)
    assert torch.isfinite(out).all()
    assert model.decoder.layers[0].ff.activation is act


def test_relu_and_gelu_models_differ_and_bad_activation_raises() -> None:
    src, tgt = padded_src([4, 6]), tgt_prefix(2, 5)
    with torch.no_grad():
        a = make_model(activation="relu")(src, tgt)
        b = make_model(activation="gelu")(src, tgt)
    assert not torch.allclose(a, b)
    with pytest.raises(ValueError, match="activation"):
        make_model(activation="tanh")  # swish is valid (OPUS-MT)


def test_max_positions_overflow_raises() -> None:
    model = make_model(max_positions=8, dtype=torch.float32)
    ok_src, ok_tgt = padded_src([8]), tgt_prefix(1, 8)
    with torch.no_grad():
        model(ok_src, ok_tgt)  # exactly max_positions is fine
        with pytest.raises(ValueError, match="max_positions"):
            model(padded_src([9]), ok_tgt)
        with pytest.raises(ValueError, match="max_positions"):
            model(ok_src, tgt_prefix(1, 9))
        state = model.start_state(ok_src)
        long_tgt = tgt_prefix(1, 9)
        for t in range(1, 9):
            _, state = model.decode_step(long_tgt[:, :t], state)
        with pytest.raises(ValueError, match="max_positions"):
            model.decode_step(long_tgt, state)


def test_bad_decoder_mask_raises() -> None:
    with pytest.raises(ValueError, match="decoder mask"):
        make_model(decoder_mask="diagonal")


def test_build_model_follows_the_config() -> None:
    cfg = ModelConfig(
        d_model=24,
        n_heads=3,
        d_ff=40,
        n_encoder_layers=2,
        n_decoder_layers=1,
        norm_first=False,
        positions="learned",
        max_positions=50,
        share_embeddings=False,
        tie_output=False,
        decoder_mask="window",
        window=4,
        activation="gelu",
    )
    model = build_model(cfg, src_vocab_size=30, tgt_vocab_size=20, pad_id=PAD)
    assert (model.d_model, model.n_heads, model.max_positions) == (24, 3, 50)
    assert (model.src_vocab_size, model.tgt_vocab_size, model.pad_id) == (30, 20, PAD)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 1
    assert model.encoder.final_norm is None and model.decoder.final_norm is None
    assert model.decoder.positions.kind == "learned"
    assert model.decoder.self_mask == "window" and model.decoder.window == 4
    assert model.decoder.layers[0].ff.linear1.out_features == 40
    assert model.encoder.layers[0].self_attn.qkv_proj.out_features == 72
    assert model.decoder.layers[0].cross_attn.kv_proj.out_features == 48
    assert model.encoder.embedding.weight.shape == (30, 24)
    assert model.output_proj.weight.shape == (20, 24) and model.output_proj.bias is None
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([[5, 6, 7, EOS]]), torch.tensor([[BOS, 4, 5]]))
    assert logits.shape == (1, 3, 20)

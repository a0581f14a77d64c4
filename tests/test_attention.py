"""attend(), SelfAttention and CrossAttention: the SDPA path against the explicit path."""

from __future__ import annotations

import math

import pytest
import torch

from seq2seq.model import attention
from seq2seq.model.attention import CrossAttention, KVCache, SelfAttention, attend
from seq2seq.model.masks import (
    block_causal_mask,
    causal_mask,
    merge_masks,
    sliding_window_mask,
)

D, H = 16, 4
DTYPE = torch.float64


@pytest.fixture(autouse=True)
def _sdpa_for_every_call(monkeypatch):
    """Every call without need_weights goes through SDPA here, so that "fast" against "slow"
    compares SDPA's kernel with the explicit path (on the CPU, decoding steps, and short
    sentences in training, take the explicit path by default: the routing tests below undo
    this)."""
    monkeypatch.setattr(attention, "SHORT_KEYS", 0)
    monkeypatch.setattr(attention, "SMALL_QUERY", 0)


def _qkv(b: int, lq: int, lk: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, lq, D // H, generator=g, dtype=DTYPE)
    k = torch.randn(b, H, lk, D // H, generator=g, dtype=DTYPE)
    v = torch.randn(b, H, lk, D // H, generator=g, dtype=DTYPE)
    return q, k, v


def _reference(q, k, v, mask):
    """Plain definition: softmax(q k^T / sqrt(Dh) masked) v."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return w @ v, w


PAD = torch.tensor([[False] * 7, [False] * 4 + [True] * 3, [False] * 6 + [True]])

MASK_CASES = {
    "none": lambda lq, lk: None,
    "causal": lambda lq, lk: causal_mask(lq, lk),
    "window": lambda lq, lk: sliding_window_mask(lq, lk, 3),
    "block": lambda lq, lk: block_causal_mask(lq, lk, 2, 1),
    "pad": lambda lq, lk: merge_masks(None, PAD[:, :lk]),
    "causal+pad": lambda lq, lk: merge_masks(causal_mask(lq, lk), PAD[:, :lk]),
}


@pytest.mark.parametrize("case", list(MASK_CASES))
@pytest.mark.parametrize(("lq", "lk"), [(7, 7), (1, 7), (3, 7)])
def test_attend_sdpa_equals_explicit(case: str, lq: int, lk: int) -> None:
    q, k, v = _qkv(3, lq, lk)
    mask = MASK_CASES[case](lq, lk)
    fast, none = attend(q, k, v, mask=mask)
    slow, weights = attend(q, k, v, mask=mask, need_weights=True)
    ref_out, ref_w = _reference(q, k, v, mask)
    assert none is None
    assert weights.shape == (3, H, lq, lk)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(slow, ref_out, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(weights, ref_w, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, H, lq, dtype=DTYPE))
    if mask is not None:
        hidden = ~mask.expand(3, H, lq, lk)
        assert torch.equal(weights[hidden], torch.zeros(int(hidden.sum()), dtype=DTYPE))


def test_attend_is_causal_equals_explicit_causal() -> None:
    q, k, v = _qkv(2, 6, 6, seed=3)
    explicit, _ = attend(q, k, v, mask=causal_mask(6, 6))
    flag, _ = attend(q, k, v, mask=None, is_causal=True)
    flag_slow, w = attend(q, k, v, mask=None, is_causal=True, need_weights=True)
    torch.testing.assert_close(flag, explicit, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(flag_slow, explicit, atol=1e-12, rtol=1e-10)
    assert torch.equal(w[0, 0].triu(1), torch.zeros(6, 6, dtype=DTYPE))
    # and it really is causal: not the unmasked result
    unmasked, _ = attend(q, k, v, mask=None)
    assert not torch.allclose(unmasked, explicit)


def test_attend_is_causal_rejects_non_square_or_extra_mask() -> None:
    q, k, v = _qkv(1, 2, 5)
    with pytest.raises(ValueError):
        attend(q, k, v, mask=None, is_causal=True)
    with pytest.raises(ValueError):
        attend(q, k, v, mask=None, is_causal=True, need_weights=True)
    q, k, v = _qkv(1, 5, 5)
    with pytest.raises(ValueError):
        attend(q, k, v, mask=causal_mask(5, 5), is_causal=True)


def test_attend_dropout_only_when_asked() -> None:
    q, k, v = _qkv(2, 5, 5)
    a, _ = attend(q, k, v, mask=None, dropout=0.0)
    b, _ = attend(q, k, v, mask=None, dropout=0.0)
    assert torch.equal(a, b)
    torch.manual_seed(0)
    c, w = attend(q, k, v, mask=None, dropout=0.5, need_weights=True)
    assert not torch.allclose(c, a)
    # the returned weights are the pre-dropout distribution
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 5, dtype=DTYPE))


def _self_attn(seed: int = 0) -> SelfAttention:
    torch.manual_seed(seed)
    return SelfAttention(d_model=D, n_heads=H).to(DTYPE).eval()


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_self_attention_need_weights_does_not_change_output(case: str) -> None:
    attn = _self_attn()
    x = torch.randn(3, 7, D, dtype=DTYPE)
    mask = MASK_CASES[case](7, 7)
    fast, none, kv_fast = attn(x, mask=mask)
    slow, w, kv_slow = attn(x, mask=mask, need_weights=True)
    assert none is None and w.shape == (3, H, 7, 7)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=1e-10)
    assert torch.equal(kv_fast[0], kv_slow[0]) and torch.equal(kv_fast[1], kv_slow[1])
    assert kv_fast[0].shape == (3, H, 7, D // H)


def test_self_attention_is_causal_equals_explicit_mask() -> None:
    attn = _self_attn(1)
    x = torch.randn(2, 6, D, dtype=DTYPE)
    a, _, _ = attn(x, mask=causal_mask(6, 6))
    b, _, _ = attn(x, is_causal=True)
    c, _, _ = attn(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(a, c, atol=1e-12, rtol=1e-10)
    with pytest.raises(ValueError):
        attn(x, mask=causal_mask(6, 6), is_causal=True)
    past = attn(x[:, :2], is_causal=True)[2]
    with pytest.raises(ValueError):  # cache makes the score matrix non-square
        attn(x[:, 2:], is_causal=True, cache=past)


@pytest.mark.parametrize(
    "make_mask",
    [
        lambda lq, lk: causal_mask(lq, lk),
        lambda lq, lk: sliding_window_mask(lq, lk, 3),
        lambda lq, lk: block_causal_mask(lq, lk, 3, 0),
    ],
)
def test_self_attention_cache_equals_full(make_mask) -> None:
    """Feeding positions one (or a few) at a time with the cache matches the full pass."""
    attn = _self_attn(2)
    x = torch.randn(2, 8, D, dtype=DTYPE)
    full, _, (k_full, v_full) = attn(x, mask=make_mask(8, 8))
    cache = None
    outs = []
    for start, stop in [(0, 1), (1, 2), (2, 5), (5, 6), (6, 8)]:
        past = 0 if cache is None else cache[0].size(2)
        out, _, cache = attn(
            x[:, start:stop], mask=make_mask(stop - start, past + stop - start), cache=cache
        )
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(cache[0], k_full, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(cache[1], v_full, atol=1e-12, rtol=1e-10)


def test_self_attention_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError):
        SelfAttention(d_model=10, n_heads=3)
    with pytest.raises(ValueError):
        CrossAttention(d_model=10, n_heads=4)


@pytest.mark.parametrize("padded", [False, True])
def test_cross_attention_paths_agree_and_hide_padding(padded: bool) -> None:
    torch.manual_seed(4)
    attn = CrossAttention(d_model=D, n_heads=H).to(DTYPE).eval()
    x = torch.randn(3, 5, D, dtype=DTYPE)
    memory = torch.randn(3, 7, D, dtype=DTYPE)
    kv = attn.memory_kv(memory)
    assert kv[0].shape == (3, H, 7, D // H) and kv[1].shape == (3, H, 7, D // H)
    mask = merge_masks(None, PAD) if padded else None
    fast, none = attn(x, kv, mask=mask)
    slow, w = attn(x, kv, mask=mask, need_weights=True)
    assert none is None and w.shape == (3, H, 5, 7)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=1e-10)
    if padded:
        hidden = PAD[:, None, None, :].expand_as(w)
        assert torch.equal(w[hidden], torch.zeros(int(hidden.sum()), dtype=DTYPE))
        assert (w[~hidden] > 0).all()
        # the padded memory positions have no influence at all
        memory2 = memory.clone()
        memory2[PAD] = torch.randn(int(PAD.sum()), D, dtype=DTYPE) * 10
        out2, _ = attn(x, attn.memory_kv(memory2), mask=mask)
        torch.testing.assert_close(out2, fast, atol=1e-12, rtol=1e-10)
    else:
        assert (w > 0).all()
    # one query at a time gives the same rows (queries are independent)
    rows = torch.cat([attn(x[:, i : i + 1], kv, mask=mask)[0] for i in range(5)], 1)
    torch.testing.assert_close(rows, fast, atol=1e-12, rtol=1e-10)


def test_fully_masked_rows_give_zeros_on_both_paths() -> None:
    """A query that may attend to nothing: SDPA returns zeros, and so does the explicit path."""
    q, k, v = _qkv(2, 3, 4, seed=5)
    mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    mask[0, :, 1] = False  # row 1 of batch item 0 sees no key
    mask[1] = False  # batch item 1 sees nothing at all (an all-padding sentence)
    fast, _ = attend(q, k, v, mask=mask)
    slow, w = attend(q, k, v, mask=mask, need_weights=True)
    assert torch.isfinite(slow).all() and torch.isfinite(w).all()
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=1e-10)
    assert torch.equal(w[0, :, 1], torch.zeros(H, 4, dtype=DTYPE))
    assert torch.equal(w[1], torch.zeros(H, 3, 4, dtype=DTYPE))
    assert torch.equal(slow[1], torch.zeros(H, 3, D // H, dtype=DTYPE))
    torch.testing.assert_close(w[0, :, 0].sum(-1), torch.ones(H, dtype=DTYPE))


def test_kv_cache_select_can_leave_out_the_first_positions():
    torch.manual_seed(0)
    kv = [(torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)) for _ in range(2)]
    cache = KVCache.from_kv(kv)
    index = torch.tensor([2, 0, 0, 1])
    out = cache.select(index, first=2)
    assert out.length == 3 and out.rows == 4
    for (k, v), (k2, v2) in zip(kv, out.views()):
        assert torch.equal(k2, k[index][:, :, 2:]) and torch.equal(v2, v[index][:, :, 2:])
    with pytest.raises(ValueError, match="cannot leave out 6 of 5"):
        cache.select(index, first=6)


def _count_sdpa(monkeypatch) -> list[int]:
    calls: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return calls


@pytest.mark.parametrize("case", ["none", "causal", "pad", "causal+pad"])
def test_short_sentences_take_the_explicit_path_with_sdpa_s_values_and_gradients(
    case, monkeypatch
) -> None:
    """On the CPU, up to SHORT_KEYS keys run the explicit path when autograd records (faster
    there, forward and backward): its outputs and gradients equal SDPA's; longer ones, and
    calls without gradients, run SDPA."""
    mask = MASK_CASES[case](7, 7)
    results = []
    for short_keys in (0, 40):  # SDPA, then the default explicit path
        monkeypatch.setattr(attention, "SHORT_KEYS", short_keys)
        calls = _count_sdpa(monkeypatch)
        q, k, v = (x.requires_grad_(True) for x in _qkv(3, 7, 7, seed=11))
        out, weights = attend(q, k, v, mask=mask)
        out.pow(2).sum().backward()
        assert weights is None
        assert len(calls) == (1 if short_keys == 0 else 0)
        results.append((out, q.grad, k.grad, v.grad))
    for sdpa, explicit in zip(*results):
        torch.testing.assert_close(explicit, sdpa, atol=1e-12, rtol=1e-10)
    # past SHORT_KEYS keys, SDPA again
    monkeypatch.setattr(attention, "SHORT_KEYS", 6)
    calls = _count_sdpa(monkeypatch)
    attend(*(x.requires_grad_(True) for x in _qkv(3, 7, 7)), mask=mask)
    assert len(calls) == 1
    # and without gradients (inference, validation) too: a forward alone is faster there
    monkeypatch.setattr(attention, "SHORT_KEYS", 40)
    calls = _count_sdpa(monkeypatch)
    attend(*_qkv(3, 7, 7), mask=mask)
    with torch.no_grad():
        attend(*(x.requires_grad_(True) for x in _qkv(3, 7, 7)), mask=mask)
    assert len(calls) == 2


def test_explicit_path_with_dropout_in_training_drops_and_returns_no_weights(monkeypatch):
    """Short sentences with attention dropout (training): the explicit path applies it."""
    monkeypatch.setattr(attention, "SHORT_KEYS", 40)
    calls = _count_sdpa(monkeypatch)
    q, k, v = (x.requires_grad_(True) for x in _qkv(2, 5, 5))
    clean, _ = attend(q, k, v, mask=None)
    torch.manual_seed(0)
    dropped, weights = attend(q, k, v, mask=None, dropout=0.5)
    assert not calls and weights is None
    assert not torch.allclose(dropped, clean)

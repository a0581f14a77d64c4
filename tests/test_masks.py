"""Masks against brute-force definitions, the worked example, and the pad/mask conversions."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from seq2seq.model.attention import attend
from seq2seq.model.masks import (
    attention_mask_from_pad,
    block_causal_mask,
    causal_mask,
    decoder_self_mask,
    lengths_to_pad,
    merge_masks,
    pad_from_ids,
    sliding_window_mask,
    to_additive,
)

# (q_len, k_len) pairs, square and bottom-right aligned (q_len < k_len, incl. one query).
SHAPES = [(q, k) for k in range(1, 10) for q in range(1, k + 1)]


def brute_causal(q_len: int, k_len: int) -> torch.Tensor:
    out = torch.zeros(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):
        qi = i + k_len - q_len  # absolute position of query row i
        for j in range(k_len):
            out[i, j] = j <= qi
    return out


def brute_window(q_len: int, k_len: int, window: int) -> torch.Tensor:
    out = torch.zeros(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):
        qi = i + k_len - q_len
        for j in range(k_len):
            # causal, and at most `window` keys counting the query itself
            out[i, j] = j <= qi and qi - j < window
    return out


def brute_block(q_len: int, k_len: int, block_size: int, prev_blocks: int) -> torch.Tensor:
    out = torch.zeros(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):
        qi = i + k_len - q_len
        for j in range(k_len):
            same_or_recent = math.floor(qi / block_size) - math.floor(j / block_size)
            out[i, j] = j <= qi and same_or_recent <= prev_blocks
    return out


# ---- the worked example ------------------------------------------------------------------

# Row 3 is softmax([2, 0, 1]) = [e^2, 1, e] / (e^2 + 1 + e) = [0.665, 0.090, 0.245].
# (An earlier note gave [0.787, 0.107, 0.107]: that is softmax([2, 0, 0]), checked below.)
SCORES = torch.tensor([[2.0, 1.0, 3.0], [1.0, 2.0, 4.0], [2.0, 0.0, 1.0]], dtype=torch.float64)
EXPECTED = torch.tensor(
    [[1.0, 0.0, 0.0], [0.269, 0.731, 0.0], [0.665, 0.090, 0.245]], dtype=torch.float64
)


def _qk_for_scores(scores: torch.Tensor, head_dim: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """q (1,1,L,Dh), k (1,1,L,Dh) with q @ k^T / sqrt(Dh) == scores exactly."""
    length = scores.size(0)
    q = torch.zeros(1, 1, length, head_dim, dtype=torch.float64)
    q[0, 0, :, :length] = scores * math.sqrt(head_dim)  # sqrt(4) = 2: exact in binary
    k = torch.zeros(1, 1, length, head_dim, dtype=torch.float64)
    k[0, 0, :, :length] = torch.eye(length, dtype=torch.float64)
    return q, k


def test_worked_example_through_attend_explicit_mask() -> None:
    q, k = _qk_for_scores(SCORES)
    v = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    out, weights = attend(q, k, v, mask=causal_mask(3, 3), need_weights=True)
    w = weights[0, 0]
    torch.testing.assert_close(w, EXPECTED, atol=5e-4, rtol=0)
    # above the diagonal: exactly zero, not merely small
    assert torch.equal(w.triu(1), torch.zeros(3, 3, dtype=torch.float64))
    assert w[0, 0].item() == 1.0
    torch.testing.assert_close(w.sum(-1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(out, weights @ v)
    # the SDPA path gives the same output
    out_sdpa, none = attend(q, k, v, mask=causal_mask(3, 3))
    assert none is None
    torch.testing.assert_close(out_sdpa, out)


def test_worked_example_through_is_causal_and_additive_mask() -> None:
    q, k = _qk_for_scores(SCORES)
    v = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    _, weights = attend(q, k, v, mask=None, is_causal=True, need_weights=True)
    torch.testing.assert_close(weights[0, 0], EXPECTED, atol=5e-4, rtol=0)
    assert torch.equal(weights[0, 0].triu(1), torch.zeros(3, 3, dtype=torch.float64))
    # masks + softmax, through the additive form
    additive = to_additive(causal_mask(3, 3), dtype=torch.float64)
    soft = (SCORES + additive).softmax(-1)
    torch.testing.assert_close(soft, EXPECTED, atol=5e-4, rtol=0)
    assert torch.equal(soft.triu(1), torch.zeros(3, 3, dtype=torch.float64))
    # the closed form of row 3, and the variant whose last score is 0
    e = math.e
    row3 = torch.tensor([e**2, 1.0, e], dtype=torch.float64) / (e**2 + 1.0 + e)
    torch.testing.assert_close(soft[2], row3)
    variant = SCORES.clone()
    variant[2, 2] = 0.0
    q2, k2 = _qk_for_scores(variant)
    _, w2 = attend(q2, k2, v, mask=causal_mask(3, 3), need_weights=True)
    expected_variant = torch.tensor([0.787, 0.107, 0.107], dtype=torch.float64)
    torch.testing.assert_close(w2[0, 0, 2], expected_variant, atol=5e-4, rtol=0)


# ---- structural masks vs brute force --------------------------------------------------------


@pytest.mark.parametrize(("q_len", "k_len"), SHAPES)
def test_causal_mask_brute_force(q_len: int, k_len: int) -> None:
    m = causal_mask(q_len, k_len)
    assert m.dtype == torch.bool and m.shape == (q_len, k_len)
    assert torch.equal(m, brute_causal(q_len, k_len))
    tril = torch.tril(torch.ones(q_len, k_len), diagonal=k_len - q_len).bool()
    assert torch.equal(m, tril)
    assert torch.equal(decoder_self_mask("causal", q_len, k_len), m)


def test_causal_mask_last_row_sees_everything() -> None:
    # one query over a cache: the newest position sees every key
    assert causal_mask(1, 7).all()
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4).tril().bool())


@pytest.mark.parametrize(("q_len", "k_len"), SHAPES)
def test_sliding_window_mask_brute_force(q_len: int, k_len: int) -> None:
    for window in range(1, k_len + 2):
        m = sliding_window_mask(q_len, k_len, window)
        assert m.dtype == torch.bool and m.shape == (q_len, k_len)
        assert torch.equal(m, brute_window(q_len, k_len, window)), window
        assert torch.equal(decoder_self_mask("window", q_len, k_len, window=window), m)
        assert int(m.sum(-1).max()) <= window
    # a window as large as the sequence is the causal mask
    assert torch.equal(sliding_window_mask(q_len, k_len, k_len), causal_mask(q_len, k_len))


def test_sliding_window_mask_example() -> None:
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(sliding_window_mask(5, 5, 2), expected)
    assert torch.equal(sliding_window_mask(2, 5, 2), expected[3:])


@pytest.mark.parametrize(("q_len", "k_len"), SHAPES)
def test_block_causal_mask_brute_force(q_len: int, k_len: int) -> None:
    for block_size, prev_blocks in itertools.product(range(1, 5), range(0, 4)):
        m = block_causal_mask(q_len, k_len, block_size, prev_blocks)
        assert m.dtype == torch.bool and m.shape == (q_len, k_len)
        expected = brute_block(q_len, k_len, block_size, prev_blocks)
        assert torch.equal(m, expected), (block_size, prev_blocks)
        via_kind = decoder_self_mask(
            "block", q_len, k_len, block_size=block_size, prev_blocks=prev_blocks
        )
        assert torch.equal(via_kind, m)
    # enough earlier blocks: plain causal
    assert torch.equal(block_causal_mask(q_len, k_len, 2, k_len), causal_mask(q_len, k_len))


def test_block_causal_mask_example() -> None:
    # blocks {0,1} {2,3} {4,5}; prev_blocks=0: causal inside each block only
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 0, 0, 1, 0],
            [0, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(block_causal_mask(6, 6, 2, 0), expected)
    assert torch.equal(block_causal_mask(1, 6, 2, 0), expected[5:])
    # prev_blocks=1: also the whole previous block
    m = block_causal_mask(6, 6, 2, 1)
    assert m[5].tolist() == [False, False, True, True, True, True]
    assert m[2].tolist() == [True, True, True, False, False, False]


def test_masks_on_device_argument() -> None:
    dev = torch.device("cpu")
    assert causal_mask(2, 3, device=dev).device == dev
    assert sliding_window_mask(2, 3, 2, device=dev).device == dev
    assert block_causal_mask(2, 3, 2, 1, device=dev).device == dev


@pytest.mark.parametrize(
    "call",
    [
        lambda: causal_mask(4, 3),
        lambda: sliding_window_mask(4, 3, 2),
        lambda: block_causal_mask(4, 3, 2, 1),
        lambda: sliding_window_mask(3, 3, 0),
        lambda: sliding_window_mask(3, 3, -1),
        lambda: block_causal_mask(3, 3, 0, 1),
        lambda: block_causal_mask(3, 3, 2, -1),
        lambda: decoder_self_mask("diagonal", 3, 3),
    ],
)
def test_bad_arguments_raise(call) -> None:
    with pytest.raises(ValueError):
        call()


# ---- padding and conversions --------------------------------------------------------------


def test_to_additive() -> None:
    mask = torch.tensor([[True, False, True], [False, False, True]])
    add = to_additive(mask)
    assert add.dtype == torch.float32
    assert torch.equal(add[mask], torch.zeros(int(mask.sum())))
    assert torch.isneginf(add[~mask]).all()
    add64 = to_additive(mask, dtype=torch.float64)
    assert add64.dtype == torch.float64
    assert torch.equal(add64.isneginf(), ~mask)
    # SDPA gives the same result for the bool and the additive form
    q = torch.randn(1, 1, 2, 4, dtype=torch.float64)
    k = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    v = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    b = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=add64)
    torch.testing.assert_close(a, b)


def test_pad_from_ids_and_lengths_to_pad() -> None:
    ids = torch.tensor([[5, 6, 3, 0, 0], [7, 3, 0, 0, 0], [4, 5, 6, 7, 3]])
    pad = pad_from_ids(ids, 0)
    assert pad.dtype == torch.bool
    assert torch.equal(pad, ids == 0)
    lens = torch.tensor([3, 2, 5])
    assert torch.equal(lengths_to_pad(lens), pad)
    wide = lengths_to_pad(lens, max_len=7)
    assert wide.shape == (3, 7)
    assert torch.equal(wide[:, :5], pad) and wide[:, 5:].all()
    assert torch.equal(lengths_to_pad(torch.tensor([0, 2])), torch.tensor([[1, 1], [0, 0]]).bool())


def test_attention_mask_from_pad() -> None:
    pad = torch.tensor([[False, False, True], [False, True, True]])
    m = attention_mask_from_pad(pad)
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    assert torch.equal(m[:, 0, 0], ~pad)


def test_merge_masks() -> None:
    pad = torch.tensor([[False, False, False, True], [False, False, True, True]])
    structural = causal_mask(2, 4)
    assert merge_masks(None, None) is None
    assert merge_masks(structural, None) is structural
    only_pad = merge_masks(None, pad)
    assert only_pad.shape == (2, 1, 1, 4)
    assert torch.equal(only_pad, attention_mask_from_pad(pad))
    both = merge_masks(structural, pad)
    assert both.shape == (2, 1, 2, 4) and both.dtype == torch.bool
    for b in range(2):
        for i in range(2):
            for j in range(4):
                assert bool(both[b, 0, i, j]) == (bool(structural[i, j]) and not bool(pad[b, j]))

"""Attention masks: the one home of the masking conventions.

Convention (that of ``F.scaled_dot_product_attention``): a boolean attention mask is True
where a query **may attend** to a key. Masks are built as (Lq, Lk) and broadcast to
(B, H, Lq, Lk). A padding indicator is named ``*_pad`` and is True **where padding is**.
Every conversion between the two lives in this file.

Alignment: a query block of length Lq is always the *last* Lq positions of the Lk keys
(bottom-right alignment), so the same functions are right for a full square
(Lq == Lk) and for one new query over a KV cache (Lq == 1). Query row ``i`` sits at the
absolute position ``i + Lk - Lq``. (SDPA's ``is_causal=True`` is top-left aligned and is
only used when Lq == Lk; see attention.py.)

Worked example (tests/test_masks.py): scores [[2,1,3],[1,2,4],[2,0,1]] under the causal
mask give softmax rows [1,0,0], [0.269,0.731,0], [0.665,0.090,0.245].
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "attention_mask_from_pad",
    "block_causal_mask",
    "causal_mask",
    "decoder_self_mask",
    "lengths_to_pad",
    "merge_masks",
    "pad_from_ids",
    "sliding_window_mask",
    "to_additive",
]


def _positions(q_len: int, k_len: int, device: torch.device | None) -> tuple[Tensor, Tensor]:
    """Absolute query positions (Lq, 1) and key positions (1, Lk), bottom-right aligned."""
    if q_len > k_len:
        raise ValueError(f"q_len ({q_len}) must not exceed k_len ({k_len})")
    q_pos = torch.arange(k_len - q_len, k_len, device=device).unsqueeze(1)  # (Lq, 1)
    k_pos = torch.arange(k_len, device=device).unsqueeze(0)  # (1, Lk)
    return q_pos, k_pos


def causal_mask(q_len: int, k_len: int, *, device: torch.device | None = None) -> Tensor:
    """Query at absolute position i sees keys j <= i.

    Equal to ``tril(ones(Lq, Lk), diagonal=Lk - Lq)``.

    Returns:
        Bool tensor (Lq, Lk), True = may attend.
    """
    q_pos, k_pos = _positions(q_len, k_len, device)
    return k_pos <= q_pos


def sliding_window_mask(
    q_len: int, k_len: int, window: int, *, device: torch.device | None = None
) -> Tensor:
    """Causal, and only the last ``window`` keys: query i sees j with i - window < j <= i.

    Returns:
        Bool tensor (Lq, Lk), True = may attend.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    q_pos, k_pos = _positions(q_len, k_len, device)
    return (k_pos <= q_pos) & (k_pos > q_pos - window)


def block_causal_mask(
    q_len: int,
    k_len: int,
    block_size: int,
    prev_blocks: int,
    *,
    device: torch.device | None = None,
) -> Tensor:
    """Causal inside each block; a query also sees up to ``prev_blocks`` earlier blocks.

    Positions are grouped into blocks of ``block_size`` (block of position p is
    ``p // block_size``). Query i sees key j when j <= i and
    ``block(i) - prev_blocks <= block(j)``. ``prev_blocks=0`` keeps attention inside the
    block; a large ``prev_blocks`` gives the plain causal mask.

    Returns:
        Bool tensor (Lq, Lk), True = may attend.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if prev_blocks < 0:
        raise ValueError(f"prev_blocks must be >= 0, got {prev_blocks}")
    q_pos, k_pos = _positions(q_len, k_len, device)
    return (k_pos <= q_pos) & (k_pos // block_size >= q_pos // block_size - prev_blocks)


def decoder_self_mask(
    kind: str,
    q_len: int,
    k_len: int,
    *,
    window: int = 0,
    block_size: int = 0,
    prev_blocks: int = 0,
    device: torch.device | None = None,
) -> Tensor:
    """The decoder self-attention mask named by ``kind`` (``causal``, ``window``, ``block``)."""
    if kind == "causal":
        return causal_mask(q_len, k_len, device=device)
    if kind == "window":
        return sliding_window_mask(q_len, k_len, window, device=device)
    if kind == "block":
        return block_causal_mask(q_len, k_len, block_size, prev_blocks, device=device)
    raise ValueError(f"unknown decoder mask {kind!r}; expected causal, window or block")


def pad_from_ids(ids: Tensor, pad_id: int) -> Tensor:
    """Padding indicator of token ids: (B, L) ids -> (B, L) bool, True where padding."""
    return ids.eq(pad_id)


def lengths_to_pad(lens: Tensor, max_len: int | None = None) -> Tensor:
    """Padding indicator from lengths: (B,) -> (B, L) bool, True at positions >= length."""
    max_len = int(lens.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lens.device).unsqueeze(0) >= lens.unsqueeze(1)


def attention_mask_from_pad(key_pad: Tensor) -> Tensor:
    """Key padding (B, Lk), True = padding -> attention mask (B, 1, 1, Lk), True = may attend."""
    return (~key_pad)[:, None, None, :]


def merge_masks(attn_mask: Tensor | None, key_pad: Tensor | None) -> Tensor | None:
    """Combine a (Lq, Lk) structural mask and a (B, Lk) key padding into one boolean mask.

    Returns:
        None when both are None; else a bool mask broadcastable to (B, H, Lq, Lk).
    """
    if key_pad is None:
        return attn_mask
    pad_mask = attention_mask_from_pad(key_pad)  # (B, 1, 1, Lk)
    if attn_mask is None:
        return pad_mask
    return attn_mask[None, None] & pad_mask  # (B, 1, Lq, Lk)


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask (True = may attend) -> additive float mask (0 where allowed, -inf where hidden)."""
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))

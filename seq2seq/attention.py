"""Multi-head attention over ``F.scaled_dot_product_attention``, for self and cross attention.

Two modules share one core (:func:`attend`):

- :class:`SelfAttention` projects Q, K, V from the same sequence with one fused (3D, D)
  projection; with a cache it appends the new keys and values to the cached ones.
- :class:`CrossAttention` projects Q from the decoder and K, V from the encoder memory
  with one fused (2D, D) projection; K and V are computed once per sentence and cached.

``is_causal=True`` is passed to SDPA only when it is exactly right: a square causal mask
and no cache (SDPA's causal mask is top-left aligned). Everything else gets an explicit
boolean mask from masks.py. ``need_weights=True`` takes a slower explicit path that also
returns the attention weights (B, H, Lq, Lk), for plots and tests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CrossAttention", "SelfAttention", "attend"]


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    is_causal: bool = False,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention.

    Args:
        q: (B, H, Lq, Dh). k, v: (B, H, Lk, Dh).
        mask: bool, broadcastable to (B, H, Lq, Lk), True = may attend; or None.
        is_causal: use SDPA's built-in (top-left) causal mask; only with Lq == Lk, mask None.
        dropout: attention dropout probability (pass 0.0 at eval time).
        need_weights: also return the weights (B, H, Lq, Lk) via the explicit path.

    Returns:
        (output (B, H, Lq, Dh), weights or None).
    """
    if is_causal and (mask is not None or q.size(-2) != k.size(-2)):
        raise ValueError("is_causal needs a square score matrix and no other mask")
    if not need_weights:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal
        )
        return out, None
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, Lq, Lk)
    if is_causal:
        lq, lk = scores.shape[-2:]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # Softmax in at least float32 (fp16/bf16 are upcast; float64 keeps its precision).
    weights = scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
    weights = weights.to(q.dtype)
    if mask is not None:
        # A row with every key hidden gives NaN above; SDPA returns zeros there: match it.
        weights = weights.masked_fill(~mask, 0.0)
    if dropout > 0.0:
        weights_d = F.dropout(weights, p=dropout)
        return weights_d @ v, weights
    return weights @ v, weights


def _split_heads(x: Tensor, n_heads: int) -> Tensor:
    b, length, d = x.shape
    return x.view(b, length, n_heads, d // n_heads).transpose(1, 2)  # (B, H, L, Dh)


def _merge_heads(x: Tensor) -> Tensor:
    b, h, length, dh = x.shape
    return x.transpose(1, 2).reshape(b, length, h * dh)  # (B, L, D)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused QKV projection and an optional KV cache."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """Attend from ``x`` to itself (and to the cached past, when given).

        Args:
            x: (B, L, D) the new positions.
            mask: bool (L, Lk) or broadcastable to (B, H, L, Lk), Lk = cached + L.
            is_causal: SDPA's causal flag (only without a cache and with mask None).
            cache: (K, V) of earlier positions, each (B, H, Lpast, Dh), or None.
            need_weights: also return the weights (B, H, L, Lk).

        Returns:
            (output (B, L, D), weights or None, the new (K, V) including these positions).
        """
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        q, k, v = (_split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, L, Dh)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)  # (B, H, Lpast + L, Dh)
            v = torch.cat([cache[1], v], dim=2)
        out, weights = attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        return self.out_proj(_merge_heads(out)), weights, (k, v)


class CrossAttention(nn.Module):
    """Multi-head attention from decoder positions to the encoder memory."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Project the encoder memory (B, S, D) once into (K, V), each (B, H, S, Dh)."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return _split_heads(k, self.n_heads), _split_heads(v, self.n_heads)

    def forward(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        *,
        mask: Tensor | None,
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (B, T, D) to the memory's (K, V); ``mask`` hides source padding.

        ``group`` consecutive rows of ``x`` share one memory row (B = M * group; the K beams
        of a sentence): their queries are attended together, as one row of length group * T.

        Returns:
            (output (B, T, D), weights (B, H, T, S) or None).
        """
        q = _split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, Dh)
        b, h, t, dh = q.shape
        if group > 1:  # (M * G, H, T, Dh) -> (M, H, G * T, Dh)
            q = q.view(b // group, group, h, t, dh).transpose(1, 2).reshape(-1, h, group * t, dh)
        out, weights = attend(
            q,
            memory_kv[0],
            memory_kv[1],
            mask=mask,
            dropout=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        if group > 1:  # back to (B, H, T, .)
            out = _ungroup(out, group, t)
            weights = None if weights is None else _ungroup(weights, group, t)
        return self.out_proj(_merge_heads(out)), weights


def _ungroup(x: Tensor, group: int, t: int) -> Tensor:
    """(M, H, G * T, E) -> (M * G, H, T, E)."""
    m, h, _, e = x.shape
    return x.view(m, h, group, t, e).transpose(1, 2).reshape(m * group, h, t, e)

"""Multi-head attention over ``F.scaled_dot_product_attention``, for self and cross attention.

Two modules share one core (:func:`attend`):

- :class:`SelfAttention` projects Q, K, V from the same sequence with one fused (3D, D)
  projection; with a cache it appends the new keys and values to the cached ones.
- :class:`CrossAttention` projects Q from the decoder and K, V from the encoder memory
  with one fused (2D, D) projection; K and V are computed once per sentence and cached.

``is_causal=True`` is passed to SDPA only when it is exactly right: a square causal mask
and no cache (SDPA's causal mask is top-left aligned). Everything else gets an explicit
boolean mask from masks.py. ``need_weights=True`` takes the explicit path (two batched
multiplies and a softmax), which also returns the attention weights (B, H, Lq, Lk), for plots
and tests; on the CPU that path also runs decoding steps, and short sentences in training
(forward and backward), where it is faster than SDPA's kernel.

:class:`KVCache` holds the decoder's self-attention keys and values during incremental
decoding in preallocated, time-major buffers: a step writes its position in place instead of
concatenating (which copies the whole cache), and a beam reorder is one ``index_select`` into
a spare buffer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.shape_buckets import bucketed, float32_attention

__all__ = ["CrossAttention", "KVCache", "KVSlot", "SelfAttention", "attend"]


SMALL_QUERY = 8
"""Calls with at most this many queries per row run the explicit path on the CPU (see attend)."""

SHORT_KEYS = 40
"""Calls with at most this many keys run the explicit path on the CPU when autograd records
them (training; see attend)."""


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
        need_weights: also return the weights (B, H, Lq, Lk) via the explicit path (also
            taken, without returning them, on the CPU for up to ``SMALL_QUERY`` queries
            without dropout, or up to ``SHORT_KEYS`` keys in training).

    Returns:
        (output (B, H, Lq, Dh), weights or None).
    """
    if is_causal and (mask is not None or q.size(-2) != k.size(-2)):
        raise ValueError("is_causal needs a square score matrix and no other mask")
    if float32_attention(q):  # CPU bf16 autocast: SDPA's float32 kernel (see shape_buckets)
        with torch.autocast("cpu", enabled=False):
            return attend(
                q.float(), k.float(), v.float(), mask=mask, is_causal=is_causal,
                dropout=dropout, need_weights=need_weights,
            )  # fmt: skip
    # On the CPU, SDPA's kernel is slower than two batched multiplies and a softmax for a
    # decoding step's few queries per row (1; the K beams of a sentence in cross-attention:
    # benchmarks/profile_step.py) and, forward and backward, for short sentences (up to
    # SHORT_KEYS keys, when autograd records: docs/benchmarks.md, "Attention on short
    # sentences"; a forward alone is faster on SDPA's kernel); such calls take the explicit path.
    explicit = q.device.type == "cpu" and (
        (q.size(-2) <= SMALL_QUERY and dropout == 0.0)
        or (k.size(-2) <= SHORT_KEYS and q.requires_grad and torch.is_grad_enabled())
    )
    if not need_weights and not explicit:
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
        return weights_d @ v, weights if need_weights else None
    return weights @ v, weights if need_weights else None


class KVCache:
    """Self-attention keys and values of the target positions so far, for every decoder layer.

    Each layer's K and V live in a flat buffer viewed as (capacity, N, H, Dh), time first: the
    first :attr:`length` positions are filled. Appending a step writes one (N, H, Dh) slice in
    place; the attention reads the permuted view (N, H, length, Dh) (SDPA takes the strides
    as they are); selecting rows (beam reorder, dropping finished sentences) is one
    ``index_select`` over the filled positions into another buffer, whose first
    ``length * N' * H * Dh`` elements are again a contiguous (length, N', H, Dh) block. The
    capacity doubles when a step needs more positions (a copy of the filled part). Buffers are
    allocated at the first write, with the keys' dtype, device and head shape.

    A cache is shared by the decoder states that read it: a state knows its own length, and
    may append in place only while the cache's :attr:`length` is still its own (the frontier,
    :meth:`holds`). A second step from the same state finds the frontier moved and copies
    (copy-on-write), so states stay values: an append never changes positions a state already
    has. Only :meth:`select` with ``recycle=True`` writes into buffers an older state may still
    read; its caller promises to use none of the states that read this cache any more.

    Args:
        n_layers: decoder layers.
        rows: N, decoder rows.
        capacity: positions to allocate room for at first (grown on demand).
    """

    def __init__(self, *, n_layers: int, rows: int, capacity: int = 16) -> None:
        self.n_layers = n_layers
        self.rows = rows
        self.capacity = max(capacity, 1)
        self.length = 0
        self._bufs: list[Tensor] | None = None  # 2 per layer: K, V (flat)
        self._grids: list[Tensor] = []  # the same as (capacity, N, H, Dh) views
        self._spare: list[Tensor] | None = None  # recycled buffers for the next select
        self._head_shape = (0, 0)  # (H, Dh)

    def _view(self, buf: Tensor, capacity: int, rows: int) -> Tensor:
        h, dh = self._head_shape
        return buf[: capacity * rows * h * dh].view(capacity, rows, h, dh)  # (cap, N, H, Dh)

    def _set_bufs(self, bufs: list[Tensor]) -> None:
        self._bufs = bufs
        self._grids = [self._view(b, self.capacity, self.rows) for b in bufs]

    def _filled(self, j: int, length: int) -> Tensor:
        """Buffer ``j`` (layer j // 2, K if j is even else V) as (length, N, H, Dh)."""
        return self._grids[j][:length]

    def _size(self, capacity: int, rows: int) -> int:
        return capacity * rows * self._head_shape[0] * self._head_shape[1]

    def views(self) -> list[tuple[Tensor, Tensor]]:
        """Per layer (K, V), each an (N, H, length, Dh) view of the filled positions."""
        assert self._bufs is not None, "nothing written yet"
        out = [self._filled(j, self.length).permute(1, 2, 0, 3) for j in range(len(self._bufs))]
        return list(zip(out[0::2], out[1::2]))

    def holds(self, kv: list[tuple[Tensor, Tensor]] | None) -> bool:
        """Whether ``kv`` (a state's ``self_kv``) are this cache's views at its frontier."""
        if kv is None or self._bufs is None or len(kv) != self.n_layers:
            return False
        k, v = kv[0]
        return (
            k.size(2) == self.length
            and k.size(0) == self.rows
            and k.data_ptr() == self._bufs[0].data_ptr()
            and v.data_ptr() == self._bufs[1].data_ptr()
        )

    @classmethod
    def from_kv(cls, kv: list[tuple[Tensor, Tensor]], *, capacity: int = 16) -> KVCache:
        """A new cache holding copies of per-layer (K, V), each (N, H, t, Dh)."""
        rows, _, length, _ = kv[0][0].shape
        cache = cls(n_layers=len(kv), rows=rows, capacity=max(capacity, length))
        cache._allocate(kv[0][0])
        for j, x in enumerate(x for pair in kv for x in pair):
            cache._filled(j, length).copy_(x.permute(2, 0, 1, 3))
        cache.length = length
        return cache

    def _allocate(self, like: Tensor) -> None:
        """The buffers, for keys shaped like ``like`` (N, H, T, Dh)."""
        self._head_shape = (like.size(1), like.size(3))
        size = self._size(self.capacity, self.rows)
        self._set_bufs([like.new_empty(size) for _ in range(2 * self.n_layers)])

    def _reserve(self, length: int) -> None:
        """Room for ``length`` positions: double the capacity, keeping what is filled."""
        assert self._bufs is not None
        capacity = max(length, 2 * self.capacity)
        bufs = []
        for j, old in enumerate(self._bufs):
            new = old.new_empty(self._size(capacity, self.rows))
            self._view(new, capacity, self.rows)[: self.length].copy_(self._filled(j, self.length))
            bufs.append(new)
        self._spare, self.capacity = None, capacity
        self._set_bufs(bufs)

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store a layer's new positions at the frontier; return its (K, V) including them.

        Args:
            layer: decoder layer index.
            k: (N, H, T, Dh) keys and values of positions ``length .. length + T - 1``.
            v: as ``k``.

        Returns:
            (K, V), each an (N, H, length + T, Dh) view. :meth:`advance` moves the frontier
            once every layer has written.
        """
        if k.size(0) != self.rows:
            raise ValueError(f"the cache has {self.rows} rows, the keys {k.size(0)}")
        if self._bufs is None:
            self._allocate(k)
        end = self.length + k.size(2)
        if end > self.capacity:
            self._reserve(end)
        out = []
        for j, x in ((2 * layer, k), (2 * layer + 1, v)):
            grid = self._grids[j]  # (capacity, N, H, Dh)
            if end == self.length + 1:  # one step: a (N, H, Dh) slice
                grid[self.length].copy_(x.select(2, 0))
            else:
                grid[self.length : end].copy_(x.permute(2, 0, 1, 3))
            out.append(grid[:end].permute(1, 2, 0, 3))
        return out[0], out[1]

    def advance(self, t: int) -> None:
        """Move the frontier by ``t`` positions (after every layer wrote them)."""
        self.length += t

    def select(self, index: Tensor, *, recycle: bool = False, first: int = 0) -> KVCache:
        """The rows ``index`` (N',) of the filled positions, as a new cache.

        ``first``: leave out the first positions too (the new cache holds ``length - first``).

        With ``recycle`` the new cache writes into this cache's spare buffers (if it has
        them) and takes this cache's buffers as its own spare, so that a beam search
        alternates between two sets of buffers instead of allocating; this cache is then
        spent (the states that read it must not be used again). Without it the new cache
        has fresh buffers and this one is untouched.
        """
        assert self._bufs is not None, "nothing written yet"
        rows = index.numel()
        if not 0 <= first <= self.length:
            raise ValueError(f"cannot leave out {first} of {self.length} positions")
        out = KVCache(n_layers=self.n_layers, rows=rows, capacity=self.capacity)
        out.length, out._head_shape = self.length - first, self._head_shape
        need = self._size(self.capacity, rows)
        bufs = self._spare if recycle else None
        if bufs is None or bufs[0].numel() < need:
            bufs = [b.new_empty(need) for b in self._bufs]
        out._set_bufs(bufs)
        for j, dst in enumerate(out._grids):
            # dst[:length] is contiguous: the index_select writes it directly
            src = self._filled(j, self.length)[first:]
            torch.index_select(src, 1, index, out=dst[: out.length])
        if recycle:
            out._spare, self._spare = self._bufs, None
            self.length = -1  # spent: no state holds it any more (see holds)
        return out


class KVSlot:
    """One layer's handle on a :class:`KVCache`: what :class:`SelfAttention` appends through."""

    def __init__(self, cache: KVCache, layer: int) -> None:
        self.cache = cache
        self.layer = layer

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (N, H, T, Dh) keys and values; (K, V) of all positions, (N, H, Lk, Dh)."""
        return self.cache.write(self.layer, k, v)


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
        cache: tuple[Tensor, Tensor] | KVSlot | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
        """Attend from ``x`` to itself (and to the cached past, when given).

        Args:
            x: (B, L, D) the new positions.
            mask: bool (L, Lk) or broadcastable to (B, H, L, Lk), Lk = cached + L.
            is_causal: SDPA's causal flag (only without a cache and with mask None).
            cache: (K, V) of earlier positions, each (B, H, Lpast, Dh), which are concatenated
                with the new ones; or a :class:`KVSlot`, which stores them in place; or None.
            need_weights: also return the weights (B, H, L, Lk).

        Returns:
            (output (B, L, D), weights or None, the new (K, V) including these positions).
        """
        q, k, v = bucketed(self.qkv_proj, x).chunk(3, dim=-1)
        q, k, v = (_split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, L, Dh)
        if isinstance(cache, KVSlot):
            k, v = cache.extend(k, v)  # (B, H, Lpast + L, Dh) views of the cache
        elif cache is not None:
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
        return bucketed(self.out_proj, _merge_heads(out)), weights, (k, v)


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
        k, v = bucketed(self.kv_proj, memory).chunk(2, dim=-1)
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
        q = _split_heads(bucketed(self.q_proj, x), self.n_heads)  # (B, H, T, Dh)
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
        return bucketed(self.out_proj, _merge_heads(out)), weights


def _ungroup(x: Tensor, group: int, t: int) -> Tensor:
    """(M, H, G * T, E) -> (M * G, H, T, E)."""
    m, h, _, e = x.shape
    return x.view(m, h, group, t, e).transpose(1, 2).reshape(m * group, h, t, e)

"""Building blocks: token embeddings, positions, dropout, feed-forward, encoder and decoder
layers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.attention import CrossAttention, SelfAttention
from seq2seq.model.shape_buckets import bucketed

__all__ = [
    "DecoderLayer",
    "Dropout",
    "EncoderLayer",
    "FeedForward",
    "LayerWeights",
    "PositionalEncoding",
    "TokenEmbedding",
    "dropout",
    "init_embedding",
    "marian_sinusoidal_table",
    "sinusoidal_table",
]

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}
"""Feed-forward activations by their config name (``model.activation``)."""

_DROP_SCALE = 1 << 15  # the CPU mask compares 15-bit uniform integers: p in steps of 1/32768


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout: zero each element with probability p, scale the rest by 1/(1-p).

    On the CPU this draws the mask from raw random bits (two 15-bit integers per int32
    draw) instead of F.dropout's slower per-element Bernoulli draw
    (benchmarks/train_throughput.py). The drop probability is p rounded to a multiple of
    1/32768, and the scale is exact for that rounded p, so the expected output still equals
    x. Elsewhere (CUDA) it is F.dropout.
    """
    if not training or p == 0.0:
        return x
    k = round(p * _DROP_SCALE)  # drop where the 15-bit integer is < k
    if x.device.type != "cpu" or not x.is_floating_point() or not 0 < k < _DROP_SCALE:
        return F.dropout(x, p, training=True)
    n = x.numel()
    bits = torch.empty((n + 1) // 2, dtype=torch.int32).random_()  # uniform in [0, 2**31)
    halves = bits.view(torch.int16)[:n].bitwise_and_(_DROP_SCALE - 1)  # uniform in [0, 2**15)
    keep = halves.ge(k).view(x.shape)
    return x * keep.to(x.dtype).mul_(_DROP_SCALE / (_DROP_SCALE - k))


class Dropout(nn.Module):
    """nn.Dropout with :func:`dropout`'s cheaper CPU mask."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """Sinusoidal positions (tensor2tensor layout): row p = [sin(p*w_0..), cos(p*w_0..)].

    Frequencies w_i = 10000 ** (-i / (d_model/2 - 1)), i < d_model/2. Returns (P, D).
    """
    half = d_model // 2
    scale = math.log(10000.0) / max(half - 1, 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -scale)  # (D/2,)
    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * freqs[None, :]  # (P, D/2)
    table = torch.cat([angles.sin(), angles.cos()], dim=1)
    if d_model % 2:
        table = F.pad(table, (0, 1))
    return table


def marian_sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """Marian's sinusoidal positions: row p = [sin(p*w_0..), cos(p*w_0..)], w_i = 10000 **
    (-2i / d_model).

    The frequencies differ from :func:`sinusoidal_table`'s (whose exponent divides by
    d_model/2 - 1), so a converted OPUS-MT model needs this table to reproduce its outputs.
    Computed in float64 (as Marian's own code does) and rounded once. Returns (P, D).
    """
    half = (d_model + 1) // 2  # an odd width has one more sine than cosine, as in Marian
    i = torch.arange(half, dtype=torch.float64)
    freqs = torch.pow(10000.0, -2.0 * i / d_model)  # (ceil(D/2),)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * freqs[None, :]
    table = torch.cat([angles.sin(), angles.cos()[:, : d_model // 2]], dim=1)
    return table.to(torch.float32)


_TABLES = {"sinusoidal": sinusoidal_table, "sinusoidal_marian": marian_sinusoidal_table}


def init_embedding(weight: Tensor, d_model: int) -> None:
    """Fill an embedding-like matrix from N(0, 1/d_model). Nothing to fill on the meta device
    (a shapes-only model): there torch's ``normal_`` would only cost the import of
    ``torch._dynamo``, seconds at the start of every command that loads a model."""
    if not weight.is_meta:
        nn.init.normal_(weight, mean=0.0, std=d_model**-0.5)


class TokenEmbedding(nn.Module):
    """Token embedding, multiplied by sqrt(d_model) unless ``scale`` is False; the padding row
    starts at zero."""

    def __init__(self, *, vocab_size: int, d_model: int, pad_id: int, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.pad_id = pad_id
        self.scale = math.sqrt(d_model) if scale else 1.0
        init_embedding(self.weight, d_model)
        with torch.no_grad():
            self.weight[pad_id].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """(B, L) ids -> (B, L, D)."""
        return F.embedding(ids, self.weight, padding_idx=self.pad_id) * self.scale


class PositionalEncoding(nn.Module):
    """Adds position information: a fixed sinusoidal table (``sinusoidal`` or
    ``sinusoidal_marian``) or learned embeddings; positions count from 0. With ``offset``,
    position p takes row p + offset of the sinusoidal table (``weight`` holds those rows)."""

    def __init__(self, *, kind: str, max_positions: int, d_model: int, offset: int = 0) -> None:
        super().__init__()
        if kind not in (*_TABLES, "learned"):
            raise ValueError(
                f"unknown positions {kind!r}; expected sinusoidal, sinusoidal_marian or learned"
            )
        self.kind = kind
        self.max_positions = max_positions
        if kind == "learned":
            self.weight = nn.Parameter(torch.empty(max_positions, d_model))
            init_embedding(self.weight, d_model)
        else:
            table = torch.empty(max_positions, d_model)
            if not table.is_meta:  # (a shapes-only model: nothing to compute, see init_embedding)
                # position p reads row p + offset of the table (M2M100's padding_idx + 1)
                table = _TABLES[kind](max_positions + offset, d_model)[offset:].contiguous()
            self.register_buffer("weight", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Position vectors for positions offset .. offset+length-1: (L, D)."""
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_positions "
                f"({self.max_positions})"
            )
        return self.weight[offset : offset + length]

    def at(self, positions: Tensor) -> Tensor:
        """Position vectors of one position per row: (B,) -> (B, D)."""
        if positions.numel() and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} exceeds max_positions ({self.max_positions})"
            )
        return self.weight.index_select(0, positions)


class FeedForward(nn.Module):
    """Position-wise feed-forward: Linear(D, d_ff) -> activation -> dropout -> Linear(d_ff, D)."""

    def __init__(
        self, *, d_model: int, d_ff: int, activation: str, activation_dropout: float
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}"
            )
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        return bucketed(self._rows, x)

    def _rows(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


@dataclass
class LayerWeights:
    """Attention weights of one layer, for plots and tests (each (B, H, Lq, Lk) or None)."""

    self_attn: Tensor | None = None
    cross_attn: Tensor | None = None


class _Residual(nn.Module):
    """x + dropout(f(norm(x))) for pre-norm, norm(x + dropout(f(x))) for post-norm."""

    def __init__(self, *, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def pre(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        out = x + self.dropout(y)
        return out if self.norm_first else self.norm(out)


class EncoderLayer(nn.Module):
    """Bidirectional self-attention (source padding hidden) + feed-forward."""

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation: str,
        norm_first: bool,
    ) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model=d_model, n_heads=n_heads, dropout=attention_dropout)
        self.self_res = _Residual(d_model=d_model, dropout=dropout, norm_first=norm_first)
        self.ff = FeedForward(
            d_model=d_model, d_ff=d_ff, activation=activation, activation_dropout=activation_dropout
        )
        self.ff_res = _Residual(d_model=d_model, dropout=dropout, norm_first=norm_first)

    def forward(
        self, x: Tensor, *, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, LayerWeights]:
        """x: (B, S, D); mask: (B, 1, 1, S) bool from the source padding, or None."""
        y, w, _ = self.self_attn(self.self_res.pre(x), mask=mask, need_weights=need_weights)
        x = self.self_res.post(x, y)
        x = self.ff_res.post(x, self.ff(self.ff_res.pre(x)))
        return x, LayerWeights(self_attn=w)


class DecoderLayer(nn.Module):
    """Masked self-attention + cross-attention on the memory + feed-forward."""

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation: str,
        norm_first: bool,
    ) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model=d_model, n_heads=n_heads, dropout=attention_dropout)
        self.self_res = _Residual(d_model=d_model, dropout=dropout, norm_first=norm_first)
        self.cross_attn = CrossAttention(
            d_model=d_model, n_heads=n_heads, dropout=attention_dropout
        )
        self.cross_res = _Residual(d_model=d_model, dropout=dropout, norm_first=norm_first)
        self.ff = FeedForward(
            d_model=d_model, d_ff=d_ff, activation=activation, activation_dropout=activation_dropout
        )
        self.ff_res = _Residual(d_model=d_model, dropout=dropout, norm_first=norm_first)

    def forward(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        *,
        self_mask: Tensor | None,
        is_causal: bool,
        cross_mask: Tensor | None,
        cache: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[Tensor, LayerWeights, tuple[Tensor, Tensor]]:
        """One decoder layer.

        Args:
            x: (B, T, D) new target positions.
            memory_kv: the cross-attention (K, V) of the memory, each (B, H, S, Dh).
            self_mask: (T, Tk) bool structural mask, or None with ``is_causal``.
            is_causal: use SDPA's causal flag (square, no cache).
            cross_mask: (B, 1, 1, S) bool from the source padding, or None.
            cache: self-attention (K, V) of earlier positions, or None.
            group: consecutive rows of x that share one memory row (B = M * group).

        Returns:
            (output (B, T, D), the layer's weights, the new self-attention (K, V)).
        """
        y, w_self, kv = self.self_attn(
            self.self_res.pre(x),
            mask=self_mask,
            is_causal=is_causal,
            cache=cache,
            need_weights=need_weights,
        )
        x = self.self_res.post(x, y)
        y, w_cross = self.cross_attn(
            self.cross_res.pre(x),
            memory_kv,
            mask=cross_mask,
            need_weights=need_weights,
            group=group,
        )
        x = self.cross_res.post(x, y)
        x = self.ff_res.post(x, self.ff(self.ff_res.pre(x)))
        return x, LayerWeights(self_attn=w_self, cross_attn=w_cross), kv

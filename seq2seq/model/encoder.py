"""The encoder: bidirectional self-attention over the source; only source padding is hidden."""

from __future__ import annotations

from torch import Tensor, nn

from seq2seq.model.layers import Dropout, EncoderLayer, PositionalEncoding, TokenEmbedding
from seq2seq.model.masks import merge_masks

__all__ = ["Encoder"]


class Encoder(nn.Module):
    """Stack of bidirectional self-attention layers over embedded source tokens."""

    def __init__(
        self,
        *,
        embedding: TokenEmbedding,
        positions: PositionalEncoding,
        n_layers: int,
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
        self.embedding = embedding
        self.positions = positions
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(
                d_model=d_model,
                n_heads=n_heads,
                d_ff=d_ff,
                dropout=dropout,
                attention_dropout=attention_dropout,
                activation_dropout=activation_dropout,
                activation=activation,
                norm_first=norm_first,
            )
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else None

    def forward(
        self, src_ids: Tensor, src_pad: Tensor, *, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """(B, S) ids and (B, S) padding -> memory (B, S, D) and per-layer weights."""
        x = self.embedding(src_ids) + self.positions(src_ids.size(1))  # (B, S, D)
        x = self.dropout(x)
        # Without padding in the batch SDPA runs mask-free (its fastest path).
        mask = merge_masks(None, src_pad) if bool(src_pad.any()) else None  # (B, 1, 1, S)
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            if need_weights:
                weights.append(w.self_attn)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, weights

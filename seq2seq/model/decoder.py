"""The decoder: self-attention under the configured mask (causal, sliding window or block
causal), cross-attention to the whole non-padded source, and feed-forward, over the whole
target (teacher forcing) or the new positions of an incremental step. Target ids are embedded
by :meth:`Decoder.embed`, the one place that knows which row the start id reads."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.data import BOS_ID, EOS_ID
from seq2seq.model.attention import KVCache, KVSlot
from seq2seq.model.decoder_state import memory_groups, select_memory_rows
from seq2seq.model.layers import (
    DecoderLayer,
    Dropout,
    LayerWeights,
    PositionalEncoding,
    TokenEmbedding,
)
from seq2seq.model.masks import decoder_self_mask, merge_masks

__all__ = ["Decoder"]


def _layer_cache(
    cache: list[tuple[Tensor, Tensor]] | None, layer: int
) -> tuple[Tensor, Tensor] | None:
    return None if cache is None else cache[layer]


class Decoder(nn.Module):
    """Stack of masked self-attention + cross-attention layers over embedded target tokens."""

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
        self_mask: str,
        window: int,
        block_size: int,
        prev_blocks: int,
        start_is_eos: bool = False,
    ) -> None:
        """``start_is_eos``: the start id (``<s>``) reads the ``</s>`` row
        (``model.start_is_eos``, M2M100/NLLB); the other arguments are the model config's."""
        super().__init__()
        if self_mask not in ("causal", "window", "block"):
            raise ValueError(
                f"unknown decoder mask {self_mask!r}; expected causal, window or block"
            )
        self.embedding = embedding
        self.positions = positions
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(
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
        self.self_mask = self_mask
        self.window = window
        self.block_size = block_size
        self.prev_blocks = prev_blocks
        self.start_is_eos = start_is_eos

    def embed(self, tgt_ids: Tensor) -> Tensor:
        """(B, T) target ids -> (B, T, D) token embeddings (positions not added).

        With ``start_is_eos`` the start id is looked up as ``</s>``: the decoder's first input
        is the ``</s>`` row, as in M2M100/NLLB, so training, validation, scoring, every
        search and the ONNX graph read one row, and the ``<s>`` row takes no gradient.
        """
        if self.start_is_eos:
            tgt_ids = tgt_ids.masked_fill(tgt_ids == BOS_ID, EOS_ID)
        return self.embedding(tgt_ids)

    def structural_mask(self, q_len: int, k_len: int, device: torch.device) -> Tensor:
        """The self-attention mask (Lq, Lk) for the last q_len of k_len target positions."""
        return decoder_self_mask(
            self.self_mask,
            q_len,
            k_len,
            window=self.window,
            block_size=self.block_size,
            prev_blocks=self.prev_blocks,
            device=device,
        )

    def memory_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per-layer cross-attention (K, V) of the memory (B, S, D): computed once per sentence."""
        return [layer.cross_attn.memory_kv(memory) for layer in self.layers]

    def forward(
        self,
        tgt_ids: Tensor,
        cross_kv: list[tuple[Tensor, Tensor]],
        src_pad: Tensor,
        *,
        cache: list[tuple[Tensor, Tensor]] | None = None,
        offset: int = 0,
        need_weights: bool = False,
        memory_rows: Tensor | None = None,
        kv_cache: KVCache | None = None,
        positions: Tensor | None = None,
        self_key_pad: Tensor | None = None,
    ) -> tuple[Tensor, list[tuple[Tensor, Tensor]], list[LayerWeights]]:
        """Decode new target positions.

        Args:
            tgt_ids: (B, T) token ids at absolute positions offset .. offset+T-1.
            cross_kv: from :meth:`memory_kv`, each (M, H, S, Dh).
            src_pad: (M, S) bool, True at source padding.
            cache: per-layer self-attention (K, V) of the earlier positions, or None.
            offset: absolute position of tgt_ids[:, 0].
            memory_rows: (B,) the memory row of each target row (see DecoderState);
                None: M = B, row i uses memory row i.
            kv_cache: instead of ``cache``, the earlier positions in a
                :class:`~seq2seq.model.attention.KVCache`; the new ones are written into it and its
                frontier advanced by T.
            positions: (B,) instead of ``offset``, each row's own absolute position of its
                one new token (T = 1): rows that started at different steps
                (seq2seq.decode.continuous). Causal mask only.
            self_key_pad: (B, Tk) with ``positions``: True at the cached keys a row must not
                see (the positions before its own start); Tk = cached + 1.

        Returns:
            (hidden states (B, T, D), per-layer new self (K, V), per-layer weights).
        """
        t = tgt_ids.size(1)
        if positions is not None:  # one new token per row, each at its own position
            if t != 1 or self.self_mask != "causal":
                raise ValueError("per-row positions need one new token and the causal mask")
            x = self.embed(tgt_ids) + self.positions.at(positions)[:, None]  # (B, 1, D)
        else:
            x = self.embed(tgt_ids) + self.positions(t, offset)  # (B, T, D)
        x = self.dropout(x)
        if kv_cache is not None:
            past = kv_cache.length
        else:
            past = 0 if cache is None else cache[0][0].size(2)
        k_len = past + t
        # SDPA's causal flag is top-left aligned: exactly right only for a square, cache-free mask.
        is_causal = self.self_mask == "causal" and past == 0 and not need_weights
        if is_causal or (self.self_mask == "causal" and t == 1):
            self_mask = None  # one causal query sees every key: SDPA's mask-free path
        else:
            # With a trimmed (sliding-window) cache the keys are the last k_len positions, so
            # the bottom-right aligned mask still sees the right relative positions.
            self_mask = self.structural_mask(t, k_len, x.device)  # (T, Tk)
            if bool(self_mask.all()):
                self_mask = None  # nothing hidden: SDPA's mask-free path
        if self_key_pad is not None:  # one causal query per row: only its own start hides keys
            if positions is None:
                raise ValueError("self_key_pad needs per-row positions")
            is_causal = False
            self_mask = ~self_key_pad[:, None, None, :] if bool(self_key_pad.any()) else None
        group = memory_groups(memory_rows, src_pad.size(0))
        if group is None:  # rows share memory rows irregularly: expand the memory to them
            src_pad, cross_kv = select_memory_rows(src_pad, cross_kv, memory_rows)
            group = 1
        cross_mask = merge_masks(None, src_pad) if bool(src_pad.any()) else None  # (M,1,1,S)
        new_cache, weights = [], []
        for i, layer in enumerate(self.layers):
            x, w, kv = layer(
                x,
                cross_kv[i],
                self_mask=self_mask,
                is_causal=is_causal,
                cross_mask=cross_mask,
                cache=KVSlot(kv_cache, i) if kv_cache is not None else _layer_cache(cache, i),
                need_weights=need_weights,
                group=group,
            )
            new_cache.append(kv)
            weights.append(w)
        if kv_cache is not None:
            kv_cache.advance(t)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, new_cache, weights

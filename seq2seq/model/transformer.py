"""The encoder-decoder Transformer (a plain nn.Module; no Lightning here).

- :class:`Encoder`: bidirectional self-attention; only source padding is hidden.
- :class:`Decoder`: self-attention under the configured mask (causal, sliding window or
  block causal) + cross-attention to the whole non-padded source + feed-forward.
- :class:`Seq2SeqTransformer`: both, the embeddings (optionally shared) and the output
  projection (optionally tied), teacher-forced ``forward`` and incremental ``decode_step``.

Incremental decoding contract (fairseq's): the cross-attention K/V of the memory are
computed once per sentence (:meth:`Seq2SeqTransformer.start_state`); each step appends one
position's self-attention K/V to the cache; :meth:`DecoderState.reorder` selects rows for
beam search (and drops finished sentences). With a sliding-window mask the cache keeps
only the keys that the window can still see.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.model.attention import KVCache, KVSlot
from seq2seq.model.layers import (
    DecoderLayer,
    Dropout,
    EncoderLayer,
    LayerWeights,
    PositionalEncoding,
    TokenEmbedding,
)
from seq2seq.model.masks import decoder_self_mask, merge_masks, pad_from_ids

__all__ = [
    "Decoder",
    "DecoderState",
    "Encoder",
    "ModelAttention",
    "Seq2SeqTransformer",
    "build_model",
    "memory_groups",
]


@dataclass
class DecoderState:
    """Everything incremental decoding carries from one step to the next.

    The encoder side is kept once per source sentence ("memory row") and shared by the
    decoder rows (beams) of that sentence: reordering beams never copies it, and the
    cross-attention of a sentence's beams runs as one batch row. Only when sentences leave
    (finished) is it compacted.

    Attributes:
        src_pad: (M, S) bool, True at source padding, per memory row.
        cross_kv: per decoder layer, the memory's (K, V), each (M, H, S, Dh); computed once.
        self_kv: per decoder layer, the (K, V) of the target positions so far, each
            (N, H, t', Dh) with t' <= t (a sliding window keeps only what it can see);
            None before the first step.
        position: absolute position of the next target token (tokens consumed so far).
        cross_attention: (N, S) cross-attention of the last step (last layer, mean over
            heads), filled only when the step was asked for weights.
        memory_rows: (N,) the memory row of each decoder row; None means row i uses memory
            row i (N = M).
        kv_cache: the preallocated buffers that ``self_kv`` are views of (see
            :class:`seq2seq.model.attention.KVCache`), or None. Only an accelerator: a step uses it
            when it still holds exactly ``self_kv`` and otherwise copies ``self_kv`` into a
            new one, so replacing ``self_kv`` by other tensors is always safe.
    """

    src_pad: Tensor
    cross_kv: list[tuple[Tensor, Tensor]]
    self_kv: list[tuple[Tensor, Tensor]] | None = None
    position: int = 0
    cross_attention: Tensor | None = None
    memory_rows: Tensor | None = None
    kv_cache: KVCache | None = None

    def reorder(self, index: Tensor, *, recycle: bool = False) -> DecoderState:
        """Select rows (N,) -> (N',) of the state: beam expansion, reordering, pruning.

        The decoder rows' caches are selected; the memory is only compacted when some
        sentence no longer has a row.

        Args:
            index: (N',) rows to keep, in order (repeats allowed).
            recycle: this state will not be used again (a search loop's ``state =
                reorder(state, index)``): the new state's self-attention cache may be written
                into the buffers of an earlier state instead of new ones (see
                :meth:`seq2seq.model.attention.KVCache.select`). Without it this state is untouched.
        """

        rows = index if self.memory_rows is None else self.memory_rows.index_select(0, index)
        src_pad, cross_kv = self.src_pad, self.cross_kv
        used = torch.unique(rows)  # sorted memory rows still referenced
        if used.numel() < src_pad.size(0):
            src_pad, cross_kv = _select_rows(src_pad, cross_kv, used)
            rows = torch.searchsorted(used, rows)
        kv_cache, self_kv = None, None
        if self.kv_cache is not None and self.kv_cache.holds(self.self_kv):
            kv_cache = self.kv_cache.select(index, recycle=recycle)
            self_kv = kv_cache.views()
        elif self.self_kv is not None:
            self_kv = _select_kv(self.self_kv, index)
        return DecoderState(
            src_pad=src_pad,
            cross_kv=cross_kv,
            self_kv=self_kv,
            position=self.position,
            cross_attention=None
            if self.cross_attention is None
            else self.cross_attention.index_select(0, index),
            memory_rows=rows,
            kv_cache=kv_cache,
        )

    def row_memory(self) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """(src_pad (N, S), cross_kv each (N, H, S, Dh)): the memory expanded to decoder rows."""
        if self.memory_rows is None:
            return self.src_pad, self.cross_kv
        return _select_rows(self.src_pad, self.cross_kv, self.memory_rows)


def _layer_cache(
    cache: list[tuple[Tensor, Tensor]] | None, layer: int
) -> tuple[Tensor, Tensor] | None:
    return None if cache is None else cache[layer]


def _select_kv(kv: list[tuple[Tensor, Tensor]], rows: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Rows ``rows`` of every (K, V) pair (dimension 0)."""
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in kv]


def _select_rows(
    src_pad: Tensor, cross_kv: list[tuple[Tensor, Tensor]], rows: Tensor
) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """Rows ``rows`` of the memory: its padding and every layer's (K, V)."""
    return src_pad.index_select(0, rows), _select_kv(cross_kv, rows)


def memory_groups(memory_rows: Tensor | None, n_memory: int) -> int | None:
    """How many consecutive decoder rows share each memory row, if they do so uniformly.

    1 when ``memory_rows`` is None (row i uses memory row i); k when ``memory_rows`` is
    ``arange(M).repeat_interleave(k)`` (beam search: the K beams of a sentence are adjacent);
    None otherwise (the memory must be expanded to the rows).
    """
    if memory_rows is None:
        return 1
    n = memory_rows.numel()
    if n_memory == 0 or n % n_memory:
        return None
    k = n // n_memory
    grouped = torch.arange(n_memory, device=memory_rows.device).repeat_interleave(k)
    return k if torch.equal(memory_rows, grouped) else None


@dataclass
class ModelAttention:
    """Per-layer attention weights of a teacher-forced pass, each (B, H, Lq, Lk)."""

    encoder: list[Tensor] = field(default_factory=list)
    decoder_self: list[Tensor] = field(default_factory=list)
    cross: list[Tensor] = field(default_factory=list)


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
    ) -> None:
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
            x = self.embedding(tgt_ids) + self.positions.at(positions)[:, None]  # (B, 1, D)
        else:
            x = self.embedding(tgt_ids) + self.positions(t, offset)  # (B, T, D)
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
            src_pad, cross_kv = _select_rows(src_pad, cross_kv, memory_rows)
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


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer translator.

    Teacher forcing: ``forward(src_ids, tgt_in) -> logits``. Incremental decoding:
    ``state = start_state(src_ids)`` then ``decode_step(prefix, state)`` per token, which
    is a step function for seq2seq.decode.search.
    """

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        d_model: int = 512,
        n_heads: int = 8,
        d_ff: int = 2048,
        n_encoder_layers: int = 6,
        n_decoder_layers: int = 6,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = True,
        positions: str = "sinusoidal",
        max_positions: int = 1024,
        share_embeddings: bool = True,
        tie_output: bool = True,
        decoder_mask: str = "causal",
        window: int = 16,
        block_size: int = 8,
        prev_blocks: int = 1,
    ) -> None:
        super().__init__()
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs one joint vocabulary "
                f"(source {src_vocab_size} != target {tgt_vocab_size})"
            )
        self.pad_id = pad_id
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.d_model = d_model
        self.n_heads = n_heads
        self.max_positions = max_positions
        tgt_embed = TokenEmbedding(vocab_size=tgt_vocab_size, d_model=d_model, pad_id=pad_id)
        src_embed = (
            tgt_embed
            if share_embeddings
            else TokenEmbedding(vocab_size=src_vocab_size, d_model=d_model, pad_id=pad_id)
        )
        common = dict(
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            norm_first=norm_first,
        )
        self.encoder = Encoder(
            embedding=src_embed,
            positions=PositionalEncoding(
                kind=positions, max_positions=max_positions, d_model=d_model
            ),
            n_layers=n_encoder_layers,
            **common,
        )
        self.decoder = Decoder(
            embedding=tgt_embed,
            positions=PositionalEncoding(
                kind=positions, max_positions=max_positions, d_model=d_model
            ),
            n_layers=n_decoder_layers,
            self_mask=decoder_mask,
            window=window,
            block_size=block_size,
            prev_blocks=prev_blocks,
            **common,
        )
        self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_output:
            self.output_proj.weight = tgt_embed.weight
        else:
            nn.init.normal_(self.output_proj.weight, mean=0.0, std=d_model**-0.5)
        self._init_linear()

    def _init_linear(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.output_proj:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    # ---- teacher forcing ----------------------------------------------------------------

    def encode(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S) source ids -> (memory (B, S, D), src_pad (B, S))."""
        src_pad = pad_from_ids(src_ids, self.pad_id)
        memory, _ = self.encoder(src_ids, src_pad)
        return memory, src_pad

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor) -> Tensor:
        """Teacher-forced decoder: (B, T) target inputs -> hidden states (B, T, D)."""
        hidden, _, _ = self.decoder(tgt_in, self.decoder.memory_kv(memory), src_pad)
        return hidden

    def project(self, hidden: Tensor) -> Tensor:
        """Hidden states (..., D) -> vocabulary logits (..., V)."""
        return self.output_proj(hidden)

    def forward(self, src_ids: Tensor, tgt_in: Tensor) -> Tensor:
        """(B, S) source ids, (B, T) target inputs (BOS first) -> logits (B, T, V)."""
        memory, src_pad = self.encode(src_ids)
        return self.project(self.decode(tgt_in, memory, src_pad))

    def forward_with_attention(
        self, src_ids: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, ModelAttention]:
        """Like forward, also returning every layer's attention weights (explicit, slower path)."""
        src_pad = pad_from_ids(src_ids, self.pad_id)
        memory, enc_w = self.encoder(src_ids, src_pad, need_weights=True)
        hidden, _, dec_w = self.decoder(
            tgt_in, self.decoder.memory_kv(memory), src_pad, need_weights=True
        )
        attn = ModelAttention(
            encoder=enc_w,
            decoder_self=[w.self_attn for w in dec_w],
            cross=[w.cross_attn for w in dec_w],
        )
        return self.project(hidden), attn

    # ---- incremental decoding -----------------------------------------------------------

    def start_state(self, src_ids: Tensor) -> DecoderState:
        """Encode the source and compute the cross-attention K/V once: (B, S) -> state."""
        memory, src_pad = self.encode(src_ids)
        return DecoderState(src_pad=src_pad, cross_kv=self.decoder.memory_kv(memory))

    def decode_step(
        self, prefix: Tensor, state: DecoderState, *, need_weights: bool = False
    ) -> tuple[Tensor, DecoderState]:
        """One step with the KV cache: log-probs for the token after ``prefix``.

        Args:
            prefix: (N, t) ids so far, BOS included; only prefix[:, state.position:] is new
                (normally its last column).
            state: from :meth:`start_state` or the previous step.
            need_weights: keep the last layer's cross-attention (N, S) in the new state.

        Returns:
            (log-probs (N, V) in float32, the new state).
        """
        new_ids = prefix[:, state.position :]  # (N, t_new), normally t_new = 1
        kv_cache = None
        if self.decoder.self_mask != "window":  # (a window trims its cache instead)
            kv_cache = state.kv_cache
            if kv_cache is None or not kv_cache.holds(state.self_kv):  # copy-on-write
                if state.self_kv is None:
                    kv_cache = KVCache(n_layers=len(self.decoder.layers), rows=prefix.size(0))
                else:
                    kv_cache = KVCache.from_kv(state.self_kv)
        hidden, kv, weights = self.decoder(
            new_ids,
            state.cross_kv,
            state.src_pad,
            cache=None if kv_cache is not None else state.self_kv,
            offset=state.position,
            need_weights=need_weights,
            memory_rows=state.memory_rows,
            kv_cache=kv_cache,
        )
        if self.decoder.self_mask == "window":
            keep = self.decoder.window - 1  # keys the next query can still see besides itself
            kv = [
                (k[:, :, max(k.size(2) - keep, 0) :], v[:, :, max(v.size(2) - keep, 0) :])
                for k, v in kv
            ]
        log_probs = self.project(hidden[:, -1]).float().log_softmax(dim=-1)  # (N, V)
        cross = weights[-1].cross_attn[:, :, -1].mean(dim=1) if need_weights else None  # (N, S)
        return log_probs, replace(
            state,
            self_kv=kv,
            position=prefix.size(1),
            cross_attention=cross,
            kv_cache=kv_cache,
        )

    def decode_step_uncached(
        self, prefix: Tensor, state: DecoderState, *, need_weights: bool = False
    ) -> tuple[Tensor, DecoderState]:
        """Same contract as :meth:`decode_step`, recomputing the whole prefix (no KV cache).

        The baseline for benchmarks and the reference the cached path is tested against.
        """
        hidden, _, weights = self.decoder(
            prefix,
            state.cross_kv,
            state.src_pad,
            need_weights=need_weights,
            memory_rows=state.memory_rows,
        )
        log_probs = self.project(hidden[:, -1]).float().log_softmax(dim=-1)
        cross = weights[-1].cross_attn[:, :, -1].mean(dim=1) if need_weights else None
        return log_probs, replace(state, position=prefix.size(1), cross_attention=cross)


def build_model(
    cfg: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int
) -> Seq2SeqTransformer:
    """Build the model that ``cfg`` describes for the given vocabularies."""
    return Seq2SeqTransformer(
        src_vocab_size=src_vocab_size,
        tgt_vocab_size=tgt_vocab_size,
        pad_id=pad_id,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
        n_encoder_layers=cfg.n_encoder_layers,
        n_decoder_layers=cfg.n_decoder_layers,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        activation=cfg.activation,
        norm_first=cfg.norm_first,
        positions=cfg.positions,
        max_positions=cfg.max_positions,
        share_embeddings=cfg.share_embeddings,
        tie_output=cfg.tie_output,
        decoder_mask=cfg.decoder_mask,
        window=cfg.window,
        block_size=cfg.block_size,
        prev_blocks=cfg.prev_blocks,
    )

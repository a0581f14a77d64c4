"""The encoder-decoder Transformer (a plain nn.Module; no Lightning here).

:class:`Seq2SeqTransformer` holds the :class:`~seq2seq.model.encoder.Encoder`, the
:class:`~seq2seq.model.decoder.Decoder`, the embeddings (optionally shared) and the output
projection (optionally tied); it runs teacher-forced ``forward`` and incremental
``decode_step`` (the state it carries: :mod:`seq2seq.model.decoder_state`).
:func:`build_model` builds it from the config's ``model`` section.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.data import BOS_ID
from seq2seq.model.attention import KVCache
from seq2seq.model.decoder import Decoder
from seq2seq.model.decoder_state import DecoderState
from seq2seq.model.encoder import Encoder
from seq2seq.model.layers import PositionalEncoding, TokenEmbedding, init_embedding
from seq2seq.model.marian import START_BIAS
from seq2seq.model.masks import pad_from_ids

__all__ = ["ModelAttention", "Seq2SeqTransformer", "build_model"]


@dataclass
class ModelAttention:
    """Per-layer attention weights of a teacher-forced pass, each (B, H, Lq, Lk)."""

    encoder: list[Tensor] = field(default_factory=list)
    decoder_self: list[Tensor] = field(default_factory=list)
    cross: list[Tensor] = field(default_factory=list)


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer translator.

    Teacher forcing: ``forward(src_ids, tgt_in) -> logits``. Incremental decoding:
    ``state = start_state(src_ids)`` then ``decode_step(prefix, state)`` per token, which
    is a step function for the searches in seq2seq.decode.
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
        position_offset: int = 0,
        share_embeddings: bool = True,
        tie_output: bool = True,
        scale_embeddings: bool = True,
        final_logits_bias: bool = False,
        decoder_mask: str = "causal",
        window: int = 16,
        block_size: int = 8,
        prev_blocks: int = 1,
        start_is_eos: bool = False,
        weights_follow: bool = False,
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
        tgt_embed = TokenEmbedding(
            vocab_size=tgt_vocab_size, d_model=d_model, pad_id=pad_id, scale=scale_embeddings
        )
        src_embed = (
            tgt_embed
            if share_embeddings
            else TokenEmbedding(
                vocab_size=src_vocab_size, d_model=d_model, pad_id=pad_id, scale=scale_embeddings
            )
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
                kind=positions,
                max_positions=max_positions,
                d_model=d_model,
                offset=position_offset,
            ),
            n_layers=n_encoder_layers,
            **common,
        )
        self.decoder = Decoder(
            embedding=tgt_embed,
            positions=PositionalEncoding(
                kind=positions,
                max_positions=max_positions,
                d_model=d_model,
                offset=position_offset,
            ),
            n_layers=n_decoder_layers,
            self_mask=decoder_mask,
            window=window,
            block_size=block_size,
            prev_blocks=prev_blocks,
            start_is_eos=start_is_eos,
            **common,
        )
        if tie_output and weights_follow:  # a (V, D) weight drawn only to be dropped: none
            with torch.device("meta"):
                self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        else:  # (the draw keeps the random stream of a model built for training as it was)
            self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=False)
        if tie_output:
            self.output_proj.weight = tgt_embed.weight
        else:
            init_embedding(self.output_proj.weight, d_model)
        # A buffer, not a parameter: fine-tuning leaves it as it is, as Marian's training does.
        self.final_logits_bias: Tensor | None
        if final_logits_bias:
            self.register_buffer("final_logits_bias", torch.zeros(tgt_vocab_size))  # (V,)
        else:
            self.final_logits_bias = None
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

    @property
    def start_is_eos(self) -> bool:
        """Whether the start id reads the ``</s>`` row (``model.start_is_eos``): the decoder's
        flag, so that the embedding and the projection's fixed start logit follow one setting."""
        return self.decoder.start_is_eos

    def project(self, hidden: Tensor) -> Tensor:
        """Hidden states (..., D) -> vocabulary logits (..., V).

        With ``start_is_eos`` the start id's logit is :data:`~seq2seq.model.marian.START_BIAS`
        alone (written in place: the ``<s>`` row, which the decoder no longer reads, takes no
        gradient from the output either, and is never generated).
        """
        logits = self.output_proj(hidden)
        if self.final_logits_bias is not None:
            logits = logits + self.final_logits_bias
        if self.start_is_eos:
            logits[..., BOS_ID] = START_BIAS  # (a fresh tensor: autograd needs none of it)
        return logits

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
    cfg: ModelConfig,
    *,
    src_vocab_size: int,
    tgt_vocab_size: int,
    pad_id: int,
    weights_follow: bool = False,
) -> Seq2SeqTransformer:
    """Build the model that ``cfg`` describes for the given vocabularies. ``weights_follow``:
    every weight is read from a file next (a model directory being loaded), so a tied output
    projection draws no (V, D) weight of its own, which loading would only drop (1 GB for an
    NLLB-600M-shaped model); a model built for training draws it, as it always has, so that
    its random stream, and so the model a seed trains, stay the same."""
    return Seq2SeqTransformer(
        weights_follow=weights_follow,
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
        position_offset=cfg.position_offset,
        share_embeddings=cfg.share_embeddings,
        tie_output=cfg.tie_output,
        scale_embeddings=cfg.scale_embeddings,
        final_logits_bias=cfg.final_logits_bias,
        decoder_mask=cfg.decoder_mask,
        window=cfg.window,
        block_size=cfg.block_size,
        prev_blocks=cfg.prev_blocks,
        start_is_eos=cfg.start_is_eos,
    )

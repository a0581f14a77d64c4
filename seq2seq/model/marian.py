"""The mapping between Hugging Face MarianMT (OPUS-MT) and our model, used both ways.

Conversion in (:mod:`seq2seq.model.convert`) and export out (:mod:`seq2seq.export.hf`) share
the three tables here: the config keys, the weight names, and the vocabulary order.

**Architecture.** A Marian model is our post-norm Transformer (``model.norm_first: false``)
with Marian's sinusoidal positions (``sinusoidal_marian``), the activation its config names,
embeddings scaled by sqrt(d_model) (``scale_embedding``), one embedding shared by both sides
and tied to the output, and a fixed ``final_logits_bias`` (``model.final_logits_bias``).
Marian's separate q/k/v projections are our fused ``qkv_proj`` (self-attention) and ``q_proj``
+ ``kv_proj`` (cross-attention).

**Separate vocabularies.** Some Marian models (``share_encoder_decoder_embeddings: false``)
have a source embedding (``vocab.json``) and a target one (``target_vocab.json``); they map to
``model.share_embeddings: false``, each side in its own order. An output projection that is
not tied to the target embedding (``tie_word_embeddings: false``) is ``model.tie_output:
false``.

**Vocabulary.** Marian numbers its pieces with ``</s>`` 0, ``<unk>`` 1 and ``<pad>`` last,
and its decoder starts from ``<pad>``: it has no BOS. Our ids are the toolkit's
(``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3), so a converted model has one row more
than the Marian one: our ``<s>`` row is a copy of Marian's ``<pad>`` row (the decoder's
first input is then the same vector), and its output bias is :data:`START_BIAS`, which keeps
it out of the softmax, so every log-probability equals Marian's. The other pieces keep
Marian's order. On export the ``<s>`` row becomes Marian's ``<pad>`` (the decoder start) and
our ``<pad>`` row is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = [
    "ACTIVATIONS",
    "START_BIAS",
    "from_marian_weights",
    "marian_layer_names",
    "marian_order",
    "marian_shapes",
    "our_order",
    "to_marian_layers",
    "to_marian_weights",
]

START_BIAS = -1.0e4
"""Output bias of a converted model's ``<s>`` row: exp(-1e4) is 0 in float32 (and -1e4 fits
float16), so the row adds nothing to the softmax; it is finite because a model directory
refuses non-finite weights."""

ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
"""Marian's ``activation_function`` -> our ``model.activation``."""

_ATTN = ("q_proj", "k_proj", "v_proj", "out_proj")


def our_order(n_marian: int, *, pad: int, unk: int, eos: int) -> list[int]:
    """For each of our ids, the Marian id whose row it takes (our ``<s>`` takes ``pad``'s).

    Returns:
        A list of ``n_marian + 1`` Marian ids: ``[pad, unk, pad, eos, the rest in order]``.
    """
    rest = [i for i in range(n_marian) if i not in (pad, unk, eos)]
    order = [0] * 4
    order[PAD_ID], order[UNK_ID], order[BOS_ID], order[EOS_ID] = pad, unk, pad, eos
    return order + rest


def marian_order(n_ours: int) -> list[int]:
    """For each Marian id of an exported model, our id whose row it takes.

    Marian's order is ``</s>`` 0, ``<unk>`` 1, our other pieces in order, then ``<pad>``
    (our ``<s>`` row: the decoder's start). Our ``<pad>`` row is not exported.
    """
    rest = [i for i in range(n_ours) if i not in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)]
    return [EOS_ID, UNK_ID, *rest, BOS_ID]


def marian_layer_names(side: str, i: int) -> dict[str, str]:
    """Our name -> Marian's for the norms and feed-forward of layer ``i`` (``encoder`` or
    ``decoder``); attention projections are fused and handled separately."""
    ours, theirs = f"{side}.layers.{i}.", f"model.{side}.layers.{i}."
    names = {
        "self_res.norm": "self_attn_layer_norm",
        "ff.linear1": "fc1",
        "ff.linear2": "fc2",
        "ff_res.norm": "final_layer_norm",
        "self_attn.out_proj": "self_attn.out_proj",
    }
    if side == "decoder":
        names |= {
            "cross_res.norm": "encoder_attn_layer_norm",
            "cross_attn.out_proj": "encoder_attn.out_proj",
        }
    return {
        f"{ours}{a}.{kind}": f"{theirs}{b}.{kind}"
        for a, b in names.items()
        for kind in ("weight", "bias")
    }


def _fused(side: str, i: int) -> list[tuple[str, list[str]]]:
    """Our fused projection names and the Marian projections they concatenate (rows)."""
    ours, theirs = f"{side}.layers.{i}.", f"model.{side}.layers.{i}."
    out = []
    for kind in ("weight", "bias"):
        out.append(
            (
                f"{ours}self_attn.qkv_proj.{kind}",
                [f"{theirs}self_attn.{p}.{kind}" for p in _ATTN[:3]],
            )
        )
        if side == "decoder":
            out.append((f"{ours}cross_attn.q_proj.{kind}", [f"{theirs}encoder_attn.q_proj.{kind}"]))
            out.append(
                (
                    f"{ours}cross_attn.kv_proj.{kind}",
                    [f"{theirs}encoder_attn.{p}.{kind}" for p in _ATTN[1:3]],
                )
            )
    return out


def _get(tensors: dict[str, Tensor], name: str, where: str) -> Tensor:
    if name not in tensors:
        raise UserError(f"{where}: weight {name} is missing")
    return tensors[name]


def from_marian_weights(
    tensors: Mapping[str, Tensor],
    *,
    n_encoder_layers: int,
    n_decoder_layers: int,
    order: list[int],
    where: str,
    tgt_order: list[int] | None = None,
    tied: bool = True,
) -> dict[str, Callable[[], Tensor]]:
    """Marian's tensors (names as ``save_pretrained`` writes them) -> our state dict, made
    one tensor at a time.

    Args:
        tensors: the Marian weights (a dict, or :class:`~seq2seq.model.hf_weights.HFWeights`,
            which reads each on lookup); ``model.shared.weight`` (or an ``embed_tokens``
            copy), or each side's ``embed_tokens``, and ``final_logits_bias`` included;
            position tables are ignored (computed).
        n_encoder_layers: encoder layers in the config.
        n_decoder_layers: decoder layers in the config.
        order: :func:`our_order` for the (source) vocabulary.
        where: the file the messages name.
        tgt_order: :func:`our_order` for the target vocabulary of a model with separate
            embeddings; None for one shared embedding.
        tied: the output projection is the target embedding (else ``lm_head.weight``).

    Returns:
        For each of our tensors (under the names
        :func:`seq2seq.model.directory.state_dict_for_saving` gives: a shared embedding once,
        as ``encoder.embedding.weight``), a function that makes it, float32 and contiguous,
        from the Marian tensors it needs; :func:`seq2seq.model.directory.save_model_dir`
        calls each as it writes it.

    Raises:
        UserError: a missing weight, naming it (when its tensor is made).
    """
    separate = tgt_order is not None
    index, tgt_index = torch.tensor(order), torch.tensor(order if tgt_order is None else tgt_order)

    def rows(names: list[str], idx: Tensor) -> Callable[[], Tensor]:
        def make() -> Tensor:
            name = next((n for n in names if n in tensors), names[-1])
            return _get(tensors, name, where).index_select(0, idx)

        return make

    def bias() -> Tensor:
        b = tensors.get("final_logits_bias")
        b = torch.zeros(len(tgt_index) - 1) if b is None else b.reshape(-1)
        b = b.index_select(0, tgt_index).clone()
        b[BOS_ID] = START_BIAS
        return b

    def one(name: str) -> Callable[[], Tensor]:
        return lambda: _get(tensors, name, where)

    def cat(parts: list[str]) -> Callable[[], Tensor]:
        return lambda: torch.cat([_get(tensors, p, where) for p in parts], dim=0)

    src_names = ["model.encoder.embed_tokens.weight"]
    if not separate:
        src_names.insert(0, "model.shared.weight")
    out: dict[str, Callable[[], Tensor]] = {"encoder.embedding.weight": rows(src_names, index)}
    if separate:
        out["decoder.embedding.weight"] = rows(["model.decoder.embed_tokens.weight"], tgt_index)
    if not tied:
        out["output_proj.weight"] = rows(["lm_head.weight"], tgt_index)
    out["final_logits_bias"] = bias
    for side, n in (("encoder", n_encoder_layers), ("decoder", n_decoder_layers)):
        for i in range(n):
            for ours, theirs in marian_layer_names(side, i).items():
                out[ours] = one(theirs)
            for ours, parts in _fused(side, i):
                out[ours] = cat(parts)
    return {k: _float32(f) for k, f in out.items()}


def _float32(make: Callable[[], Tensor]) -> Callable[[], Tensor]:
    return lambda: make().to(torch.float32).contiguous()


def to_marian_weights(
    state: dict[str, Tensor],
    *,
    n_encoder_layers: int,
    n_decoder_layers: int,
    shared: bool = True,
    tied: bool = True,
) -> dict[str, Tensor]:
    """Our state dict -> Marian's tensors (the inverse of :func:`from_marian_weights`).

    Args:
        state: our model's ``state_dict()`` (the tied names included or not).
        n_encoder_layers: encoder layers.
        n_decoder_layers: decoder layers.
        shared: one embedding for both sides (else each side's ``embed_tokens``).
        tied: the output projection is the target embedding (else ``lm_head.weight``).

    Returns:
        ``model.shared.weight`` (or each side's ``embed_tokens``), ``final_logits_bias``
        (1, V), ``lm_head.weight`` when not tied, and every layer's weights, in Marian's
        vocabulary order (:func:`marian_order`).
    """
    emb = state["encoder.embedding.weight"]
    index = torch.tensor(marian_order(emb.size(0)))
    tgt = emb if shared else state["decoder.embedding.weight"]
    tgt_index = torch.tensor(marian_order(tgt.size(0)))
    if shared:
        out = {"model.shared.weight": emb.index_select(0, index)}
    else:
        out = {
            "model.encoder.embed_tokens.weight": emb.index_select(0, index),
            "model.decoder.embed_tokens.weight": tgt.index_select(0, tgt_index),
        }
    if not tied:
        out["lm_head.weight"] = state["output_proj.weight"].index_select(0, tgt_index)
    bias = state.get("final_logits_bias")
    if bias is None:
        bias = torch.zeros(tgt.size(0))
    marian_bias = bias.index_select(0, tgt_index).clone()
    marian_bias[-1] = bias[PAD_ID]  # Marian's <pad> logit: our <pad>'s bias, not <s>'s
    out["final_logits_bias"] = marian_bias[None, :]
    out.update(
        to_marian_layers(
            state, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers
        )
    )
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in out.items()}


def to_marian_layers(
    state: Mapping[str, Tensor], *, n_encoder_layers: int, n_decoder_layers: int
) -> dict[str, Tensor]:
    """Our layers' tensors under Marian's (and M2M100's) names, the fused projections split
    (views of ``state``'s tensors; the inverse of the layer part of
    :func:`from_marian_weights`)."""
    d = state["encoder.embedding.weight"].size(1)
    out: dict[str, Tensor] = {}
    for side, n in (("encoder", n_encoder_layers), ("decoder", n_decoder_layers)):
        for i in range(n):
            for ours, theirs in marian_layer_names(side, i).items():
                out[theirs] = state[ours]
            for ours, parts in _fused(side, i):
                for j, part in enumerate(parts):
                    out[part] = state[ours][j * d : (j + 1) * d]
    return out


def marian_shapes(
    *,
    vocab_size: int,
    d_model: int,
    d_ff: int,
    n_encoder_layers: int,
    n_decoder_layers: int,
    decoder_vocab_size: int | None = None,
    tied: bool = True,
) -> dict[str, tuple[int, ...]]:
    """The shape of every Marian tensor a config describes (position tables excluded).

    Args:
        vocab_size: Marian's (source) vocabulary size.
        d_model: model width.
        d_ff: feed-forward width.
        n_encoder_layers: encoder layers.
        n_decoder_layers: decoder layers.
        decoder_vocab_size: the target vocabulary's size when the embeddings are separate;
            None for one shared embedding.
        tied: the output projection is the target embedding (else ``lm_head.weight``).
    """
    d = d_model
    if decoder_vocab_size is None:
        shapes: dict[str, tuple[int, ...]] = {"model.shared.weight": (vocab_size, d)}
        v_tgt = vocab_size
    else:
        shapes = {
            "model.encoder.embed_tokens.weight": (vocab_size, d),
            "model.decoder.embed_tokens.weight": (decoder_vocab_size, d),
        }
        v_tgt = decoder_vocab_size
    shapes["final_logits_bias"] = (1, v_tgt)
    if not tied:
        shapes["lm_head.weight"] = (v_tgt, d)
    by_suffix = {
        "fc1.weight": (d_ff, d),
        "fc1.bias": (d_ff,),
        "fc2.weight": (d, d_ff),
    }
    for side, n in (("encoder", n_encoder_layers), ("decoder", n_decoder_layers)):
        for i in range(n):
            names = list(marian_layer_names(side, i).values())
            names += [p for _, parts in _fused(side, i) for p in parts]
            for name in names:
                suffix = ".".join(name.split(".")[-2:])
                vector = "layer_norm" in name or name.endswith("bias")
                shapes[name] = by_suffix.get(suffix, (d,) if vector else (d, d))
    return shapes

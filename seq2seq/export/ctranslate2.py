"""CTranslate2 export: the model's weights in a ``ctranslate2.specs.TransformerSpec``.

The spec is filled through CTranslate2's Python spec API: fused self-attention QKV is
``linear[0]``; cross-attention ``linear[0]`` is the query and ``linear[1]`` the fused
key/value; the position table (our [sin | cos] layout, positions from 0, or the learned
table) is written explicitly, so CTranslate2 never computes its own. The source gets EOS
appended by CTranslate2 (``add_source_eos``) and the decoder starts from the row the torch
engine's start reads (``decoder_start_token``): ``<s>``, or ``</s>`` for a model with
``model.start_is_eos`` (a converted M2M100/NLLB, whose start logit the projection's bias
keeps out of the softmax, as :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.project`
does).

A feature CTranslate2 cannot express is an :class:`~seq2seq.export.format.ExportError` naming
it (there is no block-causal or sliding-window decoder mask: export those models to ONNX).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.core import atomic_dir
from seq2seq.export.format import (
    ExportError,
    check_out,
    copy_common,
    require,
    side_pieces,
    side_spm,
    source_info,
    special_ids,
    write_info,
)
from seq2seq.export.probe import check_reproduced, probe_ids
from seq2seq.model import START_BIAS, load_model_dir

__all__ = [
    "CT2_SUB_BATCH",
    "QUANTIZATIONS",
    "check_ctranslate2_support",
    "ctranslate2_spec",
    "export_ctranslate2",
]

QUANTIZATIONS = ("none", "int8", "int8_float32", "float16")
"""CTranslate2 weight types: ``none`` keeps float32."""
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, used by every norm of the model
CT2_SUB_BATCH = 64
"""Sentences per CTranslate2 worker call on CPU.

Used by the CTranslate2 engine (:mod:`seq2seq.decode`) and shown in the export folder's README."""


@torch.no_grad()
def _torch_probe_log_probs(model, src: list[int], tgt: list[int], eos: int, bos: int) -> np.ndarray:
    """Teacher-forced log-probs of ``tgt + [EOS]`` given ``src + [EOS]``: (T+1,)."""
    src_ids = torch.tensor([src + [eos]])
    tgt_in = torch.tensor([[bos] + tgt])
    lp = model(src_ids, tgt_in).float().log_softmax(-1)[0]  # (T+1, V)
    out = torch.tensor(tgt + [eos])
    return lp.gather(1, out[:, None]).squeeze(1).numpy()


def _np(t: Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).contiguous().numpy().copy()


def _set_linear(spec, linear: nn.Linear) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _set_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def check_ctranslate2_support(cfg_model, where: str) -> None:
    """Raise :class:`~seq2seq.export.format.ExportError` naming the first feature CTranslate2
    cannot express.

    Args:
        cfg_model: the model section of the config.
        where: what the message names (the config file).
    """
    if cfg_model.decoder_mask == "block":
        raise ExportError(
            f"{where}: CTranslate2 cannot express the block-causal decoder self-attention mask "
            f"(model.decoder_mask: block, block_size {cfg_model.block_size}, prev_blocks "
            f"{cfg_model.prev_blocks}); export this model with --format onnx instead"
        )
    if cfg_model.decoder_mask == "window":
        raise ExportError(
            f"{where}: CTranslate2 cannot express the sliding-window decoder self-attention mask "
            f"(model.decoder_mask: window, window {cfg_model.window}); export this model with "
            "--format onnx instead"
        )
    if cfg_model.activation not in ("relu", "gelu", "swish"):
        raise ExportError(f"{where}: activation {cfg_model.activation!r} has no CTranslate2 equal")


def ctranslate2_spec(model, *, src_pieces: list[str], tgt_pieces: list[str], special: dict):
    """Fill a ``ctranslate2.specs.TransformerSpec`` with the model's weights.

    Args:
        model: a :class:`~seq2seq.model.transformer.Seq2SeqTransformer` with a causal decoder.
        src_pieces: the source SentencePiece pieces in id order (the CT2 vocabulary).
        tgt_pieces: the target SentencePiece pieces in id order.
        special: ids of ``pad``, ``unk``, ``bos``, ``eos``.

    Returns:
        The validated spec (not yet optimized or saved).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    enc, dec = model.encoder, model.decoder
    pre_norm = enc.final_norm is not None
    activation = {
        torch.nn.functional.gelu: common_spec.Activation.GELU,
        torch.nn.functional.silu: common_spec.Activation.SWISH,
    }.get(enc.layers[0].ff.activation, common_spec.Activation.RELU)
    enc_spec = transformer_spec.TransformerEncoderSpec(
        len(enc.layers), model.n_heads, pre_norm=pre_norm, activation=activation
    )
    dec_spec = transformer_spec.TransformerDecoderSpec(
        len(dec.layers),
        model.n_heads,
        pre_norm=pre_norm,
        activation=activation,
        # return_attention: the last layer's cross-attention averaged over all its heads,
        # the rule of the torch engine's alignments (seq2seq/decode/alignments.py)
        alignment_layer=-1,
        alignment_heads=model.n_heads,
    )
    spec = transformer_spec.TransformerSpec(enc_spec, dec_spec)

    for side_spec, side in ((enc_spec, enc), (dec_spec, dec)):
        emb = (
            side_spec.embeddings[0]
            if isinstance(side_spec.embeddings, list)
            else side_spec.embeddings
        )
        emb.weight = _np(side.embedding.weight)
        # ours: embedding * sqrt(d_model) (unless model.scale_embeddings is false), + position
        side_spec.scale_embeddings = side.embedding.scale != 1.0
        side_spec.position_encodings.encodings = _np(side.positions.weight)  # row p = position p
        if side.final_norm is not None:
            _set_norm(side_spec.layer_norm, side.final_norm)
        for layer_spec, layer in zip(side_spec.layer, side.layers):
            _set_linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)
            _set_linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
            _set_norm(layer_spec.self_attention.layer_norm, layer.self_res.norm)
            if side is dec:
                _set_linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
                _set_linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)
                _set_linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
                _set_norm(layer_spec.attention.layer_norm, layer.cross_res.norm)
            _set_linear(layer_spec.ffn.linear_0, layer.ff.linear1)
            _set_linear(layer_spec.ffn.linear_1, layer.ff.linear2)
            _set_norm(layer_spec.ffn.layer_norm, layer.ff_res.norm)
    dec_spec.projection.weight = _np(model.output_proj.weight)
    bias = model.final_logits_bias
    if model.start_is_eos:  # the start's logit is never a candidate (as project's START_BIAS)
        bias = torch.zeros(model.tgt_vocab_size) if bias is None else bias.clone()
        bias[special["bos"]] = START_BIAS
    if bias is not None:
        dec_spec.projection.bias = _np(bias)

    spec.register_source_vocabulary(list(src_pieces))
    spec.register_target_vocabulary(list(tgt_pieces))
    cfg = spec.config
    cfg.unk_token = tgt_pieces[special["unk"]]
    cfg.bos_token = tgt_pieces[special["bos"]]
    cfg.eos_token = tgt_pieces[special["eos"]]
    # model.start_is_eos (M2M100/NLLB): the decoder starts from the </s> row, as the torch
    # engine's (seq2seq.model.decoder.Decoder.embed); else from our <s> row
    cfg.decoder_start_token = tgt_pieces[special["eos" if model.start_is_eos else "bos"]]
    cfg.add_source_bos = False
    cfg.add_source_eos = True  # our sources end with EOS
    cfg.layer_norm_epsilon = LAYER_NORM_EPS
    if src_pieces[special["eos"]] != cfg.eos_token:
        raise ExportError(
            f"source EOS piece {src_pieces[special['eos']]!r} differs from the target's "
            f"{cfg.eos_token!r}; CTranslate2 needs one EOS token"
        )
    spec.validate()
    return spec


_CT2_README = """\
# CTranslate2 export of {model_dir}

Exported by `seq2seq export --format ctranslate2` (quantization: {quantization}).
Sources get `</s>` appended by CTranslate2 (`add_source_eos` in config.json) and the decoder
starts from `{start}` (`decoder_start_token`), as in seq2seq. With seq2seq:

    seq2seq translate --engine ctranslate2 {name} < input.txt

Without seq2seq (pip install ctranslate2 sentencepiece):

```python
import ctranslate2
import sentencepiece as spm

# For many sentences on 2 CPU cores: two single-threaded workers (what seq2seq does);
# for one sentence at a time: inter_threads=1, intra_threads=2.
translator = ctranslate2.Translator("{name}", device="cpu", inter_threads=2, intra_threads=1)
src_sp = spm.SentencePieceProcessor(model_file="{name}/{src_spm}")
tgt_sp = spm.SentencePieceProcessor(model_file="{name}/{tgt_spm}")
tokens = src_sp.encode(["A man is riding a bike."], out_type=str)
results = translator.translate_batch(
    tokens, beam_size=5, max_decoding_length=256, max_batch_size={sub_batch}
)
print(tgt_sp.decode(results[0].hypotheses[0]))
```

Scores: CTranslate2 normalizes a hypothesis' log-probability by its length (without the
start token) to the power `length_penalty`; seq2seq's torch and ONNX engines use fairseq's
normalization. See seq2seq/decode/ctranslate2_engine.py for how the two compare.
"""


def _check_ct2_probe(tmp: Path, model, special: dict, src_pieces, tgt_pieces) -> None:
    import ctranslate2

    src, tgt = probe_ids(model)
    expected = _torch_probe_log_probs(model, src, tgt, special["eos"], special["bos"])
    translator = ctranslate2.Translator(str(tmp), device="cpu", intra_threads=1)
    result = translator.score_batch([[src_pieces[i] for i in src]], [[tgt_pieces[i] for i in tgt]])[
        0
    ]
    got = np.asarray(result.log_probs, dtype=np.float32)
    diff = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    check_reproduced(diff, "CTranslate2")


def export_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    quantization: str = "none",
    force: bool = False,
) -> Path:
    """Convert a model directory to a CTranslate2 model folder.

    Args:
        model_dir: a seq2seq model directory.
        out_dir: the folder to create.
        quantization: ``none`` (float32), ``int8``, ``int8_float32`` or ``float16``.
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        ExportError: a feature CTranslate2 cannot express, an existing ``out_dir`` without
            ``force``, an unknown quantization; ModelDirError for a bad model directory.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantization not in QUANTIZATIONS:
        raise ExportError(
            f"unknown quantization {quantization!r}; expected one of {', '.join(QUANTIZATIONS)}"
        )
    check_out(out_dir, force)
    loaded = load_model_dir(model_dir, device="cpu")
    check_ctranslate2_support(loaded.cfg.model, str(model_dir / "config.yaml"))
    ctranslate2 = require("ctranslate2")

    model, special = loaded.model, special_ids()
    src_spm, tgt_spm = side_spm(model_dir)
    src_pieces, tgt_pieces = side_pieces(model_dir, loaded.tokenizer)
    spec = ctranslate2_spec(model, src_pieces=src_pieces, tgt_pieces=tgt_pieces, special=special)
    spec.optimize(quantization=None if quantization == "none" else quantization)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        spec.save(str(tmp))
        copy_common(model_dir, tmp)
        (tmp / "README.md").write_text(
            _CT2_README.format(
                model_dir=model_dir.name,
                name=out_dir.name,
                quantization=quantization,
                src_spm=src_spm.name,
                tgt_spm=tgt_spm.name,
                sub_batch=CT2_SUB_BATCH,
                start=tgt_pieces[special["eos" if model.start_is_eos else "bos"]],
            ),
            encoding="utf-8",
        )
        if quantization == "none":
            _check_ct2_probe(tmp, model, special, src_pieces, tgt_pieces)
        write_info(
            tmp,
            {
                "engine": "ctranslate2",
                "quantization": quantization,
                "ctranslate2_version": ctranslate2.__version__,
                **source_info(model_dir, model, loaded.cfg),
            },
        )
    return out_dir

"""Export a model directory for inference: CTranslate2 and ONNX.

Both exports are self-contained folders that ``seq2seq translate --engine ctranslate2|onnx``
(seq2seq/decode/engines.py) reads directly, and that other programs can load without seq2seq:

CTranslate2 (``--format ctranslate2``)::

    OUT/
      model.bin, config.json,           CTranslate2's own files, written by its spec API
      shared_vocabulary.json            (or source_vocabulary.json + target_vocabulary.json)
      spm.model                         (or spm.src.model + spm.tgt.model)
      config.yaml                       the experiment config (decoding defaults)
      export.json                       what was exported, from where, and file checksums
      README.md                         how to load it with ctranslate2 + sentencepiece

ONNX (``--format onnx``)::

    OUT/
      encoder.onnx                      src_ids (B, S) -> src_pad, cross-attention K/V per layer
      decoder_step.onnx                 one KV-cached decoder step (inputs/outputs: export.json)
      spm*.model, config.yaml, export.json, README.md

The CTranslate2 spec is filled through CTranslate2's Python spec API: fused self-attention
QKV is ``linear[0]``; cross-attention ``linear[0]`` is the query and ``linear[1]`` the fused
key/value; the position table (our [sin | cos] layout, positions from 0, or the learned
table) is written explicitly, so CTranslate2 never computes its own. The source gets EOS
appended by CTranslate2 (``add_source_eos``) and the decoder starts from BOS
(``decoder_start_token``), as in seq2seq.

Features a format cannot express are an :class:`ExportError` naming the feature (CTranslate2
has no block-causal or sliding-window decoder mask: export those models to ONNX).

Every export is written into a temporary sibling folder that becomes ``OUT`` only when
complete (:func:`seq2seq.core.files.atomic_dir`), and then checks itself: the exported model must
reproduce the PyTorch model's log-probabilities on a probe sentence.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.core import UserError, atomic_dir, atomic_open, sha256_file
from seq2seq.model import attention_mask_from_pad

__all__ = [
    "EXPORT_FILE",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "FORMATS",
    "QUANTIZATIONS",
    "ExportError",
    "OnnxDecoderStep",
    "OnnxEncoder",
    "check_ctranslate2_support",
    "ctranslate2_spec",
    "describe",
    "export_ctranslate2",
    "export_model",
    "export_onnx",
    "read_export_info",
    "require",
]

EXPORT_FORMAT = "seq2seq-export"
EXPORT_VERSION = 1
EXPORT_FILE = "export.json"
FORMATS = ("ctranslate2", "onnx")
QUANTIZATIONS = ("none", "int8", "int8_float32", "float16")
"""CTranslate2 weight types: ``none`` keeps float32."""
SPM_FILES = ("spm.model", "spm.src.model", "spm.tgt.model")
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, used by every norm of the model
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"
PROBE_TOLERANCE = 1e-3  # max |log-prob difference| the float32 self-check accepts
CT2_SUB_BATCH = 64
"""Sentences per CTranslate2 worker call on CPU (64 was the fastest of 16-250 on 2 cores).

Used by the CTranslate2 engine (seq2seq.decode.engines) and shown in the export folder's README."""


class ExportError(UserError):
    """An export that cannot be made (unsupported feature, existing output, bad export folder)."""


# ---------------------------------------------------------------------------------------------
# Shared: reading the model directory, writing the folder


def require(module: str):
    """Import an optional export dependency, or raise a UserError saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExportError(
            f"{module} is not installed; install the export extras: pip install 'seq2seq[export]'"
        ) from None


def _load(model_dir: Path):
    from seq2seq.model import load_model_dir

    return load_model_dir(model_dir, device="cpu")


def _spm_files(model_dir: Path) -> list[str]:
    names = [n for n in SPM_FILES if (model_dir / n).is_file()]
    if not names:
        raise ExportError(f"{model_dir} has no SentencePiece model (spm.model)")
    return names


def _pieces(path: Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _side_spm(model_dir: Path) -> tuple[Path, Path]:
    """(source, target) SentencePiece model paths: the joint model twice, or the pair."""
    if (model_dir / "spm.model").is_file():
        return model_dir / "spm.model", model_dir / "spm.model"
    return model_dir / "spm.src.model", model_dir / "spm.tgt.model"


def _check_out(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not force:
        raise ExportError(f"{out_dir} already exists; pass --force to replace it")
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir} exists and is not a directory")


def _model_info(model, cfg) -> dict:
    m = cfg.model
    return {
        "d_model": model.d_model,
        "n_heads": model.n_heads,
        "d_head": model.d_model // model.n_heads,
        "n_encoder_layers": len(model.encoder.layers),
        "n_decoder_layers": len(model.decoder.layers),
        "src_vocab_size": model.src_vocab_size,
        "tgt_vocab_size": model.tgt_vocab_size,
        "max_positions": model.max_positions,
        "norm_first": m.norm_first,
        "positions": m.positions,
        "activation": m.activation,
        "share_embeddings": m.share_embeddings,
        "tie_output": m.tie_output,
        "decoder_mask": m.decoder_mask,
        "window": m.window,
        "block_size": m.block_size,
        "prev_blocks": m.prev_blocks,
    }


def _special_ids() -> dict[str, int]:
    from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

    return {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}


def _copy_common(model_dir: Path, tmp: Path) -> list[str]:
    """Copy the SentencePiece model(s) and config.yaml; return the copied names."""
    names = _spm_files(model_dir) + ["config.yaml"]
    for name in names:
        shutil.copyfile(model_dir / name, tmp / name)
    return names


def _write_info(tmp: Path, info: dict) -> None:
    """Write export.json with the sha256 of every other file in the folder (written last)."""
    files = {
        p.name: sha256_file(p)
        for p in sorted(tmp.iterdir())
        if p.is_file() and p.name != EXPORT_FILE
    }
    info = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, **info, "files": files}
    info["sha256"] = _content_sha256(info)
    with atomic_open(tmp / EXPORT_FILE, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


def _content_sha256(info: dict) -> str:
    """sha256 of export.json's content (every key but ``sha256``) in canonical JSON: the file's
    checksum of itself, so that an edited ``special_ids``, ``max_positions`` or ``files`` list
    is refused like an edited weight file."""
    content = {k: v for k, v in info.items() if k != "sha256"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def read_export_info(export_dir: str | Path, *, engine: str, verify: bool = True) -> dict:
    """Read and check an export folder's export.json (and, with ``verify``, its checksums).

    Raises:
        ExportError: not an export folder, an export for another engine, or a file missing
            or altered since the export.
    """
    export_dir = Path(export_dir)
    path = export_dir / EXPORT_FILE
    hint = f"--engine {engine} reads the folder that `seq2seq export MODEL_DIR --format {engine} --out DIR` writes"
    if not export_dir.is_dir():
        raise ExportError(f"export folder not found: {export_dir} ({hint})")
    if not path.is_file():
        raise ExportError(f"{export_dir} is not a seq2seq export (no {EXPORT_FILE}); {hint}")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(info, dict) or info.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{path} does not describe a {EXPORT_FORMAT} folder")
    if info.get("version") != EXPORT_VERSION:
        raise ExportError(
            f"{path}: export version {info.get('version')!r} is not supported "
            f"(this seq2seq reads version {EXPORT_VERSION})"
        )
    if "sha256" not in info:
        raise ExportError(
            f"{path} has no checksum of its own (written by an older seq2seq?); export the "
            "model again"
        )
    if info["sha256"] != _content_sha256(info):
        raise ExportError(
            f"{path} is corrupt or was altered: its content does not match its own sha256"
        )
    files = info.get("files")
    required = {"config.yaml"}
    if (
        not isinstance(files, dict)
        or not required <= set(files)
        or not any(name.startswith("spm") for name in files)
    ):
        raise ExportError(f"{path} does not list the folder's files (config, SentencePiece)")
    if info.get("engine") != engine:
        raise ExportError(
            f"{export_dir} was exported for {info.get('engine')}, not {engine}; "
            f"use --engine {info.get('engine')}"
        )
    if verify:
        for name, expected in files.items():
            file = export_dir / name
            if Path(name).name != name:
                raise ExportError(f"{path} names a file outside the folder: {name!r}")
            if not file.is_file():
                raise ExportError(f"{file} is missing (listed in {EXPORT_FILE})")
            if sha256_file(file) != expected:
                raise ExportError(
                    f"{file} is corrupt or was altered since the export (sha256 mismatch)"
                )
    return info


def _probe_ids(model) -> tuple[list[int], list[int]]:
    """A deterministic probe: a source and a target prefix of ordinary (non-special) ids."""
    first = 4  # after pad, unk, bos, eos
    src = [first + (7 * i) % max(model.src_vocab_size - first, 1) for i in range(6)]
    tgt = [first + (5 * i + 3) % max(model.tgt_vocab_size - first, 1) for i in range(5)]
    return src, tgt


@torch.no_grad()
def _torch_probe_log_probs(model, src: list[int], tgt: list[int], eos: int, bos: int) -> np.ndarray:
    """Teacher-forced log-probs of ``tgt + [EOS]`` given ``src + [EOS]``: (T+1,)."""
    src_ids = torch.tensor([src + [eos]])
    tgt_in = torch.tensor([[bos] + tgt])
    lp = model(src_ids, tgt_in).float().log_softmax(-1)[0]  # (T+1, V)
    out = torch.tensor(tgt + [eos])
    return lp.gather(1, out[:, None]).squeeze(1).numpy()


# ---------------------------------------------------------------------------------------------
# CTranslate2


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
    """Raise :class:`ExportError` naming the first feature CTranslate2 cannot express."""
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
    if cfg_model.activation not in ("relu", "gelu"):
        raise ExportError(f"{where}: activation {cfg_model.activation!r} has no CTranslate2 equal")


def ctranslate2_spec(model, *, src_pieces: list[str], tgt_pieces: list[str], special: dict):
    """Fill a ``ctranslate2.specs.TransformerSpec`` with the model's weights.

    Args:
        model: a :class:`~seq2seq.model.transformer.Seq2SeqTransformer` with a causal decoder.
        src_pieces, tgt_pieces: the SentencePiece pieces in id order (the CT2 vocabularies).
        special: ids of ``pad``, ``unk``, ``bos``, ``eos``.

    Returns:
        The validated spec (not yet optimized or saved).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    enc, dec = model.encoder, model.decoder
    pre_norm = enc.final_norm is not None
    activation = (
        common_spec.Activation.GELU
        if enc.layers[0].ff.activation is torch.nn.functional.gelu
        else common_spec.Activation.RELU
    )
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
        side_spec.scale_embeddings = True  # ours: embedding * sqrt(d_model), then + position
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

    spec.register_source_vocabulary(list(src_pieces))
    spec.register_target_vocabulary(list(tgt_pieces))
    cfg = spec.config
    cfg.unk_token = tgt_pieces[special["unk"]]
    cfg.bos_token = tgt_pieces[special["bos"]]
    cfg.eos_token = tgt_pieces[special["eos"]]
    cfg.decoder_start_token = tgt_pieces[special["bos"]]
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
starts from `<s>`, as in seq2seq. With seq2seq:

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
normalization. See seq2seq/decode/engines.py for how the two compare.
"""


def _check_ct2_probe(tmp: Path, model, special: dict, src_pieces, tgt_pieces) -> None:
    import ctranslate2

    src, tgt = _probe_ids(model)
    expected = _torch_probe_log_probs(model, src, tgt, special["eos"], special["bos"])
    translator = ctranslate2.Translator(str(tmp), device="cpu", intra_threads=1)
    result = translator.score_batch([[src_pieces[i] for i in src]], [[tgt_pieces[i] for i in tgt]])[
        0
    ]
    got = np.asarray(result.log_probs, dtype=np.float32)
    diff = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    if not diff <= PROBE_TOLERANCE:
        raise ExportError(
            f"the CTranslate2 export does not reproduce the model (max log-prob difference "
            f"{diff:.2e} on a probe sentence); please report this"
        )


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
    _check_out(out_dir, force)
    loaded = _load(model_dir)
    check_ctranslate2_support(loaded.cfg.model, str(model_dir / "config.yaml"))
    ctranslate2 = require("ctranslate2")

    model, special = loaded.model, _special_ids()
    src_spm, tgt_spm = _side_spm(model_dir)
    src_pieces, tgt_pieces = _pieces(src_spm), _pieces(tgt_spm)
    spec = ctranslate2_spec(model, src_pieces=src_pieces, tgt_pieces=tgt_pieces, special=special)
    spec.optimize(quantization=None if quantization == "none" else quantization)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        spec.save(str(tmp))
        _copy_common(model_dir, tmp)
        (tmp / "README.md").write_text(
            _CT2_README.format(
                model_dir=model_dir.name,
                name=out_dir.name,
                quantization=quantization,
                src_spm=src_spm.name,
                tgt_spm=tgt_spm.name,
                sub_batch=CT2_SUB_BATCH,
            ),
            encoding="utf-8",
        )
        if quantization == "none":
            _check_ct2_probe(tmp, model, special, src_pieces, tgt_pieces)
        _write_info(
            tmp,
            {
                "engine": "ctranslate2",
                "quantization": quantization,
                "ctranslate2_version": ctranslate2.__version__,
                "source_model": {
                    "path": str(model_dir.resolve()),
                    "weights_sha256": sha256_file(model_dir / "model.safetensors"),
                },
                "model": _model_info(model, loaded.cfg),
                "special_ids": special,
            },
        )
    return out_dir


# ---------------------------------------------------------------------------------------------
# ONNX


class OnnxEncoder(nn.Module):
    """Traceable encoder: ``src_ids (B, S) -> (src_pad (B, S), k_0, v_0, k_1, v_1, ...)``.

    The per-layer cross-attention K/V of the decoder, each (B, H, S, Dh), are computed here
    once (as in :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.start_state`). Unlike the model's
    encoder it always applies the padding mask (a data-dependent branch would be frozen by
    tracing), which gives the same result.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        enc = self.model.encoder
        src_pad = src_ids.eq(self.model.pad_id)  # (B, S)
        x = enc.embedding(src_ids) + enc.positions.weight[: src_ids.size(1)]  # (B, S, D)
        mask = attention_mask_from_pad(src_pad)  # (B, 1, 1, S)
        for layer in enc.layers:
            x, _ = layer(x, mask=mask)
        if enc.final_norm is not None:
            x = enc.final_norm(x)
        kv = []
        for layer in self.model.decoder.layers:
            kv.extend(layer.cross_attn.memory_kv(x))
        return (src_pad, *kv)


class OnnxDecoderStep(nn.Module):
    """Traceable KV-cached decoder step (one new token per row).

    Inputs: ``tokens`` (N, 1) int64, ``position`` () int64 (absolute position of the token),
    ``src_pad`` (N, S) bool, then ``self_k_i, self_v_i`` (N, H, t, Dh) per layer (t may be 0)
    and ``cross_k_i, cross_v_i`` (N, H, S, Dh) per layer.
    Outputs: ``log_probs`` (N, V) float32, then the new ``self_k_i, self_v_i`` per layer
    (N, H, t+1, Dh); with a sliding-window mask only the last ``window - 1`` positions are
    kept, as in :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.decode_step`.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.n_layers = len(model.decoder.layers)

    def forward(self, tokens: Tensor, position: Tensor, src_pad: Tensor, *kv: Tensor):
        dec = self.model.decoder
        n = self.n_layers
        self_kv, cross_kv = kv[: 2 * n], kv[2 * n :]
        pos_vec = dec.positions.weight.index_select(0, position.reshape(1))  # (1, D)
        x = dec.embedding(tokens) + pos_vec  # (N, 1, D)
        self_mask = None  # causal, or a window-trimmed cache: the one query sees every key
        if dec.self_mask == "block":
            k_len = self_kv[0].size(2) + 1
            k_pos = torch.arange(k_len, device=tokens.device)  # cache keeps every position
            q_pos = k_len - 1
            self_mask = (k_pos // dec.block_size >= q_pos // dec.block_size - dec.prev_blocks)[
                None, :
            ]  # (1, Tk)
        cross_mask = attention_mask_from_pad(src_pad)  # (N, 1, 1, S)
        new_kv = []
        for i, layer in enumerate(dec.layers):
            x, _, (k, v) = layer(
                x,
                (cross_kv[2 * i], cross_kv[2 * i + 1]),
                self_mask=self_mask,
                is_causal=False,
                cross_mask=cross_mask,
                cache=(self_kv[2 * i], self_kv[2 * i + 1]),
            )
            if dec.self_mask == "window":
                keep = dec.window - 1  # keys the next query can still see besides itself
                k, v = (k[:, :, -keep:], v[:, :, -keep:]) if keep else (k[:, :, :0], v[:, :, :0])
            new_kv.extend((k, v))
        if dec.final_norm is not None:
            x = dec.final_norm(x)
        log_probs = self.model.project(x[:, -1]).float().log_softmax(dim=-1)  # (N, V)
        return (log_probs, *new_kv)


def _onnx_io(model) -> dict:
    n_dec = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads

    def kv(prefix: str, length: str) -> list[dict]:
        return [
            {"name": f"{prefix}_{kind}_{i}", "dtype": "float32", "shape": ["N", h, length, dh]}
            for i in range(n_dec)
            for kind in ("k", "v")
        ]

    return {
        "encoder": {
            "file": ENCODER_FILE,
            "inputs": [{"name": "src_ids", "dtype": "int64", "shape": ["B", "S"]}],
            "outputs": [{"name": "src_pad", "dtype": "bool", "shape": ["B", "S"]}]
            + [dict(d, shape=["B", h, "S", dh]) for d in kv("cross", "S")],
        },
        "decoder_step": {
            "file": DECODER_FILE,
            "inputs": [
                {"name": "tokens", "dtype": "int64", "shape": ["N", 1]},
                {"name": "position", "dtype": "int64", "shape": []},
                {"name": "src_pad", "dtype": "bool", "shape": ["N", "S"]},
            ]
            + kv("self", "T_past")
            + kv("cross", "S"),
            "outputs": [
                {"name": "log_probs", "dtype": "float32", "shape": ["N", model.tgt_vocab_size]}
            ]
            + kv("new_self", "T_new"),
        },
    }


def _export_graphs(model, tmp: Path, opset: int) -> dict:
    """torch.onnx.export (TorchScript exporter) of the encoder and the decoder step."""
    io = _onnx_io(model)
    n_dec = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads
    src_ids = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]], dtype=torch.long)
    src_ids = src_ids.clamp(max=model.src_vocab_size - 1)
    enc_io, dec_io = io["encoder"], io["decoder_step"]
    names = lambda items: [d["name"] for d in items]  # noqa: E731
    axes: dict[str, dict[int, str]] = {"src_ids": {0: "B", 1: "S"}, "src_pad": {0: "B", 1: "S"}}
    axes.update({d["name"]: {0: "B", 2: "S"} for d in enc_io["outputs"][1:]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            OnnxEncoder(model).eval(),
            (src_ids,),
            str(tmp / ENCODER_FILE),
            input_names=names(enc_io["inputs"]),
            output_names=names(enc_io["outputs"]),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
        n, past, s = 2, 2, src_ids.size(1)
        tokens = torch.full((n, 1), 4, dtype=torch.long).clamp(max=model.tgt_vocab_size - 1)
        past_len = (
            past if model.decoder.self_mask != "window" else min(past, model.decoder.window - 1)
        )
        self_kv = [torch.randn(n, h, past_len, dh) for _ in range(2 * n_dec)]
        cross_kv = [torch.randn(n, h, s, dh) for _ in range(2 * n_dec)]
        args = (tokens, torch.tensor(past, dtype=torch.long), src_ids.eq(0), *self_kv, *cross_kv)
        axes = {"tokens": {0: "N"}, "src_pad": {0: "N", 1: "S"}, "log_probs": {0: "N"}}
        axes.update({d["name"]: {0: "N", 2: "T_past"} for d in dec_io["inputs"][3 : 3 + 2 * n_dec]})
        axes.update({d["name"]: {0: "N", 2: "S"} for d in dec_io["inputs"][3 + 2 * n_dec :]})
        axes.update({d["name"]: {0: "N", 2: "T_new"} for d in dec_io["outputs"][1:]})
        torch.onnx.export(
            OnnxDecoderStep(model).eval(),
            args,
            str(tmp / DECODER_FILE),
            input_names=names(dec_io["inputs"]),
            output_names=names(dec_io["outputs"]),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    return io


_ONNX_README = """\
# ONNX export of {model_dir}

Exported by `seq2seq export --format onnx` (opset {opset}). Two graphs:

- `{encoder}`: `src_ids` (B, S) int64 (SentencePiece ids + EOS {eos}, padded with {pad}) ->
  `src_pad` (B, S) bool and the cross-attention keys/values of each decoder layer,
  `cross_k_i`, `cross_v_i` (B, H, S, Dh).
- `{decoder}`: one decoder step. `tokens` (N, 1) int64 (BOS {bos} first), `position` ()
  int64 (tokens consumed so far), `src_pad`, `self_k_i`/`self_v_i` (N, H, t, Dh, t = 0 at the
  first step), `cross_k_i`/`cross_v_i` -> `log_probs` (N, V) and `new_self_k_i`/`new_self_v_i`
  to feed back at the next step. For beam search, reorder every array along axis 0.

export.json lists every input and output with its shape. With seq2seq (beam search, n-best,
length penalty as with the torch engine):

    seq2seq translate --engine onnx {name} < input.txt

Minimal greedy decoding with onnxruntime alone:

```python
import numpy as np, onnxruntime as ort, sentencepiece as spm
enc = ort.InferenceSession("{name}/{encoder}")
dec = ort.InferenceSession("{name}/{decoder}")
sp = spm.SentencePieceProcessor(model_file="{name}/{src_spm}")
out = enc.run(None, {{"src_ids": np.array([sp.encode("A man is riding a bike.") + [{eos}]])}})
src_pad, cross = out[0], out[1:]
L, H, Dh = {n_layers}, {n_heads}, {d_head}
self_kv = [np.zeros((1, H, 0, Dh), np.float32)] * (2 * L)
tok, ids = {bos}, []
for pos in range(100):
    feed = {{"tokens": np.array([[tok]]), "position": np.array(pos), "src_pad": src_pad}}
    feed.update({{f"self_{{'kv'[j % 2]}}_{{j // 2}}": a for j, a in enumerate(self_kv)}})
    feed.update({{f"cross_{{'kv'[j % 2]}}_{{j // 2}}": a for j, a in enumerate(cross)}})
    log_probs, *self_kv = dec.run(None, feed)
    tok = int(log_probs[0].argmax())
    if tok == {eos}:
        break
    ids.append(tok)
print(spm.SentencePieceProcessor(model_file="{name}/{tgt_spm}").decode(ids))
```
"""


def _check_onnx_probe(tmp: Path, model, special: dict) -> None:
    """Run the exported graphs on a probe (two steps, a reorder) against decode_step."""
    import onnxruntime as ort

    src, tgt = _probe_ids(model)
    src_ids = torch.tensor([src + [special["eos"]], src[:3] + [special["eos"], 0, 0, 0]])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    enc = ort.InferenceSession(str(tmp / ENCODER_FILE), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(tmp / DECODER_FILE), opts, providers=["CPUExecutionProvider"])
    n = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads
    out = enc.run(None, {"src_ids": src_ids.numpy()})
    src_pad, cross = out[0], out[1:]
    self_kv = [np.zeros((2, h, 0, dh), np.float32)] * (2 * n)
    state = model.start_state(src_ids)
    prefix = torch.full((2, 1), special["bos"], dtype=torch.long)
    diff = 0.0
    with torch.no_grad():
        for step, tok in enumerate(tgt[:3]):
            expected, state = model.decode_step(prefix, state)
            feed = _decoder_feed(prefix[:, -1:].numpy(), step, src_pad, self_kv, cross)
            got, *self_kv = dec.run(None, feed)
            diff = max(diff, float(np.abs(got - expected.numpy()).max()))
            prefix = torch.cat([prefix, torch.tensor([[tok], [tok + 1]])], dim=1)
    if not diff <= PROBE_TOLERANCE:
        raise ExportError(
            f"the ONNX export does not reproduce the model (max log-prob difference "
            f"{diff:.2e} on a probe sentence); please report this"
        )


def _decoder_feed(tokens, position: int, src_pad, self_kv, cross) -> dict:
    """The decoder_step.onnx input dict (used by the self-check and the ONNX engine)."""
    feed = {"tokens": tokens, "position": np.array(position, dtype=np.int64), "src_pad": src_pad}
    for j, a in enumerate(self_kv):
        feed[f"self_{'kv'[j % 2]}_{j // 2}"] = a
    for j, a in enumerate(cross):
        feed[f"cross_{'kv'[j % 2]}_{j // 2}"] = a
    return feed


def _newest_opset() -> int:
    """The newest opset torch's TorchScript-based exporter (``dynamo=False``) writes."""
    try:
        from torch.onnx import _constants

        return int(_constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET)
    except (ImportError, AttributeError):  # another torch: let the exporter judge
        return 10**6


def export_onnx(
    model_dir: str | Path, out_dir: str | Path, *, opset: int = 17, force: bool = False
) -> Path:
    """Export the encoder and the KV-cached decoder step as ONNX graphs (dynamic B, S, t).

    Every decoder mask (causal, sliding window, block causal) is supported.

    Args:
        model_dir: a seq2seq model directory.
        out_dir: the folder to create.
        opset: ONNX opset (>= 14 for scaled_dot_product_attention).
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if opset < 14:
        raise ExportError(f"ONNX opset {opset} is too old; use 14 or newer (default 17)")
    newest = _newest_opset()
    if opset > newest:
        raise ExportError(
            f"ONNX opset {opset} is newer than this torch exports (14..{newest}, default 17)"
        )
    _check_out(out_dir, force)
    require("onnx")  # torch.onnx.export needs it
    require("onnxruntime")  # the self-check
    loaded = _load(model_dir)
    model, special = loaded.model, _special_ids()
    src_spm, tgt_spm = _side_spm(model_dir)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        io = _export_graphs(model, tmp, opset)
        _copy_common(model_dir, tmp)
        (tmp / "README.md").write_text(
            _ONNX_README.format(
                model_dir=model_dir.name,
                name=out_dir.name,
                opset=opset,
                encoder=ENCODER_FILE,
                decoder=DECODER_FILE,
                src_spm=src_spm.name,
                tgt_spm=tgt_spm.name,
                n_layers=len(model.decoder.layers),
                n_heads=model.n_heads,
                d_head=model.d_model // model.n_heads,
                **special,
            ),
            encoding="utf-8",
        )
        _check_onnx_probe(tmp, model, special)
        _write_info(
            tmp,
            {
                "engine": "onnx",
                "opset": opset,
                "torch_version": torch.__version__,
                "source_model": {
                    "path": str(model_dir.resolve()),
                    "weights_sha256": sha256_file(model_dir / "model.safetensors"),
                },
                "model": _model_info(model, loaded.cfg),
                "special_ids": special,
                "graphs": io,
            },
        )
    return out_dir


# ---------------------------------------------------------------------------------------------


def export_model(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    fmt: str,
    quantization: str = "none",
    opset: int = 17,
    force: bool = False,
) -> Path:
    """Export ``model_dir`` to ``out_dir`` in ``fmt`` (``ctranslate2`` or ``onnx``)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        if quantization != "none":
            raise ExportError(f"--quantization {quantization} applies to --format ctranslate2 only")
        return export_onnx(model_dir, out_dir, opset=opset, force=force)
    return export_ctranslate2(model_dir, out_dir, quantization=quantization, force=force)


def describe(out_dir: Path) -> str:
    """One line about an export folder, for the CLI."""
    size = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
    return f"wrote {out_dir} ({size / 1e6:.1f} MB)"

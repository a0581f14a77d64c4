"""The export folder: what it holds, how it is written, and how a reader checks it.

Both formats write a self-contained folder that ``seq2seq translate --engine
ctranslate2|onnx`` (:mod:`seq2seq.decode`) reads directly and that other programs can load
without seq2seq:

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

export.json is written last and holds the sha256 of every other file and of its own content,
so a reader refuses a folder altered since the export (:func:`read_export_info`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
from pathlib import Path

from seq2seq.core import UserError, atomic_open, sha256_file

__all__ = [
    "DECODER_FILE",
    "ENCODER_FILE",
    "EXPORT_FILE",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "HF_ACTIVATIONS",
    "ExportError",
    "bart_family_fields",
    "check_out",
    "copy_common",
    "describe",
    "read_export_info",
    "require",
    "side_spm",
    "source_info",
    "special_ids",
    "write_info",
]

EXPORT_FORMAT = "seq2seq-export"
EXPORT_VERSION = 1
EXPORT_FILE = "export.json"
SPM_FILES = ("spm.model", "spm.src.model", "spm.tgt.model")
# seq2seq.data's VOCAB_FILE and TARGET_VOCAB_FILE; kept here so the format module stays light
VOCAB_FILES = ("vocab.json", "target_vocab.json")
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"


class ExportError(UserError):
    """An export that cannot be made (unsupported feature, existing output, bad export folder)."""


def require(module: str):
    """Import an optional export dependency, or raise a UserError saying how to install it.

    Args:
        module: the module's name (``ctranslate2``, ``onnx``, ``onnxruntime``).

    Returns:
        The module.

    Raises:
        ExportError: the module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExportError(
            f"{module} is not installed; install the export extras: pip install 'seq2seq[export]'"
        ) from None


def _spm_files(model_dir: Path) -> list[str]:
    from seq2seq.data import LANGUAGES_FILE, M2M100_SPM, M2M100_VOCAB, NLLB_TOKENIZER

    # (export.json's check below names languages.json, LANGUAGES_FILE, as a tokenizer file)
    languages = (LANGUAGES_FILE, M2M100_SPM, M2M100_VOCAB, NLLB_TOKENIZER)
    if (model_dir / LANGUAGES_FILE).is_file():  # a converted M2M100 / NLLB model's tokenizer
        return [n for n in languages if (model_dir / n).is_file()]
    names = [n for n in SPM_FILES if (model_dir / n).is_file()]
    if not names:
        raise ExportError(f"{model_dir} has no SentencePiece model (spm.model)")
    # a converted model's piece -> id maps
    names += [n for n in VOCAB_FILES if (model_dir / n).is_file()]
    return names


def side_spm(model_dir: Path) -> tuple[Path, Path]:
    """(source, target) SentencePiece model paths: the joint model twice, or the pair."""
    if (model_dir / "spm.model").is_file():
        return model_dir / "spm.model", model_dir / "spm.model"
    return model_dir / "spm.src.model", model_dir / "spm.tgt.model"


def side_pieces(model_dir: Path, tokenizer) -> tuple[list[str], list[str]]:
    """(source, target) pieces in id order: an export's vocabularies.

    A converted model's ids come from its ``vocab.json`` (and ``target_vocab.json``); a model
    trained here numbers the pieces as its SentencePiece models do.
    """
    if hasattr(tokenizer, "pieces"):
        return tokenizer.pieces("src"), tokenizer.pieces("tgt")
    import sentencepiece as spm

    out = []
    for path in side_spm(model_dir):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        out.append([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    return out[0], out[1]


def check_out(out_dir: Path, force: bool) -> None:
    """Refuse an existing ``out_dir`` without ``force``, and one that is not a folder (the one
    check of every model writer's output, :func:`seq2seq.model.check_out_dir`)."""
    from seq2seq.model import check_out_dir

    check_out_dir(out_dir, force=force, error=ExportError)


def source_info(model_dir: Path, model, cfg) -> dict:
    """export.json's ``source_model``, ``model`` (shape and features) and ``special_ids``.

    Args:
        model_dir: the exported model directory.
        model: its loaded model.
        cfg: its config.
    """
    return {
        "source_model": {
            "path": str(model_dir.resolve()),
            "weights_sha256": sha256_file(model_dir / "model.safetensors"),
        },
        "model": _model_info(model, cfg),
        "special_ids": special_ids(),
    }


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


def special_ids() -> dict[str, int]:
    """export.json's ``special_ids``: the ids of ``pad``, ``unk``, ``bos`` and ``eos``."""
    from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

    return {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}


def copy_common(model_dir: Path, tmp: Path) -> list[str]:
    """Copy the SentencePiece model(s) and config.yaml; return the copied names."""
    names = _spm_files(model_dir) + ["config.yaml"]
    for name in names:
        shutil.copyfile(model_dir / name, tmp / name)
    return names


def write_info(tmp: Path, info: dict) -> None:
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

    Args:
        export_dir: the folder ``seq2seq export`` wrote.
        engine: the engine that is to read it (``ctranslate2`` or ``onnx``).
        verify: also check every listed file against its sha256.

    Returns:
        export.json's content.

    Raises:
        ExportError: not an export folder, an export for another engine, or a file missing
            or altered since the export.
    """
    export_dir = Path(export_dir)
    path = export_dir / EXPORT_FILE
    hint = (
        f"--engine {engine} reads the folder that "
        f"`seq2seq export MODEL_DIR --format {engine} --out DIR` writes"
    )
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
        or not any(name.startswith("spm") or name == "languages.json" for name in files)
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


def describe(out_dir: Path) -> str:
    """One line about an export folder, for the CLI."""
    size = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
    return f"wrote {out_dir} ({size / 1e6:.1f} MB)"


HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}
"""Our ``model.activation`` -> the ``activation_function`` of a BART-family Hugging Face config
(MarianMT, M2M100)."""


def bart_family_fields(m) -> dict:
    """The ``config.json`` fields that MarianMT and M2M100 name alike, from our ``ModelConfig``
    ``m``: sizes, activation, positions, embedding scale and dropouts (the exporters add their
    own ids, vocabularies and tying)."""
    return dict(
        d_model=m.d_model,
        encoder_layers=m.n_encoder_layers,
        decoder_layers=m.n_decoder_layers,
        encoder_attention_heads=m.n_heads,
        decoder_attention_heads=m.n_heads,
        encoder_ffn_dim=m.d_ff,
        decoder_ffn_dim=m.d_ff,
        activation_function=HF_ACTIVATIONS[m.activation],
        max_position_embeddings=m.max_positions,
        scale_embedding=m.scale_embeddings,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        activation_dropout=m.activation_dropout,
    )

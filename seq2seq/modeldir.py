"""The model directory: a self-describing, tamper-evident, pickle-free translator on disk.

Layout::

    MODEL_DIR/
      config.yaml          the resolved experiment config (every key)
      spm.model            SentencePiece model (or spm.src.model + spm.tgt.model)
      model.safetensors    inference weights (averaged or best checkpoint); no pickle
      manifest.json        format name + version, and the sha256 of each file above
      checkpoints/         Lightning training checkpoints (training and resume only)
      logs/                CSV and TensorBoard logs

:func:`load_model_dir` (used by translate, evaluate, export and plot) reads only the
manifest, YAML, SentencePiece and safetensors files: loading a model never unpickles, and
a missing, truncated or altered file is a :class:`UserError` naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seq2seq.config import ConfigError, ExperimentConfig, dump_config, load_config
from seq2seq.errors import UserError
from seq2seq.files import atomic_open, sha256_file
from seq2seq.model import Seq2SeqTransformer, build_model

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LoadedModel",
    "ModelDirError",
    "load_model_dir",
    "save_model_dir",
    "state_dict_for_saving",
    "write_manifest",
]

FORMAT_NAME = "seq2seq-model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.yaml"
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
SPM_FILES = ("spm.model", "spm.src.model", "spm.tgt.model")


class ModelDirError(UserError):
    """A model directory that is missing, incomplete, altered or of another format."""


@dataclass
class LoadedModel:
    """A model directory, loaded: config, model (eval mode) and tokenizer."""

    path: Path
    cfg: ExperimentConfig
    model: Seq2SeqTransformer
    tokenizer: object  # seq2seq.tokenizer.Tokenizer (imported lazily to keep this light)


def state_dict_for_saving(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors without the aliases that tying or sharing creates.

    Shared/tied parameters appear once (under their first name); :func:`load_model_dir`
    rebuilds the model from its config, so the ties are restored by construction.
    Buffers that are not persistent (the sinusoidal table) are not included.
    """
    seen: dict[int, str] = {}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen and tensor.numel() > 0:
            continue
        seen[key] = name
        out[name] = tensor.detach().to("cpu").contiguous().clone()
    return out


def _manifest_files(model_dir: Path) -> list[str]:
    names = [CONFIG_FILE, WEIGHTS_FILE]
    names += [n for n in SPM_FILES if (model_dir / n).is_file()]
    return names


def write_manifest(model_dir: str | Path) -> Path:
    """(Re)write manifest.json with the sha256 of config, weights and SentencePiece files."""
    model_dir = Path(model_dir)
    files = {}
    for name in _manifest_files(model_dir):
        if not (model_dir / name).is_file():
            raise ModelDirError(f"{model_dir / name} is missing; cannot write the manifest")
        files[name] = sha256_file(model_dir / name)
    manifest = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "files": files}
    path = model_dir / MANIFEST_FILE
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return path


def save_model_dir(
    model_dir: str | Path,
    model: torch.nn.Module,
    cfg: ExperimentConfig,
    *,
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write config.yaml, model.safetensors and the manifest into ``model_dir``.

    The SentencePiece file(s) must already be in ``model_dir`` (the data module trains
    them there). ``weights`` (e.g. an average of checkpoints) replaces the model's own.
    Each file is written atomically; the manifest is written last.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    with atomic_open(model_dir / CONFIG_FILE, "w", encoding="utf-8") as f:
        f.write(dump_config(cfg))
    tensors = weights if weights is not None else state_dict_for_saving(model)
    tmp_name = f".{WEIGHTS_FILE}.writing"
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(model_dir / tmp_name),
        metadata={"format": FORMAT_NAME, "version": str(FORMAT_VERSION)},
    )
    (model_dir / tmp_name).replace(model_dir / WEIGHTS_FILE)
    return write_manifest(model_dir)


def verify_model_dir(model_dir: Path) -> dict:
    """Check the manifest and every file it lists; return the manifest."""
    if not model_dir.is_dir():
        raise ModelDirError(f"model directory not found: {model_dir}")
    manifest_path = model_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ModelDirError(
            f"{manifest_path} is missing: {model_dir} is not a seq2seq model directory "
            "(train one with `seq2seq train`)"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{manifest_path} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ModelDirError(f"{manifest_path} does not describe a {FORMAT_NAME} directory")
    if manifest.get("version") != FORMAT_VERSION:
        raise ModelDirError(
            f"{manifest_path}: format version {manifest.get('version')!r} is not supported "
            f"(this seq2seq reads version {FORMAT_VERSION})"
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or CONFIG_FILE not in files or WEIGHTS_FILE not in files:
        raise ModelDirError(f"{manifest_path} lists no config or weights")
    for name, expected in files.items():
        path = model_dir / name
        if Path(name).name != name:
            raise ModelDirError(f"{manifest_path} names a file outside the directory: {name!r}")
        if not path.is_file():
            raise ModelDirError(f"{path} is missing (listed in {MANIFEST_FILE})")
        actual = sha256_file(path)
        if actual != expected:
            raise ModelDirError(
                f"{path} is corrupt or was altered: sha256 {actual} does not match "
                f"{expected} in {MANIFEST_FILE}"
            )
    return manifest


def load_model_dir(model_dir: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """Verify and load a model directory (no unpickling anywhere).

    Raises:
        ModelDirError: a missing, truncated or altered file, naming it.
    """
    from seq2seq.tokenizer import Tokenizer

    model_dir = Path(model_dir)
    verify_model_dir(model_dir)
    try:
        cfg = load_config(model_dir / CONFIG_FILE)
    except ConfigError as e:
        raise ModelDirError(f"{model_dir / CONFIG_FILE}: {e}") from None
    tokenizer = Tokenizer.load(model_dir)
    from seq2seq.tokenizer import PAD_ID

    model = build_model(
        cfg.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )
    try:
        tensors = load_file(str(model_dir / WEIGHTS_FILE))
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelDirError(f"{model_dir / WEIGHTS_FILE} cannot be read: {e}") from None
    expected = state_dict_for_saving(model)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise ModelDirError(
            f"{model_dir / WEIGHTS_FILE} does not fit {model_dir / CONFIG_FILE}: "
            f"missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for name, tensor in tensors.items():
        if tensor.shape != expected[name].shape:
            raise ModelDirError(
                f"{model_dir / WEIGHTS_FILE}: {name} has shape {tuple(tensor.shape)}, the config "
                f"needs {tuple(expected[name].shape)}"
            )
    model.load_state_dict(tensors, strict=False)
    model.to(device).eval()
    return LoadedModel(path=model_dir, cfg=cfg, model=model, tokenizer=tokenizer)

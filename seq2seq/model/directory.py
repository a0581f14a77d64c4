"""The model directory: a self-describing, tamper-evident, pickle-free translator on disk.

Layout::

    MODEL_DIR/
      config.yaml          the resolved experiment config (every key)
      spm.model            SentencePiece model (or spm.src.model + spm.tgt.model)
      model.safetensors    inference weights (averaged or best checkpoint); no pickle
      parent.json          only for a fine-tuned model: its parent's path and manifest sha256
      manifest.json        format name + version, the sha256 of each file above, and the
                           sha256 of the manifest's own content
      checkpoints/         Lightning training checkpoints (training and resume only)
      logs/                CSV and TensorBoard logs

:func:`load_model_dir` (used by translate, evaluate, export and plot) reads only the
manifest (JSON), the config (``yaml.safe_load``), SentencePiece (protobuf) and safetensors
files: loading a model never unpickles, so a hostile model directory cannot run code. A
missing, truncated or altered file is a :class:`ModelDirError` naming the file.

The checksums detect corruption and accidental edits (a half-copied directory, a
hand-edited config, weights replaced by another run's); they are not a signature: whoever
can write the directory can rewrite the manifest too. What keeps a hostile directory
harmless is the pickle-free loading, and the config is checked against the weights'
shapes (read from the safetensors header) before any weight is allocated.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.config import ConfigError, ExperimentConfig, dump_config, load_config
from seq2seq.core import UserError, atomic_open, printable, recover_replaced, sha256_file

# a converted model's piece -> id maps, when it has them
from seq2seq.data import (
    LANGUAGES_FILE,
    M2M100_SPM,
    M2M100_VOCAB,
    NLLB_TOKENIZER,
    TARGET_VOCAB_FILE,
    VOCAB_FILE,
)
from seq2seq.model.tensor_files import SafetensorsReader, layout_of, write_safetensors
from seq2seq.model.transformer import Seq2SeqTransformer, build_model

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LoadedModel",
    "ModelDirError",
    "check_finite",
    "check_out_dir",
    "held_model_files",
    "load_model_dir",
    "safetensors_bytes",
    "save_model_dir",
    "state_dict_for_saving",
    "verify_model_dir",
    "write_manifest",
]

FORMAT_NAME = "seq2seq-model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.yaml"
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
SPM_FILES = ("spm.model", "spm.src.model", "spm.tgt.model")
PARENT_FILE = "parent.json"
"""A fine-tuned model's parent (path, manifest sha256; seq2seq/train/finetune.py), when it has one."""
TOKENIZER_FILES = (
    *SPM_FILES,
    VOCAB_FILE,
    TARGET_VOCAB_FILE,
    LANGUAGES_FILE,  # a converted M2M100 / NLLB model's (seq2seq.data.lang_tokens)
    M2M100_SPM,
    M2M100_VOCAB,
    NLLB_TOKENIZER,
)
"""Every tokenizer file a model directory may hold (those it has are in its manifest)."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".ckpt", ".pt", ".pth")
"""Files that hold a model's weights, in a model directory or an export folder."""
_FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})


class ModelDirError(UserError):
    """A model directory that is missing, incomplete, altered or of another format."""


@dataclass
class LoadedModel:
    """A model directory, loaded: config, model (eval mode) and tokenizer."""

    path: Path
    cfg: ExperimentConfig
    model: Seq2SeqTransformer
    tokenizer: object  # seq2seq.data.tokenizer.Tokenizer (imported lazily to keep this light)


def held_model_files(path: str | Path) -> list[str]:
    """The files that make ``path`` a model: its manifest and its weights (any
    :data:`WEIGHT_SUFFIXES` file at the top, as an export folder has), sorted; [] for a path
    that holds none, or is not a directory."""
    path = Path(path)
    if not path.is_dir():
        return []
    return sorted(
        p.name
        for p in path.iterdir()
        if p.name == MANIFEST_FILE or (p.suffix in WEIGHT_SUFFIXES and p.is_file())
    )


def check_out_dir(
    out_dir: str | Path,
    *,
    force: bool,
    whole: bool = True,
    what: str = "--out",
    error: type[UserError] = UserError,
) -> None:
    """The one check of the folder a command writes a model into (``train --out``, ``convert``,
    ``average``, ``export``), before any work: never overwrite a model unless told ``--force``.

    What a killed replace of ``out_dir`` left beside it is dealt with first
    (:func:`seq2seq.core.files.recover_replaced`: a previous folder is moved back, or refused).
    Then a folder that holds a model (:func:`held_model_files`) is refused without ``force``;
    so is any existing ``out_dir`` when the command replaces it ``whole`` (``convert``,
    ``average``, ``export``: the new folder takes its place), while ``train``, which writes
    into its folder, may use one that holds no model yet.

    Args:
        error: the ``UserError`` subclass to raise (each command's own).

    Raises:
        UserError: (``error``) one line naming the folder and what to do.
    """
    out_dir = Path(out_dir)
    shown = printable(str(out_dir))
    recover_replaced(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise error(f"{what} {shown} exists and is not a directory")
    if force or not out_dir.exists():
        return
    held = held_model_files(out_dir)
    if held:
        files = ", ".join(printable(name) for name in held[:3]) + (", ..." if len(held) > 3 else "")
        raise error(f"{what} {shown} already holds a model ({files}); pass --force to replace it")
    if whole:
        raise error(f"{what} {shown} already exists; pass --force to replace it")


def _unique_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``state_dict()`` entries, each shared or tied tensor once (under its first name).

    Identity decides (tied parameters are one object); for real tensors a shared data
    pointer does too. Works on the meta device, where every data pointer is 0.
    """
    seen_ids: set[int] = set()
    seen_ptrs: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        ptr = tensor.data_ptr() if tensor.device.type != "meta" and tensor.numel() > 0 else None
        if id(tensor) in seen_ids or (ptr is not None and ptr in seen_ptrs):
            continue
        seen_ids.add(id(tensor))
        if ptr is not None:
            seen_ptrs.add(ptr)
        out[name] = tensor
    return out


def state_dict_for_saving(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors without the aliases that tying or sharing creates.

    Shared/tied parameters appear once (under their first name); :func:`load_model_dir`
    rebuilds the model from its config, so the ties are restored by construction.
    Buffers that are not persistent (the sinusoidal table) are not included.
    """
    return {
        name: tensor.detach().to("cpu").contiguous().clone()
        for name, tensor in _unique_state(model).items()
    }


def _manifest_files(model_dir: Path) -> list[str]:
    names = [CONFIG_FILE, WEIGHTS_FILE]
    names += [n for n in (*TOKENIZER_FILES, PARENT_FILE) if (model_dir / n).is_file()]
    return names


def _content_sha256(manifest: dict) -> str:
    """sha256 of the manifest's content (format, version, files) in canonical JSON."""
    content = {k: manifest.get(k) for k in ("format", "version", "files")}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_manifest(model_dir: str | Path) -> Path:
    """(Re)write manifest.json with the sha256 of config, weights and SentencePiece files."""
    model_dir = Path(model_dir)
    files = {}
    for name in _manifest_files(model_dir):
        if not (model_dir / name).is_file():
            raise ModelDirError(f"{model_dir / name} is missing; cannot write the manifest")
        files[name] = sha256_file(model_dir / name)
    manifest: dict = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "files": files}
    manifest["sha256"] = _content_sha256(manifest)
    path = model_dir / MANIFEST_FILE
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return path


def safetensors_bytes(
    tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> bytes:
    """The safetensors file of ``tensors``, the same bytes for the same tensors every time.

    safetensors writes its ``__metadata__`` from a Rust hash map, whose order changes from one
    call to the next; two saves of the same weights would then differ in bytes, and so in the
    manifest's sha256. The header is written as canonical JSON (sorted keys, no spaces, padded
    with spaces to a multiple of 8 bytes as the format asks) by
    :func:`seq2seq.model.tensor_files.write_safetensors`, which :func:`save_model_dir` streams
    to the file instead.

    Args:
        tensors: The tensors to write.
        metadata: String pairs for the header's ``__metadata__`` (None: none).

    Returns:
        The file's bytes.
    """
    buffer = io.BytesIO()
    write_safetensors(buffer, layout_of(tensors), tensors.__getitem__, metadata)
    return buffer.getvalue()


Weights = Mapping[str, "torch.Tensor | Callable[[], torch.Tensor]"]
"""Tensors to save, each one or a function that makes it (a converter's, called when the
tensor is written, so that one converted tensor exists at a time)."""


def save_model_dir(
    model_dir: str | Path,
    model: torch.nn.Module,
    cfg: ExperimentConfig,
    *,
    weights: Weights | None = None,
) -> Path:
    """Write config.yaml, model.safetensors and the manifest into ``model_dir``.

    The SentencePiece file(s) must already be in ``model_dir`` (the data module trains
    them there). ``weights`` (e.g. an average of checkpoints, or a converter's tensors)
    replaces the model's own; a function in it is called when its tensor is written, with the
    dtype and shape of the model's tensor of that name (the model may then be built on the
    meta device: it gives shapes only). The weights file is streamed, one tensor at a time.
    Each file is written atomically; the manifest is written last.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    with atomic_open(model_dir / CONFIG_FILE, "w", encoding="utf-8") as f:
        f.write(dump_config(cfg))
    if weights is None:
        weights = {n: t.detach() for n, t in _unique_state(model).items()}
    model_layout = layout_of(_unique_state(model)) if any(map(callable, weights.values())) else {}
    if model_layout and set(model_layout) != set(weights):
        extra, missing = (
            sorted(set(weights) - set(model_layout)),
            sorted(set(model_layout) - set(weights)),
        )
        raise ValueError(
            f"weights do not fit the model: unexpected {extra[:3]}, missing {missing[:3]}"
        )
    layout = {
        name: model_layout[name] if callable(value) else (value.dtype, tuple(value.shape))
        for name, value in weights.items()
    }

    def make(name: str) -> torch.Tensor:
        value = weights[name]
        return value() if callable(value) else value

    metadata = {"format": FORMAT_NAME, "version": str(FORMAT_VERSION)}
    with atomic_open(model_dir / WEIGHTS_FILE, "wb") as f:  # 0644 like every other file
        write_safetensors(f, layout, make, metadata)
    return write_manifest(model_dir)


def verify_model_dir(model_dir: str | Path) -> dict:
    """Check the manifest and every file it lists; return the manifest.

    Raises:
        ModelDirError: no directory; a missing, unreadable or altered manifest; a listed file
            that is missing or whose sha256 differs (the file named).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelDirError(f"model directory not found: {model_dir}")
    manifest_path = model_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ModelDirError(
            f"{manifest_path} is missing: {model_dir} is not a seq2seq model directory "
            "(train one with `seq2seq train`)"
        )
    try:
        manifest = json.loads(manifest_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{manifest_path} is corrupt: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ModelDirError(f"{manifest_path} does not describe a {FORMAT_NAME} directory")
    if manifest.get("version") != FORMAT_VERSION:
        raise ModelDirError(
            f"{manifest_path}: format version {manifest.get('version')!r} is not supported "
            f"(this seq2seq reads version {FORMAT_VERSION})"
        )
    if manifest.get("sha256") != _content_sha256(manifest):
        raise ModelDirError(
            f"{manifest_path} is corrupt or was altered: its content does not match its own sha256"
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or CONFIG_FILE not in files or WEIGHTS_FILE not in files:
        raise ModelDirError(f"{manifest_path} lists no config or weights")
    for name, expected in files.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise ModelDirError(f"{manifest_path} names a file outside the directory: {name!r}")
        path = model_dir / name
        if not path.is_file():
            raise ModelDirError(f"{path} is missing (listed in {MANIFEST_FILE})")
        try:
            actual = sha256_file(path)
        except OSError as e:
            raise ModelDirError(f"{path} cannot be read: {e.strerror}") from None
        if actual != expected:
            raise ModelDirError(
                f"{path} is corrupt or was altered: sha256 {actual} does not match "
                f"{expected} in {MANIFEST_FILE}"
            )
    return manifest


def _check_weights(model_dir: Path, expected: dict[str, torch.Tensor]) -> None:
    """Compare the safetensors header (names, shapes, dtypes) with the model the config builds.

    Only the header is read, so a config that does not fit the weights (e.g. a huge
    ``d_model``) is reported before anything is allocated.
    """
    weights, config = model_dir / WEIGHTS_FILE, model_dir / CONFIG_FILE
    try:
        with SafetensorsReader(weights) as f:
            header = {k: (info.shape, info.dtype) for k, info in f.infos.items()}
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{weights} is not a safetensors file: {e}") from None
    missing = sorted(set(expected) - set(header))
    unexpected = sorted(set(header) - set(expected))
    if missing or unexpected:
        raise ModelDirError(
            f"{weights} does not fit {config}: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for name, (shape, dtype) in header.items():
        want = expected[name]
        if shape != tuple(want.shape):
            raise ModelDirError(
                f"{weights}: {name} has shape {shape}, {config} needs {tuple(want.shape)}"
            )
        if want.is_floating_point() and dtype not in _FLOAT_DTYPES:
            raise ModelDirError(f"{weights}: {name} has dtype {dtype}, not a floating type")


_CHUNK = 1 << 20  # elements checked at a time: the check's temporaries stay a few MB


def _finite(weights: Path | str, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, refused if it holds NaN or infinity: such a model translates every line to
    garbage or to nothing, without any other sign (a diverged run, a corrupted average)."""
    if not tensor.is_floating_point():
        return tensor
    flat = tensor.reshape(-1)
    bad = sum(
        int((~torch.isfinite(flat[i : i + _CHUNK])).sum()) for i in range(0, flat.numel(), _CHUNK)
    )
    if bad:
        raise ModelDirError(
            f"{weights}: {name} holds {bad} NaN or infinite values of {tensor.numel()}; "
            "the model is broken (a diverged run?)"
        )
    return tensor


def check_finite(tensors: dict[str, torch.Tensor], where: Path | str) -> None:
    """Refuse weights that hold NaN or infinity before they are written: every loader would
    refuse the model (the same check, :func:`load_model_dir`).

    Raises:
        ModelDirError: naming ``where`` (the file the weights came from), the tensor and the
            count of bad values.
    """
    for name, tensor in tensors.items():
        _finite(where, name, tensor)


def _copy_weights(weights: Path, model: torch.nn.Module) -> None:
    """Read the tensors of ``weights`` into ``model``, one at a time and straight into each
    parameter's memory when the dtypes agree: the memory peak is the model (plus a tensor
    whose dtype differs), not twice the model (a tied or shared tensor is stored once and
    read once, into the one tensor its aliases share)."""
    targets = model.state_dict()  # tensors that share the parameters' storage
    try:
        with SafetensorsReader(weights) as f, torch.no_grad():
            for name in f.keys():
                target = targets[name]
                got = f.read(name, out=target)
                if got is not target:  # another dtype (or layout): converted here
                    target.copy_(got)
                    del got
                _finite(weights, name, target)
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{weights} cannot be read: {e}") from None


def load_model_dir(model_dir: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """Verify and load a model directory (no unpickling anywhere).

    Raises:
        ModelDirError: a missing, truncated or altered file, naming it; a config that the
            weights do not fit.
    """
    from seq2seq.data import PAD_ID, Tokenizer

    model_dir = Path(model_dir)
    manifest = verify_model_dir(model_dir)
    config_path = model_dir / CONFIG_FILE
    try:
        cfg = load_config(config_path)
    except ConfigError as e:
        message = str(e) if str(config_path) in str(e) else f"{config_path}: {e}"
        raise ModelDirError(message) from None
    listed = manifest["files"]
    if LANGUAGES_FILE in listed:  # a converted M2M100 / NLLB model
        joint = False
    elif SPM_FILES[0] in listed:
        joint = True
    elif SPM_FILES[1] in listed and SPM_FILES[2] in listed:
        joint = False
    else:
        raise ModelDirError(
            f"{model_dir / MANIFEST_FILE} lists no SentencePiece model "
            f"({SPM_FILES[0]}, or {SPM_FILES[1]} and {SPM_FILES[2]})"
        )
    for name in (VOCAB_FILE, TARGET_VOCAB_FILE, LANGUAGES_FILE):
        if (model_dir / name).is_file() and name not in listed:
            raise ModelDirError(f"{model_dir / name} is not listed in {MANIFEST_FILE}")
    tokenizer = Tokenizer.load(model_dir, joint=joint)  # only files the manifest verified
    sizes = dict(
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )
    try:
        with torch.device("meta"):  # shapes only: nothing allocated
            skeleton = build_model(cfg.model, **sizes)
    except (ValueError, RuntimeError) as e:
        raise ModelDirError(f"{config_path}: invalid model section ({e})") from None
    _check_weights(model_dir, _unique_state(skeleton))
    del skeleton
    model = build_model(cfg.model, **sizes, weights_follow=True)
    _copy_weights(model_dir / WEIGHTS_FILE, model)
    model.to(device).eval()
    return LoadedModel(path=model_dir, cfg=cfg, model=model, tokenizer=tokenizer)

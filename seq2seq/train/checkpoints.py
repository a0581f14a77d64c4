"""Checkpoint averaging (fairseq's ``average_checkpoints.py``) and safe checkpoint reading.

Averaging the weights of the last few checkpoints of a run (element-wise mean, accumulated in
float64) usually gains a little BLEU over the last checkpoint alone and costs nothing at
inference time. ``seq2seq train`` averages the last ``training.average_last`` periodic
checkpoints into the model directory's ``model.safetensors``; ``seq2seq average`` does it by
hand (``seq2seq average runs/x -n 10 --out runs/x_avg10``).

Checkpoints are read with ``torch.load(weights_only=True)`` only: they hold tensors,
numbers, strings and containers, never pickled objects. A file that would need unsafe
unpickling, a truncated file or one of another model is a :class:`CheckpointError`.
"""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from seq2seq.core import UserError

if TYPE_CHECKING:
    from seq2seq.config import ExperimentConfig
    from seq2seq.model import Seq2SeqTransformer

__all__ = [
    "BEST",
    "CHECKPOINT_DIR",
    "CHECKPOINT_KEY",
    "CheckpointError",
    "LAST",
    "average_checkpoints",
    "average_model_dir",
    "checkpoints_to_average",
    "model_state",
    "periodic_checkpoints",
    "read_checkpoint",
]

CHECKPOINT_DIR = "checkpoints"
"""A run directory's checkpoints: ``stepNNNNNNNN.ckpt``, ``last.ckpt``, ``best.ckpt``."""
LAST = "last.ckpt"
"""The newest checkpoint (a hard link to the newest periodic one): what --resume continues."""
BEST = "best.ckpt"
"""The best checkpoint by ``training.val_metric``."""
CHECKPOINT_KEY = "seq2seq"
"""Top-level key of a training checkpoint holding seq2seq's own (plain) state: the config."""
MODEL_PREFIX = "model."
"""Prefix of the model's tensors in the LightningModule's state_dict."""
_PERIODIC = re.compile(r"^step(\d+)\.ckpt$")


class CheckpointError(UserError):
    """A training checkpoint that is missing, unreadable, unsafe or incompatible."""


def read_checkpoint(path: str | Path) -> dict:
    """Load a training checkpoint on the CPU with ``weights_only=True``.

    Raises:
        CheckpointError: the file is missing, truncated or corrupt, needs unsafe
            unpickling, or is not a Lightning checkpoint (no ``state_dict``).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # torch colours its message
        # torch words a refused global two ways: one not on its allow-list ("Unsupported
        # global: GLOBAL builtins.exec was not an allowed global"), one from a module it
        # blocks outright ("Trying to load unsupported GLOBAL posix.system whose module posix
        # is blocked")
        needs = re.search(r"Unsupported global: GLOBAL (\S+)", text) or re.search(
            r"unsupported GLOBAL (\S+) whose module \S+ is blocked", text, re.IGNORECASE
        )
        if needs:
            raise CheckpointError(
                f"{path} holds objects that only unsafe unpickling could load (it needs "
                f"{needs.group(1)}); refusing it (checkpoints must contain only tensors, "
                "numbers and strings)"
            ) from None
        reason = re.search(r"WeightsUnpickler error: (.+)", text)
        first = reason.group(1).strip() if reason else type(e).__name__
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated?): {first}"
        ) from None
    except Exception as e:  # weights_only: a parse error of a corrupt file, never foreign code
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated?): {type(e).__name__} {first}"
        ) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not a seq2seq training checkpoint (no state_dict)")
    return ckpt


def model_state(ckpt: dict) -> dict[str, Tensor]:
    """The model's tensors of a checkpoint, named as in ``Seq2SeqTransformer.state_dict()``.

    Tied or shared parameters appear under each of their names (as in ``state_dict()``).
    """
    return {
        k[len(MODEL_PREFIX) :]: v
        for k, v in ckpt["state_dict"].items()
        if k.startswith(MODEL_PREFIX)
    }


def _periodic_by_step(ckpt_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of each periodic checkpoint ``stepNNNNNNNN.ckpt``, oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = []
    for p in ckpt_dir.iterdir():
        m = _PERIODIC.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def periodic_checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """The periodic checkpoints ``stepNNNNNNNN.ckpt`` of a run, oldest first (by step)."""
    return [p for _, p in _periodic_by_step(ckpt_dir)]


def checkpoints_to_average(ckpt_dir: str | Path, n: int) -> list[Path]:
    """The checkpoints the end of training averages: the last ``n`` periodic ones, from the
    second half of the run only.

    A run that completes its schedule keeps ``keep_last`` checkpoints near its end, and this is
    simply the last ``n`` (fairseq's ``--num-update-checkpoints``). A run stopped early (time
    limit, early stopping) may still hold checkpoints from its first updates, taken at a far
    higher learning rate; averaging those with the final weights lands between two different
    models, so checkpoints older than half the last one's update count are left out (the last
    checkpoint always counts). Oldest first; empty when there are no periodic checkpoints.
    """
    found = _periodic_by_step(ckpt_dir)[-n:] if n > 0 else []
    if not found:
        return []
    half = found[-1][0] / 2
    return [p for step, p in found if step >= half]


def average_checkpoints(paths: list[str | Path]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of ``paths`` (fairseq style).

    Floating-point tensors are summed in float64 and cast back to their dtype; other
    tensors (integer buffers) are taken from the last checkpoint. One checkpoint is held in
    memory at a time besides the running sum.

    Returns:
        The averaged model state, keys as in ``Seq2SeqTransformer.state_dict()``.

    Raises:
        CheckpointError: no paths, an unreadable file, or checkpoints whose tensor names,
            shapes or model configs differ.
    """
    if not paths:
        raise CheckpointError("no checkpoints to average")
    sums: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    first_model_cfg = None
    for i, path in enumerate(paths):
        ckpt = read_checkpoint(path)
        model_cfg = ckpt.get(CHECKPOINT_KEY, {}).get("config", {}).get("model")
        state = model_state(ckpt)
        if not state:
            raise CheckpointError(f"{path} holds no model weights")
        if i == 0:
            first_model_cfg = model_cfg
            for name, t in state.items():
                dtypes[name] = t.dtype
                sums[name] = t.double() if t.is_floating_point() else t.clone()
            continue
        if model_cfg != first_model_cfg:
            raise CheckpointError(
                f"{path} is of another model than {paths[0]} (model config differs)"
            )
        if set(state) != set(sums):
            diff = sorted(set(state) ^ set(sums))[:3]
            raise CheckpointError(f"{path} and {paths[0]} hold different tensors: {diff}")
        for name, t in state.items():
            if t.shape != sums[name].shape:
                raise CheckpointError(
                    f"{path}: {name} has shape {tuple(t.shape)}, {paths[0]} has "
                    f"{tuple(sums[name].shape)}"
                )
            if t.is_floating_point():
                sums[name] += t.double()
            else:
                sums[name] = t.clone()
        del ckpt, state
    n = len(paths)
    return {
        name: (s / n).to(dtypes[name]) if dtypes[name].is_floating_point else s
        for name, s in sums.items()
    }


def model_for_run(run_dir: str | Path, cfg: ExperimentConfig) -> Seq2SeqTransformer:
    """A fresh model shaped by ``cfg.model`` and the vocabularies of the run's SentencePiece."""
    from seq2seq.data import PAD_ID, Tokenizer
    from seq2seq.model import build_model

    tokenizer = Tokenizer.load(run_dir)
    return build_model(
        cfg.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )


def average_model_dir(
    model_dir: str | Path,
    *,
    n: int,
    out: str | Path,
    force: bool = False,
    overrides: list[str] | tuple[str, ...] = (),
) -> Path:
    """Average the last ``n`` periodic checkpoints of a run directory into ``out``.

    ``out`` ending in ``.safetensors`` gets the weights alone (the same tensors a model
    directory's ``model.safetensors`` holds); any other ``out`` becomes a full model
    directory (config, SentencePiece model(s), weights, manifest) that loads, translates and
    evaluates like the one ``seq2seq train`` wrote. Either is written atomically: a kill
    leaves the previous ``out`` (or nothing), never a half-written one. An existing ``out``
    is replaced only with ``force``. ``overrides`` (``key=value``, as on the command line)
    change the written config, e.g. the ``decoding.len_penalty`` a recipe chose.

    Raises:
        CheckpointError: fewer than ``n`` periodic checkpoints, or unreadable ones; an
            existing ``out`` without ``force``.
    """
    from seq2seq.config import load_config
    from seq2seq.core import atomic_dir, atomic_open
    from seq2seq.model import (
        CONFIG_FILE,
        PARENT_FILE,
        TOKENIZER_FILES,
        check_out_dir,
        safetensors_bytes,
        save_model_dir,
        state_dict_for_saving,
    )

    model_dir, out = Path(model_dir), Path(out)
    if n < 1:
        raise CheckpointError(f"-n must be >= 1, got {n}")
    if out.resolve() == model_dir.resolve():
        raise CheckpointError(f"--out {out} is the run directory itself; choose another")
    if out.suffix != ".safetensors":
        check_out_dir(out, force=force, error=CheckpointError)
    elif out.exists() and not force:
        raise CheckpointError(f"--out {out} already exists; pass --force to replace it")
    if not (model_dir / CONFIG_FILE).is_file():
        raise CheckpointError(f"{model_dir / CONFIG_FILE} is missing: not a `seq2seq train` run")
    found = periodic_checkpoints(model_dir / CHECKPOINT_DIR)
    if len(found) < n:
        raise CheckpointError(
            f"{model_dir / CHECKPOINT_DIR} has {len(found)} periodic checkpoints "
            f"(stepNNNNNNNN.ckpt), fewer than the {n} asked for"
        )
    paths = found[-n:]
    weights = average_checkpoints(paths)
    cfg = load_config(model_dir / CONFIG_FILE, list(overrides))
    model = model_for_run(model_dir, cfg)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(
            f"{paths[-1]} does not fit {model_dir / CONFIG_FILE}: {first}"
        ) from None
    if out.suffix == ".safetensors":
        with atomic_open(out, "wb") as f:
            f.write(safetensors_bytes(state_dict_for_saving(model)))
        return out
    with atomic_dir(out, overwrite=force) as tmp:
        # the tokenizer (a converted model's vocab.json too) and a fine-tuned run's parent record
        for name in (*TOKENIZER_FILES, PARENT_FILE):
            if (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, tmp / name)
        save_model_dir(tmp, model, cfg)
    return out

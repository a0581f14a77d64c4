"""Training checkpoints are read with ``torch.load(weights_only=True)`` only; nothing unpickles.

A checkpoint that only unsafe unpickling could read (a code payload, or merely a pickled
object such as an argparse.Namespace of hyperparameters) is a clear UserError for
``seq2seq average`` and ``seq2seq train --resume``, and its code never runs. A source scan
keeps every loader in seq2seq/ safe.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from factories import make_model_dir, synthetic_pairs

from seq2seq.cli import main
from seq2seq.config.loading import dump_config, load_config
from seq2seq.model.directory import load_model_dir
from seq2seq.train.checkpointer import AtomicCheckpointIO
from seq2seq.train.checkpoints import CheckpointError, read_checkpoint

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Payload:
    """Unpickling this runs code: it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _model_state(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_model_dir(model_dir).model.state_dict()


def save_checkpoint(path: Path, state: dict[str, torch.Tensor], **extra) -> Path:
    """A checkpoint shaped like the ones `seq2seq train` writes (plain values only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ckpt = {
        "state_dict": {"model." + k: v.clone() for k, v in state.items()},
        "global_step": 10,
        "seq2seq": {"config": {"model": {"d_model": 32}}},
        **extra,
    }
    torch.save(ckpt, path)
    return path


def save_hostile_checkpoint(path: Path, state: dict[str, torch.Tensor], marker: Path) -> Path:
    """Like :func:`save_checkpoint`, plus a payload that unsafe loading would run."""
    save_checkpoint(path, state, hyper_parameters=Payload(marker))
    # the payload is real: an unsafe load runs it
    torch.load(path, weights_only=False)
    assert marker.exists()
    marker.unlink()
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.fixture
def run_dir(pristine: Path, tmp_path: Path) -> Path:
    """A `seq2seq train` run directory in progress: config, SentencePiece, no exported model."""
    run = Path(shutil.copytree(pristine, tmp_path / "run"))
    (run / "model.safetensors").unlink()
    (run / "manifest.json").unlink()
    return run


# ---- read_checkpoint and the Lightning checkpoint I/O ----------------------------------------


def test_a_code_payload_is_refused_and_never_runs(pristine: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = save_hostile_checkpoint(tmp_path / "evil.ckpt", _model_state(pristine), marker)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    assert str(path) in str(e.value) and "unsafe unpickling" in str(e.value)
    assert "it needs exec" in str(e.value) and "\n" not in str(e.value)
    assert "\x1b" not in str(e.value)  # no terminal colour codes from torch's message
    with pytest.raises(CheckpointError, match="unsafe unpickling"):
        AtomicCheckpointIO().load_checkpoint(path, weights_only=False)  # what Lightning calls
    assert not marker.exists()


class Call:
    """Unpickling this calls ``func(*args)``."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


@pytest.mark.parametrize(
    "func, needs",
    [
        (os.system, "posix.system"),  # a module torch blocks: its second wording
        (subprocess.call, ".call"),
        (subprocess.Popen, ".Popen"),
        (builtins.eval, "eval"),
        (os.remove, "posix.remove"),
    ],
)
def test_payloads_of_every_kind_are_refused_with_the_right_words(tmp_path, func, needs):
    marker = tmp_path / "pwned"
    if func in (os.system,):
        args = (f"touch {marker}",)
    elif func in (subprocess.call, subprocess.Popen):
        args = (["touch", str(marker)],)
    elif func is builtins.eval:
        args = (f"open({str(marker)!r}, 'w').close()",)
    else:
        marker.write_text("")
        args = (str(marker),)
    path = save_checkpoint(tmp_path / "evil.ckpt", {"w": torch.zeros(2)}, x=Call(func, *args))
    before = marker.exists()
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    message = str(e.value)
    assert "only unsafe unpickling could load (it needs " in message, message
    assert needs in message and "truncated" not in message and "\n" not in message
    assert marker.exists() == before  # never ran


def test_a_benign_pickled_object_is_refused_too(tmp_path: Path) -> None:
    """Lightning's save_hyperparameters() pickles a Namespace: still not weights_only-loadable."""
    path = tmp_path / "hparams.ckpt"
    save_checkpoint(path, {"w": torch.zeros(2)}, hyper_parameters=argparse.Namespace(lr=1.0))
    with pytest.raises(CheckpointError, match="only unsafe unpickling could load"):
        read_checkpoint(path)


def test_plain_checkpoints_load(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "ok.ckpt", {"w": torch.ones(2)}, note="text", n=3)
    ckpt = read_checkpoint(path)
    assert torch.equal(ckpt["state_dict"]["model.w"], torch.ones(2)) and ckpt["n"] == 3


@pytest.mark.parametrize("keep", [0, 100, -100])
def test_a_truncated_checkpoint_is_a_clear_error(tmp_path: Path, keep: int) -> None:
    path = save_checkpoint(tmp_path / "t.ckpt", {"w": torch.ones(1000)})
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    "data", [b"hello world", b"\x80\x02garbage", bytes(range(256)), b"PK\x03\x04xx"]
)
def test_a_garbage_file_is_unreadable_not_unsafe(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "garbage.ckpt"
    path.write_bytes(data)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    assert "not a readable checkpoint" in str(e.value) and "unsafe" not in str(e.value)


# ---- the commands ----------------------------------------------------------------------------


def test_seq2seq_average_refuses_a_hostile_checkpoint(
    run_dir: Path, pristine: Path, tmp_path: Path, capsys
) -> None:
    marker = tmp_path / "pwned"
    state = _model_state(pristine)
    save_checkpoint(run_dir / "checkpoints" / "step00000010.ckpt", state)
    evil = save_hostile_checkpoint(run_dir / "checkpoints" / "step00000020.ckpt", state, marker)
    out = tmp_path / "avg"
    assert main(["average", str(run_dir), "-n", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seq2seq average: error: ") and str(evil) in err[0]
    assert "unsafe unpickling" in err[0]
    assert not marker.exists() and not out.exists()
    # the same run without the hostile checkpoint averages fine
    evil.unlink()
    assert main(["average", str(run_dir), "-n", "1", "--out", str(out)]) == 0
    assert load_model_dir(out).model is not None


def test_seq2seq_train_resume_refuses_a_hostile_last_checkpoint(
    run_dir: Path, pristine: Path, tmp_path: Path, capsys
) -> None:
    marker = tmp_path / "pwned"
    pairs = synthetic_pairs(64)
    for split in ("tr", "va"):
        (tmp_path / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), "utf-8")
        (tmp_path / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), "utf-8")
    cfg = load_config(
        run_dir / "config.yaml",
        [
            f"data.train_prefix={tmp_path / 'tr'}",
            f"data.valid_prefix={tmp_path / 'va'}",
            "data.max_tokens=256",
            "training.max_steps=2",
            "training.val_every_steps=1",
            "training.accelerator=cpu",
            "training.devices=1",
            "training.threads=1",
        ],
    )
    (run_dir / "config.yaml").write_text(dump_config(cfg), encoding="utf-8")
    last = save_hostile_checkpoint(
        run_dir / "checkpoints" / "last.ckpt", _model_state(pristine), marker
    )
    assert main(["train", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("seq2seq train: error: "), err
    assert str(last) in err[-1] and "unsafe unpickling could load (it needs exec)" in err[-1]
    assert not marker.exists()
    assert not (run_dir / "model.safetensors").exists()  # nothing exported from it


# ---- every loader in seq2seq/ is a safe one --------------------------------------------------


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def unsafe_loads(source: str, filename: str) -> list[str]:
    """Calls in ``source`` that could unpickle (or run YAML tags): ``file:line: call``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        where = f"{filename}:{node.lineno}: {name}"
        leaf = name.rsplit(".", 1)[-1]
        if name in ("torch.load", "torch.serialization.load"):
            value = _keyword(node, "weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                found.append(where + " without weights_only=True")
        elif name.split(".")[0] in ("pickle", "cPickle", "dill", "cloudpickle", "joblib"):
            if leaf in ("load", "loads", "Unpickler"):
                found.append(where)
        elif name in ("np.load", "numpy.load"):
            value = _keyword(node, "allow_pickle")
            if value is not None and not (isinstance(value, ast.Constant) and value.value is False):
                found.append(where + " with allow_pickle")
        elif name.split(".")[0] == "yaml" and leaf in (
            "load",
            "load_all",
            "unsafe_load",
            "full_load",
        ):
            found.append(where + " (use yaml.safe_load)")
        elif leaf in ("load_from_checkpoint", "jit.load") or name == "torch.jit.load":
            found.append(where)
    return found


def test_the_scanner_finds_unsafe_loads() -> None:
    bad = (
        "torch.load(p)\ntorch.load(p, weights_only=False)\npickle.loads(b)\n"
        "np.load(p, allow_pickle=True)\nyaml.load(t, Loader=yaml.Loader)\n"
        "Module.load_from_checkpoint(p)\n"
    )
    assert len(unsafe_loads(bad, "x.py")) == 6
    good = "torch.load(p, map_location='cpu', weights_only=True)\nnp.load(p)\nyaml.safe_load(t)\n"
    assert unsafe_loads(good, "x.py") == []


def test_seq2seq_has_no_unsafe_loader() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 40
    found = []
    for path in files:
        found += unsafe_loads(path.read_text(encoding="utf-8"), path.name)
    assert found == []
    # and checkpoints are actually read through torch.load(weights_only=True)
    assert "weights_only=True" in (PACKAGE / "train" / "checkpoints.py").read_text(encoding="utf-8")

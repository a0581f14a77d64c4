"""Checkpoint averaging and safe checkpoint reading (seq2seq/train/checkpoints.py, `seq2seq average`)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from factories import make_model_dir
from safetensors.torch import load_file

from seq2seq.cli import main
from seq2seq.model.directory import load_model_dir, state_dict_for_saving
from seq2seq.train.checkpoints import (
    CheckpointError,
    average_checkpoints,
    checkpoints_to_average,
    periodic_checkpoints,
    read_checkpoint,
)


def _save(path: Path, tensors: dict[str, torch.Tensor], **extra) -> Path:
    state = {"model." + k: v for k, v in tensors.items()}
    torch.save({"state_dict": state, "global_step": 1, **extra}, path)
    return path


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(4, 3, generator=g),
        "half": torch.randn(5, generator=g).to(torch.bfloat16),
        "count": torch.tensor([seed], dtype=torch.long),
    }


def test_average_of_identical_checkpoints_is_the_checkpoint(tmp_path):
    t = _tensors(0)
    paths = [_save(tmp_path / f"c{i}.ckpt", t) for i in range(3)]
    avg = average_checkpoints(paths)
    assert set(avg) == set(t)
    for name in t:
        assert avg[name].dtype == t[name].dtype
        assert torch.equal(avg[name], t[name]), name


def test_average_of_different_checkpoints_is_the_elementwise_mean(tmp_path):
    ts = [_tensors(s) for s in (1, 2, 3, 4)]
    paths = [_save(tmp_path / f"c{i}.ckpt", t) for i, t in enumerate(ts)]
    avg = average_checkpoints(paths)
    for name in ("w", "half"):
        expected = torch.stack([t[name].double() for t in ts]).mean(0).to(ts[0][name].dtype)
        torch.testing.assert_close(avg[name], expected, rtol=0, atol=0)
        assert avg[name].dtype == ts[0][name].dtype
    # not just the first or the last one
    assert not torch.equal(avg["w"], ts[0]["w"]) and not torch.equal(avg["w"], ts[-1]["w"])
    assert torch.equal(avg["count"], ts[-1]["count"])  # integer buffers: the last checkpoint's


def test_average_rejects_mismatched_checkpoints(tmp_path):
    a = _save(tmp_path / "a.ckpt", {"w": torch.zeros(2, 2)})
    b = _save(tmp_path / "b.ckpt", {"w": torch.zeros(3, 2)})
    c = _save(tmp_path / "c.ckpt", {"v": torch.zeros(2, 2)})
    with pytest.raises(CheckpointError, match="shape"):
        average_checkpoints([a, b])
    with pytest.raises(CheckpointError, match="different tensors"):
        average_checkpoints([a, c])
    with pytest.raises(CheckpointError, match="no checkpoints"):
        average_checkpoints([])


class _NotATensor:
    pass


def test_read_checkpoint_refuses_unsafe_and_truncated_files(tmp_path):
    unsafe = tmp_path / "unsafe.ckpt"
    torch.save({"state_dict": {}, "payload": _NotATensor()}, unsafe)
    with pytest.raises(CheckpointError, match="unsafe unpickling"):
        read_checkpoint(unsafe)
    good = _save(tmp_path / "good.ckpt", _tensors(0))
    data = good.read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(truncated)
    with pytest.raises(CheckpointError, match="not found"):
        read_checkpoint(tmp_path / "missing.ckpt")
    assert read_checkpoint(good)["global_step"] == 1


def test_periodic_checkpoints_are_sorted_by_step(tmp_path):
    for step in (100, 20, 3000):
        _save(tmp_path / f"step{step:08d}.ckpt", _tensors(0))
    (tmp_path / "last.ckpt").write_bytes(b"")
    (tmp_path / "best.ckpt").write_bytes(b"")
    names = [p.name for p in periodic_checkpoints(tmp_path)]
    assert names == ["step00000020.ckpt", "step00000100.ckpt", "step00003000.ckpt"]


def _steps(tmp_path: Path, steps) -> None:
    for step in steps:
        (tmp_path / f"step{step:08d}.ckpt").write_bytes(b"")


def _picked(tmp_path: Path, n: int) -> list[int]:
    return [int(p.stem[4:]) for p in checkpoints_to_average(tmp_path, n)]


def test_a_completed_run_averages_its_last_n_checkpoints(tmp_path):
    _steps(tmp_path, range(11_000, 20_001, 1000))
    assert _picked(tmp_path, 10) == list(range(11_000, 20_001, 1000))
    assert _picked(tmp_path, 3) == [18_000, 19_000, 20_000]
    assert _picked(tmp_path, 1) == [20_000]
    assert _picked(tmp_path, 0) == []
    assert checkpoints_to_average(tmp_path / "missing", 5) == []


def test_an_early_stopped_run_leaves_out_its_first_half(tmp_path):
    # A run stopped by its time limit at 1,911 updates, resumed, stopped again at 8,508.
    _steps(tmp_path, [1000, 1911, *range(2000, 8001, 1000), 8508])
    assert _picked(tmp_path, 10) == [5000, 6000, 7000, 8000, 8508]
    assert _picked(tmp_path, 3) == [7000, 8000, 8508]
    (tmp_path / "step00004254.ckpt").write_bytes(b"")  # exactly half of 8,508 counts
    assert _picked(tmp_path, 10)[0] == 4254


@pytest.fixture
def run_dir(tmp_path) -> tuple[Path, list[dict[str, torch.Tensor]]]:
    """A model directory with three periodic checkpoints of perturbed weights (ties kept)."""
    run = make_model_dir(tmp_path / "run")
    model = load_model_dir(run).model
    states = []
    (run / "checkpoints").mkdir()
    for i, step in enumerate((50, 100, 150)):
        m = copy.deepcopy(model)
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for p in m.parameters():  # tied parameters are one tensor: they stay tied
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        state = m.state_dict()
        torch.save(
            {"state_dict": {"model." + k: v for k, v in state.items()}, "global_step": step},
            run / "checkpoints" / f"step{step:08d}.ckpt",
        )
        states.append(state_dict_for_saving(m))
    return run, states


def test_cli_average_writes_a_loadable_model_dir(run_dir, tmp_path, capsys):
    run, states = run_dir
    out = tmp_path / "avg"
    assert main(["average", str(run), "-n", "2", "--out", str(out)]) == 0
    loaded = load_model_dir(out)
    got = state_dict_for_saving(loaded.model)
    for name, tensor in got.items():
        expected = ((states[1][name].double() + states[2][name].double()) / 2).float()
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-7, msg=name)
    # the tie survives the round trip
    assert loaded.model.output_proj.weight is loaded.model.decoder.embedding.weight
    assert loaded.tokenizer.fingerprint() == load_model_dir(run).tokenizer.fingerprint()


def test_cli_average_to_safetensors_and_too_few_checkpoints(run_dir, tmp_path, capsys):
    run, states = run_dir
    out = tmp_path / "avg3.safetensors"
    assert main(["average", str(run), "-n", "3", "--out", str(out)]) == 0
    tensors = load_file(str(out))
    assert set(tensors) == set(states[0])
    for name, tensor in tensors.items():
        expected = (sum(s[name].double() for s in states) / 3).float()
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-7, msg=name)
    assert main(["average", str(run), "-n", "4", "--out", str(tmp_path / "avg4.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seq2seq average: error:") and "fewer than the 4" in err
    assert len(err.splitlines()) == 1
    assert (out.stat().st_mode & 0o777) == 0o644  # readable by others, like every other file


def test_average_never_overwrites_without_force_and_writes_atomically(
    run_dir, tmp_path, capsys, monkeypatch
):
    run, _ = run_dir
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "precious.txt").write_text("keep me", encoding="utf-8")
    assert main(["average", str(run), "-n", "2", "--out", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"seq2seq average: error: --out {other} already exists; pass --force to replace it"
    )
    assert (other / "precious.txt").read_text(encoding="utf-8") == "keep me"
    # a failure in the middle of writing (a kill, a full disk) leaves the old output whole
    out = tmp_path / "avg"
    assert main(["average", str(run), "-n", "2", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import seq2seq.model.directory

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(seq2seq.model.directory, "write_manifest", broken)
    with pytest.raises(OSError):
        main(["average", str(run), "-n", "3", "--out", str(out), "--force"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".avg")]
    monkeypatch.undo()
    assert main(["average", str(run), "-n", "3", "--out", str(out), "--force"]) == 0
    assert load_model_dir(out).cfg == load_model_dir(run).cfg
    # --out over the run itself, or a folder holding it: refused before any work
    for bad in (run, run.parent):
        assert main(["average", str(run), "-n", "2", "--out", str(bad), "--force"]) == 2
        assert "would destroy the input" in capsys.readouterr().err

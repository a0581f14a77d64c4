"""`seq2seq train` end to end: it learns, resumes exactly after SIGKILL, writes checkpoints
atomically, survives non-finite losses, runs under DDP, and fails clearly on user mistakes."""

from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seq2seq.cli import main
from seq2seq.config.loading import dump_config, load_config
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.decode.translator import Translator
from seq2seq.model.directory import load_model_dir, state_dict_for_saving
from seq2seq.train.checkpointer import AtomicCheckpointIO
from seq2seq.train.checkpoints import CheckpointError, average_checkpoints, read_checkpoint
from seq2seq.train.lr_schedule import lr_factor
from seq2seq.train.module import TrainingDiverged, TranslationModule
from seq2seq.train.trainer import train

REPO = Path(__file__).resolve().parents[1]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def write_copy_corpus(directory: Path, *, n_train: int = 400, n_valid: int = 40) -> Path:
    """A copy task: 2-5 words from 12 per sentence; ``train.{src,tgt}``, ``valid.{src,tgt}``."""
    rng = random.Random(0)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", n_valid)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        text = "".join(line + "\n" for line in lines)
        (directory / f"{split}.src").write_text(text, encoding="utf-8")
        (directory / f"{split}.tgt").write_text(text, encoding="utf-8")
    return directory


def overrides(data: Path, **training: object) -> list[str]:
    """A tiny model on the copy corpus, one thread, CPU; ``training`` adds training.* keys."""
    base = [
        "data.corpus=files",
        "data.pair=src-tgt",
        f"data.train_prefix={data}/train",
        f"data.valid_prefix={data}/valid",
        "data.vocab_size=40",
        "data.max_tokens=300",
        "model.d_model=32",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "model.max_positions=64",
        "data.max_len=63",  # fits max_positions with BOS or EOS
        "model.dropout=0.1",
        "training.lr=0.01",
        "training.warmup_steps=10",
        "training.log_every_steps=1",
        "training.accelerator=cpu",
        "training.devices=1",
        "training.threads=1",
        "training.keep_last=2",
        "training.average_last=2",
        "training.val_samples=2",
    ]
    return base + [f"training.{k}={v}" for k, v in training.items()]


def csv_metrics(run: Path) -> dict[str, dict[int, float]]:
    """metric -> step -> value over every launch (logs/csv/version_*) of a run."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    versions = sorted(
        (run / "logs" / "csv").glob("version_*"), key=lambda p: int(p.name.split("_")[1])
    )
    for version in versions:
        with open(version / "metrics.csv", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                for key, value in row.items():
                    if key not in ("epoch", "step") and value:
                        out[key][int(row["step"])] = float(value)
    return out


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# Learning


def test_tiny_model_learns_to_copy(tmp_path, capsys):
    data = write_copy_corpus(tmp_path / "data")
    cfg = load_config(
        None,
        overrides(
            data,
            lr=0.01,
            warmup_steps=10,
            max_steps=300,
            val_every_steps=100,
            log_every_steps=10,
            expected_step_s=0.0002,  # 0.2 ms per update: surely slower (seq2seq/train/pace_watch.py)
        )
        + ["model.d_model=64", "model.n_heads=4", "model.d_ff=128", "model.dropout=0.0"]
        + ["data.max_tokens=600"],
    )
    run = train(cfg, tmp_path / "run", progress=False)
    captured = capsys.readouterr()
    out = captured.out
    assert "step 300/300 loss " in captured.err and " tok_s " in captured.err  # text progress
    assert "expected training time: under a minute for 300 updates" in captured.err
    assert captured.err.count("warning: training runs ") == 1  # once, however slow

    m = csv_metrics(run)
    losses = [m["train/loss"][s] for s in sorted(m["train/loss"])]
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3, losses
    bleu = [m["val/bleu"][s] for s in sorted(m["val/bleu"])]
    assert len(bleu) == 3 and bleu[-1] > 50 and bleu[0] < bleu[-1], bleu
    assert m["val/loss"] and m["val/chrf"] and m["train/tok_s"] and m["train/lr"]
    wall = [m["val/wall_min"][s] for s in sorted(m["val/wall_min"])]  # BLEU-against-time
    assert len(wall) == 3 and 0 < wall[0] < wall[1] < wall[2], wall
    # sacreBLEU's signature once, samples at each validation
    assert out.count("nrefs:1|case:mixed|eff:no|tok:13a") == 1, out
    assert out.count("  HYP ") == 3 * 2

    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == [
        "best.ckpt",
        "last.ckpt",
        "step00000200.ckpt",
        "step00000300.ckpt",
    ]
    assert read_checkpoint(ckpts / "last.ckpt")["global_step"] == 300
    best_step = 100 * (1 + max(range(3), key=lambda i: bleu[i]))
    assert read_checkpoint(ckpts / "best.ckpt")["global_step"] == best_step
    for name in ("config.yaml", "spm.model", "model.safetensors", "manifest.json"):
        assert (run / name).is_file(), name
    assert any((run / "logs" / "tb").rglob("events.out.tfevents.*"))

    # the exported model is the average of the last two periodic checkpoints, and loads
    loaded = load_model_dir(run)
    avg = average_checkpoints([ckpts / "step00000200.ckpt", ckpts / "step00000300.ckpt"])
    exported = load_file(str(run / "model.safetensors"))
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, avg[name], msg=name)
    assert set(exported) == set(state_dict_for_saving(loaded.model))
    hyps = Translator.load(run, method="greedy").translate(["alpha beta gamma", "mu iota"])
    assert len(hyps) == 2 and all(isinstance(h, str) for h in hyps)


# ---------------------------------------------------------------------------------------------
# Exact resume after SIGKILL, atomic checkpoints

RUNNER = textwrap.dedent(
    """
    import io, os, signal, sys
    import torch

    kill_at = int(os.environ.get("KILL_AT_SAVE", "0"))
    if kill_at:
        real_save, calls = torch.save, [0]

        def save(obj, f, *args, **kwargs):
            calls[0] += 1
            if calls[0] == kill_at:  # die halfway through writing this checkpoint
                buf = io.BytesIO()
                real_save(obj, buf)
                data = buf.getvalue()
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            return real_save(obj, f, *args, **kwargs)

        torch.save = save

    from seq2seq.cli import main

    sys.exit(main(sys.argv[1:]))
    """
)


def run_train(tmp_path: Path, *args: str, kill_at_save: int = 0) -> subprocess.CompletedProcess:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), KILL_AT_SAVE=str(kill_at_save))
    env.pop("SEQ2SEQ_DEBUG", None)
    return subprocess.run(
        [sys.executable, str(script), "train", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_sigkill_mid_epoch_and_mid_write_then_resume_logs_the_same_losses(tmp_path):
    data = write_copy_corpus(tmp_path / "data")
    cfg_file = tmp_path / "cfg.yaml"
    # 20 batches per epoch; checkpoints every 4 updates, validation every 8: the kill hits
    # the 4th checkpoint (step 16, written after its validation), so the run resumes from
    # step 12 (mid-epoch, written at a batch end) and must redo validation 16 and cross the
    # epoch boundary at 20 exactly as the uninterrupted run did. Dropout is on.
    cfg = load_config(
        None,
        overrides(
            data,
            max_steps=30,
            val_every_steps=8,
            save_every_steps=4,
            deterministic="true",
            keep_last=3,
        ),
    )
    dump_config(cfg, cfg_file)

    full = tmp_path / "full"
    r = run_train(tmp_path, "--config", str(cfg_file), "--out", str(full))
    assert r.returncode == 0, r.stderr[-3000:]

    killed = tmp_path / "killed"
    r = run_train(tmp_path, "--config", str(cfg_file), "--out", str(killed), kill_at_save=4)
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    ckpts = killed / "checkpoints"
    half_written = list(ckpts.glob(".step00000016.ckpt.*"))
    assert half_written, sorted(p.name for p in ckpts.iterdir())  # killed inside the write
    assert not (ckpts / "step00000016.ckpt").exists()
    last = read_checkpoint(ckpts / "last.ckpt")  # the previous checkpoint is intact
    assert last["global_step"] == 12

    r = run_train(tmp_path, "--resume", str(killed))
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(ckpts.glob(".*.tmp"))

    a, b = csv_metrics(full), csv_metrics(killed)
    resumed_steps = sorted(b["train/loss"])
    assert resumed_steps[-1] == 29 and set(range(12, 30)) <= set(resumed_steps)
    for key in ("train/loss", "train/lr", "val/loss", "val/bleu"):
        assert a[key], key
        for step, value in a[key].items():
            if step >= 12:
                assert b[key][step] == pytest.approx(value, rel=1e-5, abs=1e-6), (key, step)
    for name, tensor in load_file(str(full / "model.safetensors")).items():
        other = load_file(str(killed / "model.safetensors"))[name]
        torch.testing.assert_close(other, tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_failed_checkpoint_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    io_ = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io_.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, path)

    def broken(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="No space"):
        io_.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "global_step": 2}, path)
    monkeypatch.undo()
    ckpt = io_.load_checkpoint(path)
    assert ckpt["global_step"] == 1 and torch.equal(ckpt["state_dict"]["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


class _Payload:
    pass


def test_checkpoint_needing_unsafe_unpickling_is_refused(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": _Payload()}, path)
    with pytest.raises(CheckpointError, match="unsafe unpickling"):
        AtomicCheckpointIO().load_checkpoint(path)


# ---------------------------------------------------------------------------------------------
# Non-finite losses


def _poison(monkeypatch, bad_steps) -> None:
    real = TranslationModule.compute_loss

    def compute_loss(self, src_ids, tgt_ids):
        out = real(self, src_ids, tgt_ids)
        if self.training and bad_steps(self.global_step):
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(TranslationModule, "compute_loss", compute_loss)


def test_nonfinite_updates_are_skipped_and_counted(tmp_path, monkeypatch):
    data = write_copy_corpus(tmp_path / "data", n_train=200)
    _poison(monkeypatch, lambda step: step in (4, 5))
    cfg = load_config(
        None,
        overrides(
            data,
            max_steps=10,
            val_every_steps=5,
            max_nonfinite=3,
            accumulate=2,
            clip_norm=1.0,
            average_last=1,
        ),
    )
    run = train(cfg, tmp_path / "run", progress=False)
    m = csv_metrics(run)
    assert [m["train/nonfinite"][s] for s in range(10)] == [0, 0, 0, 0, 1, 2, 2, 2, 2, 2]
    loss = m["train/loss"]
    assert sorted(loss) == list(range(10))
    assert [s for s in range(10) if math.isnan(loss[s])] == [4, 5]  # logged as NaN, skipped
    norms = m["train/grad_norm"]
    assert [s for s in range(10) if not math.isfinite(norms[s])] == [4, 5]
    # had a NaN update been applied, every later loss would be NaN and the run would stop
    assert all(torch.isfinite(p).all() for p in load_model_dir(run).model.parameters())
    # the schedule advances once per update (2 batches each), skipped updates included
    f = lr_factor("inverse_sqrt", warmup_steps=10, d_model=32)
    for step, lr in m["train/lr"].items():
        assert lr == pytest.approx(0.01 * f(step), rel=1e-5), step


def test_too_many_nonfinite_updates_stop_with_the_last_good_checkpoint(tmp_path, monkeypatch):
    data = write_copy_corpus(tmp_path / "data", n_train=200)
    _poison(monkeypatch, lambda step: step >= 4)
    cfg = load_config(
        None, overrides(data, max_steps=20, val_every_steps=3, max_nonfinite=3, average_last=1)
    )
    with pytest.raises(TrainingDiverged, match="max_nonfinite"):
        train(cfg, tmp_path / "run", progress=False)
    last = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 6  # updates 5 and 6 were skipped, the 7th stopped the run
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values())


def test_early_stopping_ends_the_run_and_keeps_its_last_state(tmp_path):
    data = write_copy_corpus(tmp_path / "data", n_train=100, n_valid=10)
    # a learning rate this small changes no greedy output: BLEU never improves after the
    # first validation, so with patience 2 the run stops at the third one (step 6)
    cfg = load_config(None, overrides(data, lr=1e-9, max_steps=50, val_every_steps=2, patience=2))
    run = train(cfg, tmp_path / "run", progress=False)
    m = csv_metrics(run)
    assert sorted(m["val/bleu"]) == [1, 3, 5]
    last = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 6
    assert read_checkpoint(run / "checkpoints" / "best.ckpt")["global_step"] == 2
    assert (run / "model.safetensors").is_file()


def test_a_time_limit_stop_checkpoints_after_its_last_validation(tmp_path):
    # Lightning validates once more when a callback (here the Timer of training.max_time)
    # stops the run mid-interval. The last checkpoint, which --resume continues from, must hold
    # the best score including that validation; otherwise a resumed run forgets it and
    # overwrites best.ckpt with a worse model.
    data = write_copy_corpus(tmp_path / "data")
    cfg = load_config(
        None,
        overrides(
            data, max_steps=100_000, val_every_steps=7, val_metric="loss", max_time="00:00:00:04"
        ),
    )
    run = train(cfg, tmp_path / "run", progress=False)
    last = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert 0 < last["global_step"] < 100_000  # stopped by the time limit
    losses = csv_metrics(run)["val/loss"]
    assert max(losses) == last["global_step"] - 1  # the stop's own validation was logged
    state = last["callbacks"]["Checkpointer"]
    assert state["best_score"] == pytest.approx(min(losses.values()), rel=1e-6)
    best = read_checkpoint(run / "checkpoints" / "best.ckpt")
    assert best["global_step"] == state["best_step"] == 1 + min(losses, key=losses.get)


# ---------------------------------------------------------------------------------------------
# Distributed data parallel on CPU (gloo)

DDP_RUNNER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from seq2seq.train import module as system
    from seq2seq.config.loading import load_config
    from seq2seq.train.trainer import train

    out = Path(sys.argv[1])
    real = system.TranslationModule.on_train_batch_start

    def record(self, batch, batch_idx):
        with open(out.parent / f"seen.rank{self.trainer.global_rank}", "a") as f:
            f.write(json.dumps([self.trainer.current_epoch, batch.index.tolist()]) + "\\n")
        return real(self, batch, batch_idx)

    system.TranslationModule.on_train_batch_start = record
    train(load_config(sys.argv[2]), out, progress=False)
    """
)


@pytest.mark.slow
def test_ddp_two_cpu_processes_see_disjoint_shards(tmp_path):
    data = write_copy_corpus(tmp_path / "data")
    cfg = load_config(
        None,
        overrides(data, max_steps=12, val_every_steps=6, devices="2", strategy="ddp"),
    )
    cfg_file = tmp_path / "cfg.yaml"
    dump_config(cfg, cfg_file)
    script = tmp_path / "ddp_runner.py"
    script.write_text(DDP_RUNNER, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), str(cfg_file)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = []
    for rank in (0, 1):
        rows = [
            json.loads(line) for line in (tmp_path / f"seen.rank{rank}").read_text().splitlines()
        ]
        assert len(rows) == 12  # every rank ran every update
        seen.append({i for epoch, idx in rows if epoch == 0 for i in idx})
    assert not seen[0] & seen[1]  # disjoint shards
    assert seen[0] | seen[1] == set(range(400))  # epoch 0 (10 updates of 2 x 10) covers all
    m = csv_metrics(tmp_path / "run")
    assert sorted(m["val/bleu"]) == [5, 11]  # logged once per validation, not per rank
    assert "(40 sentences)" in r.stdout  # BLEU over the whole validation set
    loaded = load_model_dir(tmp_path / "run")
    assert loaded.cfg.training.strategy == "ddp"


# ---------------------------------------------------------------------------------------------
# Command line


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("seq2seq train: error: "), err
    return err


def test_train_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--resume" in out and "--out" in out and "example:" in out


def test_missing_config_and_typo_exit_2_with_one_line(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "missing.yaml"), "--out", "x"]) == 2
    assert "missing.yaml" in _one_line_error(capsys)
    typo = tmp_path / "typo.yaml"
    typo.write_text("training:\n  max_stpes: 3\n", encoding="utf-8")
    assert main(["train", "--config", str(typo), "--out", str(tmp_path / "r")]) == 2
    err = _one_line_error(capsys)
    assert "training.max_stpes" in err and "training.max_steps" in err
    assert main(["train", "--config", str(typo)]) == 2
    assert "--out" in _one_line_error(capsys)


def _fake_run(run: Path, cfg) -> None:
    (run / "checkpoints").mkdir(parents=True)
    dump_config(cfg, run / "config.yaml")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")


def test_resume_refuses_model_or_data_changes_and_missing_runs(tmp_path, capsys):
    data = write_copy_corpus(tmp_path / "data", n_train=20, n_valid=5)
    cfg = load_config(None, overrides(data, max_steps=5))
    run = tmp_path / "run"
    _fake_run(run, cfg)
    assert main(["train", "--resume", str(run), "model.d_model=64"]) == 2
    err = _one_line_error(capsys)
    assert "model.d_model (32 -> 64)" in err
    assert main(["train", "--resume", str(run), "data.max_tokens=100"]) == 2
    assert "data.max_tokens" in _one_line_error(capsys)
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "nothing to resume" in _one_line_error(capsys)
    cfg_file = tmp_path / "cfg.yaml"
    dump_config(cfg, cfg_file)
    assert main(["train", "--config", str(cfg_file), "--out", str(run)]) == 2
    assert "--resume" in _one_line_error(capsys)  # a new run never overwrites an old one


def test_resume_from_an_unsafe_checkpoint_is_a_clear_error(tmp_path, capsys):
    data = write_copy_corpus(tmp_path / "data", n_train=20, n_valid=5)
    cfg = load_config(None, overrides(data, max_steps=5))
    run = tmp_path / "run"
    _fake_run(run, cfg)
    # (a run that has a checkpoint has its SentencePiece model: --resume uses only that one)
    train_tokenizer(data / "train.src", data / "train.tgt", run, vocab_size=cfg.data.vocab_size)
    torch.save({"state_dict": {}, "x": _Payload()}, run / "checkpoints" / "last.ckpt")
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after the data module's report lines
    assert last.startswith("seq2seq train: error: ") and "unsafe unpickling" in last


# ---------------------------------------------------------------------------------------------
# training.precision auto (seq2seq/train/precision.py)


@pytest.mark.parametrize(("flags", "expected"), [({"avx2"}, "32"), ({"amx_bf16"}, "bf16-mixed")])
def test_precision_auto_is_resolved_and_trains(tmp_path, monkeypatch, capsys, flags, expected):
    import seq2seq.train.precision as precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    monkeypatch.setattr(precision, "bf16_speedup", lambda forward: 2.0)
    data = write_copy_corpus(tmp_path / "data", n_train=60, n_valid=6)
    cfg = load_config(None, overrides(data, precision="auto", max_steps=3, val_every_steps=3))
    run = train(cfg, tmp_path / "run", progress=False)
    assert f"training.precision auto: {expected} (" in capsys.readouterr().err
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert load_config(run / "config.yaml").training.precision == "auto"  # as configured

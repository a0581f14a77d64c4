"""Signals tell the truth: a real `seq2seq train` process stopped by SIGTERM exits 143, by
SIGINT 130, each with one line saying how to continue; the SIGTERM stop saves a checkpoint
that `--resume` continues from. `translate -o FILE` stopped by SIGTERM keeps FILE.partial.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_train import overrides, write_copy_corpus

from seq2seq.config.loading import dump_config, load_config
from seq2seq.core.signals import Stopped, exit_status, raise_on_sigterm
from seq2seq.train.checkpoints import periodic_checkpoints

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SEQ2SEQ_DEBUG", None)
    return env


def _start_train(tmp_path: Path, out: Path, *extra: str) -> subprocess.Popen:
    data = write_copy_corpus(tmp_path / "data")
    cfg = load_config(None, overrides(data, max_steps=100_000, val_every_steps=1000))
    cfg_file = tmp_path / "cfg.yaml"
    dump_config(cfg, cfg_file)
    return subprocess.Popen(
        [sys.executable, "-m", "seq2seq.cli", "train", "--config", str(cfg_file), "--out", str(out)]
        + list(extra),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
        # a shell without job control starts background jobs (`... &`) with SIGINT ignored,
        # and the child would inherit that and never see the test's SIGINT: a user's Ctrl-C
        # reaches a run whose SIGINT is at its default
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_step(proc: subprocess.Popen, step: int, timeout: float = 300) -> list[str]:
    """Read the run's stderr until it logs ``step N`` (TextProgress: one line per update)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(f"step {step}"):
            return lines
    proc.kill()
    tail = "".join(lines[-30:])
    raise AssertionError(f"the run never reached step {step}:\n{tail}")


def _finish(proc: subprocess.Popen) -> tuple[int, list[str]]:
    try:
        rest = proc.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:  # the signal did not stop it: fail, don't hang
        proc.kill()
        rest = proc.communicate()[1]
        raise AssertionError(f"the run did not stop:\n{rest[-2000:]}") from None
    return proc.returncode, rest.strip().splitlines()


@pytest.mark.slow
def test_sigterm_stops_training_with_143_a_checkpoint_and_one_line(tmp_path):
    run = tmp_path / "run"
    proc = _start_train(tmp_path, run)
    _wait_for_step(proc, 3)
    proc.send_signal(signal.SIGTERM)
    code, lines = _finish(proc)
    assert code == 143, lines[-20:]
    last = lines[-1]
    assert last.startswith("seq2seq train: training stopped by SIGTERM at step "), last
    assert f"seq2seq train --resume {run}" in last, last
    saved = periodic_checkpoints(run / "checkpoints")
    assert saved and f"checkpoint of step {int(saved[-1].stem[4:])}" in last
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert not (run / "model.safetensors").exists()  # not a finished run
    step = int(saved[-1].stem[4:])
    assert step >= 3
    # the checkpoint continues: resume to two more updates and finish normally
    r = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "train", "--resume", str(run)]
        + [f"training.max_steps={step + 2}"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "model.safetensors").is_file()


@pytest.mark.slow
def test_sigint_stops_training_with_130_and_one_line(tmp_path):
    run = tmp_path / "run"
    proc = _start_train(tmp_path, run, "training.save_every_steps=2")
    _wait_for_step(proc, 3)
    proc.send_signal(signal.SIGINT)
    code, lines = _finish(proc)
    assert code == 130, lines[-20:]
    last = lines[-1]
    assert last.startswith("seq2seq train: training stopped by SIGINT at step "), last
    assert f"with `seq2seq train --resume {run}`" in last, last


def test_sigterm_raises_stopped_only_inside_and_exit_statuses():
    assert exit_status(signal.SIGINT) == 130 and exit_status(signal.SIGTERM) == 143
    with raise_on_sigterm(), pytest.raises(Stopped) as e:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert e.value.exit_status == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


@pytest.mark.slow
def test_sigterm_during_translate_keeps_the_partial_and_says_resume(tmp_path):
    from factories import make_model_dir

    model = make_model_dir(tmp_path / "model")
    out = tmp_path / "out.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "seq2seq.cli", "translate", str(model), "-o", str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    proc.stdin.write("a man walks\n")
    proc.stdin.flush()
    partial = tmp_path / "out.txt.partial"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (partial.is_file() and partial.stat().st_size):
        time.sleep(0.1)  # the first line is translated and flushed; stdin stays open
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1].strip().splitlines()
    assert proc.returncode == 143, err
    assert err[-1].startswith("seq2seq translate: stopped by SIGTERM"), err
    assert "--resume" in err[-1]
    assert partial.read_text(encoding="utf-8").count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("signal_exception", [KeyboardInterrupt(), Stopped(signal.SIGTERM)])
def test_a_signal_while_sentencepiece_reads_stays_a_signal(tmp_path, monkeypatch, signal_exception):
    """SentencePiece runs the sentence iterator from C++ and would turn the KeyboardInterrupt
    (or the SIGTERM's Stopped) raised in it into 'SentencePiece training failed' (exit 2)."""
    import seq2seq.data.tokenizer as tokenizer

    def sentences(path):
        yield from ("alpha beta", "gamma delta") * 50
        raise signal_exception

    monkeypatch.setattr(tokenizer, "_sentences", sentences)
    src = tmp_path / "t.src"
    src.write_text("x\n", encoding="utf-8")
    with pytest.raises(type(signal_exception)):
        tokenizer.train_tokenizer(src, src, tmp_path / "tok", vocab_size=30)
    assert not (tmp_path / "tok" / "spm.model").exists()

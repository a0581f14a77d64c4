"""No command overwrites or loses a model directory: every writer refuses a folder that holds a
model unless ``--force`` (one check, ``seq2seq.model.check_out_dir``), and a ``--force`` replace
is safe against a signal at any point (``seq2seq.core.files.replace_dir``), with what a killed
replace left moved back or refused by name, never deleted."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from factories import make_model_dir, perturbed_copy
from test_finetune import ft_overrides, write_corpus

from seq2seq.cli import main
from seq2seq.core import UserError
from seq2seq.core.files import atomic_dir, recover_replaced
from seq2seq.core.signals import signals_deferred
from seq2seq.model.directory import check_out_dir, verify_model_dir


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("safety") / "parent")


def test_train_refuses_a_converted_or_averaged_model_directory(parent, tmp_path, capsys):
    # A model directory without checkpoints/ (converted, averaged, copied): `train --out` used
    # to write its config, weights and manifest over it.
    victim = perturbed_copy(parent, tmp_path / "victim", seed=3)
    before = _snapshot(victim)
    data = write_corpus(tmp_path / "data")
    argv = ["train", "--init-from", str(parent), "--out", str(victim), *ft_overrides(data)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"seq2seq train: error: --out {victim} already holds a model "
        "(manifest.json, model.safetensors); pass --force to replace it"
    )
    assert _snapshot(victim) == before
    # A folder with a run's checkpoints names both ways on.
    (victim / "checkpoints").mkdir()
    (victim / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"`seq2seq train --resume {victim}`" in err and "--force" in err
    # --force with --resume is refused before anything happens
    assert main(["train", "--resume", str(victim), "--force"]) == 2
    assert "--force starts a new run" in capsys.readouterr().err
    assert _snapshot(victim) == before


@pytest.mark.slow
def test_train_force_replaces_the_model_with_a_new_run(parent, tmp_path, capsys):
    victim = perturbed_copy(parent, tmp_path / "victim", seed=3)
    (victim / "notes.txt").write_text("old", encoding="utf-8")
    old_weights = (victim / "model.safetensors").read_bytes()
    data = write_corpus(tmp_path / "data")
    argv = ["train", "--init-from", str(parent), "--out", str(victim), *ft_overrides(data)]
    assert main([*argv, "--force"]) == 0
    assert "--force: deleted the previous" in capsys.readouterr().err
    verify_model_dir(victim)
    assert (victim / "model.safetensors").read_bytes() != old_weights
    assert not (victim / "notes.txt").exists()  # a new run in an empty folder
    assert _hidden(tmp_path) == []


def _write_marian_like(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["export", "{model}", "--format", "ctranslate2", "--out", "{out}"],
        ["export", "{model}", "--format", "onnx", "--out", "{out}"],
        ["export", "{model}", "--format", "hf", "--out", "{out}"],
        ["convert", "marian", "{hf}", "--out", "{out}"],
        ["average", "{run}", "-n", "1", "--out", "{out}"],
    ],
    ids=["ctranslate2", "onnx", "hf", "convert", "average"],
)
def test_every_writer_refuses_a_model_directory(parent, tmp_path, capsys, command):
    out = perturbed_copy(parent, tmp_path / "out", seed=1)
    before = _snapshot(out)
    hf = _write_marian_like(tmp_path / "hf")
    names = {"model": parent, "out": out, "hf": hf, "run": parent}
    rc = main([part.format(**names) for part in command])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.endswith(
        f"error: --out {out} already holds a model (manifest.json, model.safetensors); "
        "pass --force to replace it"
    ), err
    assert len(err.splitlines()) == 1
    assert _snapshot(out) == before and _hidden(tmp_path) == []


# A child process that replaces FOLDER with a new one and is stopped by SIG at the one
# dangerous instant: after the previous folder was moved aside and before the new one moved
# in (the platform's one-step exchange disabled, as where it does not exist).
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    import seq2seq.core.files as files

    folder, sig, exchange = Path(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3]
    # a test run started under nohup or as a background job hands its children these signals
    # ignored; the stops under test are the default ones
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if exchange == "no":
        files._exchange = lambda a, b: False
    real_replace, real_rmtree = os.replace, files.shutil.rmtree

    def replace(src, dst):
        real_replace(src, dst)
        if ".old-" in os.fspath(dst):  # the previous folder has just moved aside
            os.kill(os.getpid(), sig)
            time.sleep(0.5)

    def rmtree(path, *args, **kwargs):
        if exchange == "yes" and ".tmp-" in os.fspath(path) and (Path(path) / "old").exists():
            os.kill(os.getpid(), sig)  # the exchange is done; the previous folder is in tmp
            time.sleep(0.5)
        real_rmtree(path, *args, **kwargs)

    os.replace = replace
    files.shutil.rmtree = rmtree
    with files.atomic_dir(folder, overwrite=True) as tmp:
        (tmp / "new").write_text("the new model")
    print("replaced", flush=True)
    """
)


def _replace_in_child(folder: Path, sig: str, exchange: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), sig, exchange],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _previous(folder: Path) -> Path:
    folder.mkdir()
    (folder / "old").write_text("the previous model")
    return folder


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_between_the_renames_waits_until_the_new_folder_is_in(tmp_path, sig):
    folder = _previous(tmp_path / "model")
    result = _replace_in_child(folder, sig, exchange="no")
    assert result.returncode != 0 and "replaced" not in result.stdout  # it did stop ...
    assert (folder / "new").read_text() == "the new model"  # ... once the new folder was in
    assert not (folder / "old").exists()
    # Nothing left that anyone needs: the next write removes the rest without a word.
    recover_replaced(folder)
    assert _hidden(tmp_path) == []
    assert (folder / "new").read_text() == "the new model"


def test_sigkill_between_the_renames_loses_nothing_and_the_next_run_restores(tmp_path, capsys):
    folder = _previous(tmp_path / "model")
    result = _replace_in_child(folder, "SIGKILL", exchange="no")
    assert result.returncode == -signal.SIGKILL
    left = [name for name in _hidden(tmp_path) if ".old-" in name]
    assert len(left) == 1  # SIGKILL cannot be held off: the previous folder is aside
    # The next write of the folder (convert, export, average, train --out) moves it back
    # first, and then refuses to overwrite it without --force.
    with pytest.raises(UserError, match="already holds a model|already exists"):
        check_out_dir(folder, force=False)
    assert "restored" in capsys.readouterr().err
    assert (folder / "old").read_text() == "the previous model"
    assert _hidden(tmp_path) == []


def test_a_left_over_previous_folder_beside_a_new_one_is_refused_by_name(tmp_path):
    folder = _previous(tmp_path / "model")
    result = _replace_in_child(folder, "SIGKILL", exchange="no")
    assert result.returncode == -signal.SIGKILL
    (left,) = [p for p in tmp_path.iterdir() if ".old-" in p.name]
    folder.mkdir()  # something wrote the folder again meanwhile
    with pytest.raises(UserError, match="holds the previous model, left by a replace") as err:
        with atomic_dir(folder, overwrite=True) as tmp:
            (tmp / "x").write_text("x")
    assert str(left) in str(err.value)
    assert (left / "old").read_text() == "the previous model"  # never deleted


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_with_the_exchange_the_folder_is_never_missing(tmp_path, sig):
    folder = _previous(tmp_path / "model")
    result = _replace_in_child(folder, sig, exchange="yes")
    assert result.returncode != 0
    assert (folder / "new").read_text() == "the new model"
    recover_replaced(folder)  # the previous folder, swapped into the temporary one, goes
    assert _hidden(tmp_path) == []


def test_a_dead_processes_old_folder_of_another_host_is_left_alone(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], **_OUT)
    other = tmp_path / f".model.old-elsewhere-{int(dead.stdout)}"
    other.mkdir()
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())
    assert not host.startswith("elsewhere")
    recover_replaced(tmp_path / "model")
    assert other.is_dir() and not (tmp_path / "model").exists()


_OUT = {"capture_output": True, "text": True, "check": True}


def test_signals_deferred_delivers_the_signal_after_the_steps(tmp_path):
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # not SIG_IGN (nohup)
    try:
        done = []
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler would have run here
                done.append(1)
        assert done == [1]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_replacing_a_symlinked_folder_replaces_the_link_not_its_target(tmp_path):
    target = _previous(tmp_path / "elsewhere")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "model"
    link.symlink_to(target)
    with atomic_dir(link, overwrite=True) as tmp:
        (tmp / "new").write_text("the new model")
    assert not link.is_symlink() and (link / "new").read_text() == "the new model"
    assert (target / "old").read_text() == "the previous model"
    assert _hidden(tmp_path / "out") == []

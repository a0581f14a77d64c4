"""Every subcommand checks its inputs and outputs before any work (seq2seq/core/paths.py): an output
that is a folder, lies under a file or is the input, an input that is missing, a folder or
unreadable is one line naming the path and what is wrong, exit 2, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from factories import make_model_dir

import seq2seq.core.paths
from seq2seq.cli import main
from seq2seq.core.paths import PathError, check_paths


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("paths") / "model")


def _error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"seq2seq {command}: error: "), err
    return err.removeprefix(f"seq2seq {command}: error: ")


@pytest.fixture
def places(tmp_path) -> dict[str, Path]:
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("two dogs play\n", encoding="utf-8")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    return {"file": a_file, "dir": a_dir, "under_file": a_file / "sub" / "x"}


def _before(tmp_path: Path) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")}


def test_translate_output_that_is_a_directory_fails_before_translating(
    model_dir, places, tmp_path, capsys
):
    before = _before(tmp_path)
    args = ["translate", str(model_dir), "-i", str(places["file"]), "-o", str(places["dir"])]
    assert main(args) == 2
    assert _error(capsys, "translate") == f"-o {places['dir']} is a directory; give a file name"
    assert _before(tmp_path) == before  # no DIR.partial


def test_translate_refuses_to_overwrite_its_input(model_dir, places, capsys):
    text = places["file"].read_text(encoding="utf-8")
    assert (
        main(["translate", str(model_dir), "-i", str(places["file"]), "-o", str(places["file"])])
        == 2
    )
    assert "is the -i itself" in _error(capsys, "translate")
    assert places["file"].read_text(encoding="utf-8") == text
    # the same file through another name (a symbolic link) too
    link = places["dir"] / "link.txt"
    link.symlink_to(places["file"])
    assert main(["translate", str(model_dir), "-i", str(places["file"]), "-o", str(link)]) == 2
    assert "is the -i itself" in _error(capsys, "translate")


@pytest.mark.parametrize(
    "command, make_args, expected",
    [
        (
            "translate",
            lambda m, p: ["translate", m, "-i", str(p["dir"])],
            "is a directory, not a file",
        ),
        (
            "translate",
            lambda m, p: ["translate", m, "-i", str(p["dir"] / "nope")],
            "not found",
        ),
        ("translate", lambda m, p: ["translate", m, "-o", str(p["under_file"])], "which is a file"),
        (
            "train",
            lambda m, p: [
                "train",
                "--config",
                "configs/multi30k_tiny.yaml",
                "--out",
                str(p["file"]),
            ],
            "is a file, not a directory",
        ),
        (
            "train",
            lambda m, p: [
                "train",
                "--config",
                "configs/multi30k_tiny.yaml",
                "--out",
                str(p["under_file"]),
            ],
            "which is a file",
        ),
        (
            "train",
            lambda m, p: ["train", "--config", str(p["dir"]), "--out", str(p["dir"] / "run")],
            "--config",
        ),
        (
            "average",
            lambda m, p: ["average", m, "--out", str(p["under_file"]) + ".safetensors"],
            "which is a file",
        ),
        (
            "average",
            lambda m, p: ["average", m, "--out", str(p["file"])],
            "is a file, not a directory",
        ),
        (
            "export",
            lambda m, p: ["export", m, "--out", str(p["file"]), "--force"],
            "is a file, not a directory",
        ),
        ("export", lambda m, p: ["export", m, "--out", m, "--force"], "would destroy the input"),
        (
            "export",
            lambda m, p: ["export", m, "--out", str(Path(m).parent), "--force"],
            "holds the model directory",
        ),
        (
            "prepare",
            lambda m, p: ["prepare", "multi30k", "--out", str(p["under_file"])],
            "which is a file",
        ),
        (
            "evaluate",
            lambda m, p: [
                "evaluate",
                m,
                "--src",
                str(p["file"]),
                "--ref",
                str(p["file"]),
                "--out-dir",
                str(p["file"]),
            ],
            "is a file, not a directory",
        ),
        (
            "evaluate",
            lambda m, p: ["evaluate", m, "--src", str(p["dir"]), "--ref", str(p["file"])],
            "--src",
        ),
        (
            "plot",
            lambda m, p: ["plot", "mask", "-o", str(p["dir"])],
            "is a directory; give a file name",
        ),
        (
            "plot",
            lambda m, p: [
                "plot",
                "attention",
                m,
                "--text",
                "a dog",
                "-o",
                str(p["under_file"]) + ".png",
            ],
            "which is a file",
        ),
        ("serve", lambda m, p: ["serve", str(p["dir"] / "nope")], "not found"),
        (
            "score",
            lambda m, p: [
                "score",
                m,
                "--src",
                str(p["file"]),
                "--tgt",
                str(p["file"]),
                "-o",
                str(p["file"]),
            ],
            "is the --src itself",
        ),
        (
            "score",
            lambda m, p: ["score", m, m, "--src", str(p["file"]), "--tgt", str(p["dir"])],
            "--tgt",
        ),
        (
            "train",
            lambda m, p: [
                "train",
                "--config",
                "configs/multi30k_tiny.yaml",
                "--init-from",
                m,
                "--out",
                m,
            ],
            "is the --init-from itself",
        ),
    ],
)
def test_every_subcommand_checks_its_paths_first(
    command, make_args, expected, model_dir, places, tmp_path, capsys
):
    before = _before(tmp_path)
    assert main(make_args(str(model_dir), places)) == 2
    message = _error(capsys, command)
    assert expected in message, message
    assert _before(tmp_path) == before  # nothing written


def test_an_unreadable_training_file_is_named_before_any_work(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.en", "train.de", "valid.en", "valid.de"):
        (data / name).write_text("a dog runs\n", encoding="utf-8")
    real_access = os.access

    def access(path, mode, *args, **kwargs):  # root reads anything: play an ordinary user
        if Path(path) == data / "train.de" and mode & os.R_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(seq2seq.core.paths.os, "access", access)
    out = tmp_path / "run"
    overrides = [
        "data.corpus=files",
        f"data.train_prefix={data}/train",
        f"data.valid_prefix={data}/valid",
    ]
    args = ["train", "--config", "configs/multi30k_tiny.yaml", "--out", str(out), *overrides]
    assert main(args) == 2
    message = _error(capsys, "train")
    assert message == (f"data.train_prefix file {data}/train.de cannot be read: permission denied")
    assert not out.exists()


def test_an_unwritable_output_folder_is_named(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) == locked and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(seq2seq.core.paths.os, "access", access)
    with pytest.raises(
        PathError, match=f"-o {locked}/out.txt cannot be written: {locked} is not writable"
    ):
        check_paths(output_files=[("-o", locked / "out.txt")])
    with pytest.raises(PathError, match=f"--out {locked} is not writable"):
        check_paths(output_dirs=[("--out", locked)])


def test_stdin_and_unset_paths_are_skipped(tmp_path):
    check_paths(input_files=[("-i", "-"), ("--src", None)], output_files=[("-o", None)])
    check_paths(output_dirs=[("--out", tmp_path / "new" / "deeper")])  # created later


def test_a_device_or_pipe_as_output_file_is_refused(model_dir, places, capsys):
    fifo = places["dir"] / "fifo"
    os.mkfifo(fifo)
    for target in ("/dev/null", "/dev/stdout", str(fifo)):
        assert main(["translate", str(model_dir), "-i", str(places["file"]), "-o", target]) == 2
        assert "is not a regular file" in _error(capsys, "translate")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")  # untouched

"""The `seq2seq` command as a user runs it: help everywhere, one-line errors, exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SUBCOMMANDS = ["prepare", "train", "translate", "evaluate", "average", "export", "plot"]


def run_cli(
    *args: str, input: bytes | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SEQ2SEQ_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=env,
    )


def test_top_level_help_lists_every_subcommand():
    r = run_cli("--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for name in SUBCOMMANDS:
        assert name in out, name


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_help_has_an_example(name):
    r = run_cli(name, "--help")
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "example:" in out
    assert f"seq2seq {name}" in out


def test_no_subcommand_is_a_usage_error():
    r = run_cli()
    assert r.returncode == 2
    assert b"Traceback" not in r.stderr


def test_user_error_is_one_line_exit_2_no_traceback(tmp_path):
    r = run_cli("train", "--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "m"))
    assert r.returncode == 2
    err = r.stderr.decode().strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert err.startswith("seq2seq train: error: ")
    assert "missing.yaml" in err


def test_config_typo_names_key_and_suggestion(tmp_path):
    cfg = tmp_path / "x.yaml"
    cfg.write_text("model:\n  dropot: 0.1\n")
    r = run_cli("train", "--config", str(cfg), "--out", str(tmp_path / "m"))
    assert r.returncode == 2
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1
    assert "unknown key model.dropot" in err and "did you mean model.dropout?" in err


def test_debug_flag_shows_the_traceback(tmp_path):
    r = run_cli(
        "--debug", "train", "--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "m")
    )
    assert r.returncode != 0
    assert b"Traceback" in r.stderr


def test_version_and_every_config_named_in_help_exists():
    import re
    from pathlib import Path

    from seq2seq import __version__
    from seq2seq.cli.command import build_parser

    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.decode().strip() == f"seq2seq {__version__}"
    repo = Path(__file__).resolve().parents[1]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    named = set()
    for p in sub.choices.values():
        named |= set(re.findall(r"configs/[\w.-]+\.yaml", p.format_help()))
    assert named, "no help names a config"
    assert all((repo / name).is_file() for name in named), named

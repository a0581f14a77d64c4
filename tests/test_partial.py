"""`translate --resume` trusts FILE.partial only if it was started with the same input, model
and options: a fingerprint in FILE.partial.json, compared on resume (seq2seq/decode/partial_output.py)."""

from __future__ import annotations

import pytest
from factories import make_model_dir

import seq2seq.decode.stream
from seq2seq.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("partial") / "model")


@pytest.fixture
def interrupted(model_dir, tmp_path, monkeypatch):
    """A `translate -i a.txt -o out.txt --beam 3` stopped after its first line."""
    src = tmp_path / "a.txt"
    src.write_text("a dog runs\ntwo cats sit\nthe big tree\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    real = seq2seq.decode.stream.translate_stream

    def stopped(translator, reader, *, output, **kwargs):
        partial = output.with_name(output.name + ".partial")
        partial.write_text(translator.translate([reader.read_chunk(1)[0]])[0] + "\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(seq2seq.decode.stream, "translate_stream", stopped)
    args = ["translate", str(model_dir), "-i", str(src), "-o", str(out), "--beam", "3"]
    assert main(args) == 130
    monkeypatch.setattr(seq2seq.decode.stream, "translate_stream", real)
    assert (tmp_path / "out.txt.partial.json").is_file() and not out.exists()
    return args, src, out


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("seq2seq translate: error: "), err
    return err


def test_resume_with_the_same_input_and_options_finishes(interrupted, capsys):
    args, src, out = interrupted
    assert main([*args, "--resume"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert not out.with_name("out.txt.partial.json").exists()  # removed once complete


def test_resume_with_other_options_is_refused(interrupted, capsys):
    args, src, out = interrupted
    capsys.readouterr()
    assert main([*args[:-2], "--beam", "4", "--resume"]) == 2
    err = _error(capsys)
    assert "it was started with another beam_size (3 -> 4)" in err
    assert not out.exists() and out.with_name("out.txt.partial").is_file()  # kept as it was


def test_resume_with_another_input_is_refused(interrupted, capsys):
    args, src, out = interrupted
    capsys.readouterr()
    src.write_text("a dog runs\nsomething else\nthe big tree\n", encoding="utf-8")  # edited
    assert main([*args, "--resume"]) == 2
    assert "it was started with another input" in _error(capsys)


def test_resume_of_a_partial_without_a_record_is_refused(interrupted, capsys):
    args, src, out = interrupted
    capsys.readouterr()
    out.with_name("out.txt.partial.json").unlink()
    assert main([*args, "--resume"]) == 2
    assert "has no record of the input and options it was started with" in _error(capsys)

"""Inputs that used to give garbage silently are refused: negative length limits (every line
translated to an empty line), NaN or infinite weights (empty translations), blank evaluation
files (BLEU 0.00 with exit 0)."""

from __future__ import annotations

import pytest
import torch
from factories import make_model_dir
from safetensors.torch import load_file, save_file

from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.translator import Translator
from seq2seq.model.directory import ModelDirError, load_model_dir, write_manifest


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("garbage") / "model")


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--max-len-b", "-100", "max_len_b must be >= 0, got -100"),
        ("--max-len-a", "-5", "max_len_a must be >= 0, got -5.0"),
    ],
)
def test_negative_length_limits_are_refused(model_dir, tmp_path, capsys, option, value, expected):
    src = tmp_path / "in.txt"
    src.write_text("a dog runs\n", encoding="utf-8")
    assert main(["translate", str(model_dir), "-i", str(src), option, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"seq2seq translate: error: {expected}"


def test_both_length_limits_zero_is_refused():
    with pytest.raises(UserError, match="both 0: every translation would be empty"):
        SearchOptions(max_len_a=0, max_len_b=0)
    translator_opts = SearchOptions(max_len_a=0, max_len_b=5)  # a fixed limit is fine
    assert translator_opts.max_len_b == 5


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused_at_load(model_dir, tmp_path, bad):
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in model_dir.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    tensors = load_file(str(broken / "model.safetensors"))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = bad
    save_file(tensors, str(broken / "model.safetensors"))
    write_manifest(broken)  # the checksums agree: only the values are wrong
    with pytest.raises(ModelDirError, match=f"{name} holds 1 NaN or infinite values of"):
        load_model_dir(broken)
    with pytest.raises(ModelDirError):
        Translator.load(broken)
    assert torch.isfinite(load_file(str(model_dir / "model.safetensors"))[name]).all()


def test_evaluating_blank_files_is_an_error(model_dir, tmp_path, capsys):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("a dog runs\n  \n", encoding="utf-8")
    ref.write_text(" \n\t\n", encoding="utf-8")
    assert main(["evaluate", str(model_dir), "--src", str(src), "--ref", str(ref)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"seq2seq evaluate: error: {ref} holds no text (all 2 lines are blank): nothing to evaluate"
    )
    assert not (model_dir / "eval").exists()


def test_printable_escapes_control_characters_and_keeps_letters():
    from seq2seq.core.terminal import printable

    assert printable("Zwei Hunde spielen im Schnee. 🙂 é") == "Zwei Hunde spielen im Schnee. 🙂 é"
    assert printable("a\x1b[2Jb\x07c\rd\te\u202ef\x00") == "a\\x1b[2Jb\\x07c\\rd\\te\\u202ef\\x00"

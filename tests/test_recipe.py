"""The Multi30K recipe end to end on a tiny slice of the mirror, and its stage skipping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "data.max_train_pairs=300",
    "data.max_valid_pairs=40",
    "data.vocab_size=400",
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "training.max_steps=6",
    "training.val_every_steps=2",
    "training.warmup_steps=2",
    "training.threads=1",
    "training.precision=32",
    "decoding.beam_size=2",
    "decoding.max_len_b=5",
    "training.tune_len_penalty=[0.6,1.4]",
]


def run_recipe(out: Path, mirror: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, SEQ2SEQ_MIRROR=str(mirror), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [
            sys.executable,
            "recipes/multi30k.py",
            "--config",
            "configs/multi30k_quick.yaml",
            "--pair",
            "en-de",
            "--out",
            str(out),
            *TINY,
        ],  # fmt: skip
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_recipe_end_to_end_then_skips_finished_stages(tmp_path, mirror):
    out = tmp_path / "run"
    first = run_recipe(out, mirror)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    for artifact in (
        "corpus/train.en", "corpus/test_2016_flickr.de",
        "model/manifest.json", "model/model.safetensors", "model/spm.model",
        "averaged/manifest.json", "eval/test_2016_flickr.en.json", "eval/test_2016_flickr.en.hyp",
        "eval/test_2016_flickr.en.moses-lc.json", "export/ctranslate2/model.bin", "results.tsv",
    ):  # fmt: skip
        assert (out / artifact).exists(), artifact
    lines = (out / "results.tsv").read_text().splitlines()
    assert len(lines) == 2  # the raw-text model: cased detokenized, then Moses-tokenized lc
    for line, suffix, scoring in zip(lines, ["", ".moses-lc"], ["detok", "moses-lc"]):
        scores = json.loads((out / f"eval/test_2016_flickr.en{suffix}.json").read_text())["scores"]
        fields = line.split("\t")
        assert fields[:4] == ["multi30k", "en-de", "test_2016_flickr", "multi30k_quick"]
        assert fields[4] == f"BLEU {scores['bleu']:.2f}"
        assert fields[7:] == [scores["bleu_signature"], scoring]
    assert "case:mixed" in lines[0] and "case:lc|eff:no|tok:none" in lines[1]
    assert "BLEU" in first.stdout and "example translations" in first.stdout
    # the length penalty chosen on the validation set is the averaged model's, and the best
    choice = json.loads((out / "tune/choice.json").read_text())
    tried = {
        lp: json.loads((out / f"tune/lp{lp}/en-de/val.en.json").read_text())["scores"]["bleu"]
        for lp in ("0.6", "1.4")
    }
    assert choice["validation_bleu"] == pytest.approx(tried)
    assert choice["len_penalty"] == float(max(tried, key=tried.__getitem__))
    averaged_cfg = (out / "averaged/config.yaml").read_text()
    assert f"len_penalty: {choice['len_penalty']}" in averaged_cfg
    assert "$ seq2seq average" in first.stdout and "decoding.len_penalty=" in first.stdout
    hyps = (out / "eval/test_2016_flickr.en.hyp").read_text().split("\n")
    assert len(hyps) == 1000 + 1  # one line per test sentence, newline-terminated

    mtime = (out / "model/model.safetensors").stat().st_mtime_ns
    second = run_recipe(out, mirror)
    assert second.returncode == 0, second.stderr[-3000:]
    for stage in ("[train]", "[average]", "[tune]", "[export]"):
        assert f"{stage} " in second.stdout and "skipping" in second.stdout
    assert "$ seq2seq train" not in second.stdout and "$ seq2seq evaluate" not in second.stdout
    assert (out / "model/model.safetensors").stat().st_mtime_ns == mtime
    assert (out / "results.tsv").read_text().splitlines() == lines


def run_script(script: str, *args: str, mirror: Path | None = None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("SEQ2SEQ_MIRROR", None)
    if mirror is not None:
        env["SEQ2SEQ_MIRROR"] = str(mirror)
    return subprocess.run(
        [sys.executable, f"recipes/{script}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("script", "config"),
    [
        ("multi30k.py", "configs/multi30k_quick.yaml"),
        ("iwslt14.py", "configs/iwslt14_de_en.yaml"),
        ("wmt14.py", "configs/wmt14_en_de_base.yaml"),
        ("wmt16.py", "configs/wmt16_en_ro.yaml"),
        ("own_files.py", "configs/own_files.yaml"),
    ],
)
def test_every_recipe_has_help_and_its_default_config(script: str, config: str) -> None:
    done = run_script(script, "--help")
    assert done.returncode == 0, done.stderr
    assert f"(default: {config})" in " ".join(done.stdout.split())


def test_recipe_refuses_another_corpus_config(tmp_path) -> None:
    done = run_script(
        "iwslt14.py", "--config", "configs/multi30k_quick.yaml", "--out", str(tmp_path / "r")
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "iwslt14 recipe: error: configs/multi30k_quick.yaml trains on multi30k, not iwslt14; "
        "use recipes/multi30k.py"
    )
    assert not (tmp_path / "r").exists()


def test_recipe_offline_without_the_files_says_what_is_missing(tmp_path) -> None:
    empty = tmp_path / "mirror"
    empty.mkdir()
    done = run_script("wmt14.py", "--out", str(tmp_path / "r"), mirror=empty)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("wmt14 recipe: error: wmt14: ")
    assert "not in the mirror" in line and str(empty) in line
    assert "Traceback" not in done.stderr


def test_examples_match_the_text_the_model_was_trained_on() -> None:
    from seq2seq.cli.recipe import example_sentences

    raw = example_sentences("en", tokenized_lc=False)
    assert raw[0] == "A man in a blue shirt is riding a bicycle."
    assert example_sentences("en", tokenized_lc=True) == [
        "a man in a blue shirt is riding a bicycle .",
        "two dogs are playing in the snow .",
    ]
    assert example_sentences("de", tokenized_lc=True)[1] == "zwei hunde spielen im schnee ."

"""Stale state is never reused silently: a failed first run's SentencePiece model with other
options, a resumed run's rewritten config (the model directory stays loadable), and the
one-line errors of SentencePiece training (no sentences left, bad UTF-8)."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest
from factories import make_model_dir

from seq2seq.config.loading import load_config
from seq2seq.core.errors import UserError
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.model.directory import load_model_dir
from seq2seq.train.trainer import _write_config

WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()


def _corpus(directory: Path) -> Path:
    rng = random.Random(0)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 200), ("valid", 20)):
        text = "".join(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) + "\n" for _ in range(n)
        )
        (directory / f"{split}.src").write_text(text, encoding="utf-8")
        (directory / f"{split}.tgt").write_text(text, encoding="utf-8")
    return directory


def _cfg(data: Path, *overrides: str):
    return load_config(
        None,
        [
            "data.corpus=files",
            "data.pair=src-tgt",
            f"data.train_prefix={data}/train",
            f"data.valid_prefix={data}/valid",
            "data.vocab_size=30",
            *overrides,
        ],
    )


def test_a_failed_first_run_leaves_a_spm_model_that_other_options_refuse(tmp_path):
    data = _corpus(tmp_path / "data")
    run = tmp_path / "run"
    # the first run fails after SentencePiece: every pair is too long for data.max_len=1
    with pytest.raises(UserError, match="no sentence pairs left"):
        TranslationDataModule(_cfg(data, "data.max_len=1"), run).prepare_data()
    assert (run / "spm.model").is_file()
    # a rerun with another vocabulary or model type never reuses it silently
    for override, named in (
        ("data.vocab_size=35", "vocab_size 30 (the config says 35)"),
        ("data.spm_type=unigram", "model_type bpe (the config says unigram)"),
    ):
        with pytest.raises(UserError, match=re.escape(named)):
            TranslationDataModule(_cfg(data, override), run).prepare_data()
    # the same options reuse it
    TranslationDataModule(_cfg(data), run).prepare_data()


def test_resume_rewrites_config_and_manifest_together(tmp_path):
    model = make_model_dir(tmp_path / "model")
    cfg = load_model_dir(model).cfg
    resumed = dataclasses.replace(
        cfg, training=dataclasses.replace(cfg.training, max_steps=cfg.training.max_steps + 1000)
    )
    _write_config(model, resumed)  # what `train --resume DIR training.max_steps=...` does first
    assert load_model_dir(model).cfg == resumed  # still loadable, and it says the new limit


def test_no_training_sentences_is_one_line_naming_the_files(tmp_path):
    src, tgt = tmp_path / "t.src", tmp_path / "t.tgt"
    src.write_text("\n  \n", encoding="utf-8")
    tgt.write_text("\n\t\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        train_tokenizer(src, tgt, tmp_path / "tok", vocab_size=30)
    assert str(e.value) == (
        f"no training sentences left in {src}, {tgt} (after filtering: blank lines dropped); "
        "SentencePiece needs some text"
    )


def test_no_training_sentences_within_max_train_pairs(tmp_path):
    data = _corpus(tmp_path / "data")
    for side in ("src", "tgt"):  # blank first pairs, text after them
        (data / f"train.{side}").write_text("\n" * 5 + "alpha beta\n" * 50, encoding="utf-8")
    with pytest.raises(UserError) as e:
        TranslationDataModule(_cfg(data, "data.max_train_pairs=5"), tmp_path / "run").prepare_data()
    assert str(e.value).endswith(
        "no sentence pairs for the train split: its first 5 lines (data.max_train_pairs) are all "
        "blank or have an empty side"
    )


def test_bad_utf8_in_sentencepiece_training_is_one_line(tmp_path):
    src, tgt = tmp_path / "t.src", tmp_path / "t.tgt"
    src.write_bytes(b"alpha beta\n" * 20 + b"\xff\xfe gamma\n")
    tgt.write_bytes(b"alpha beta\n" * 21)
    with pytest.raises(UserError) as e:
        train_tokenizer(src, tgt, tmp_path / "tok", vocab_size=30)
    assert str(e.value) == f"{src}:21: invalid UTF-8 (byte 1 of the line)"
    assert not (tmp_path / "tok" / "spm.model").exists()

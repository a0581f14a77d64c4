"""Training on your own files: tab-separated pair files, line-aligned prefixes, the SentencePiece
model a run reuses (only when it is the one asked for), and recipes/own_files.py end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.config.loading import load_config
from seq2seq.config.schema import ExperimentConfig
from seq2seq.core.errors import UserError
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.parallel import count_lines, split_tsv
from seq2seq.data.tokenizer import Tokenizer, trained_options

REPO = Path(__file__).resolve().parents[1]
WORDS_EN = "the a man woman dog cat runs walks red blue small big house street".split()
WORDS_DE = "der die ein mann frau hund katze läuft geht rot blau klein groß haus".split()


def _pairs(n: int, offset: int = 0) -> list[tuple[str, str]]:
    out = []
    for i in range(offset, offset + n):
        k = 2 + i % 6
        out.append(
            (" ".join(WORDS_EN[(i + j) % 14] for j in range(k)) + f" {i}",
             " ".join(WORDS_DE[(i + j) % 14] for j in range(k)) + f" {i}")
        )  # fmt: skip
    return out


def _tsv(path: Path, pairs, extra: bool = False) -> Path:
    rows = [f"{i}\t{a}\t{i}\t{b}" if extra else f"{a}\t{b}" for i, (a, b) in enumerate(pairs)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _prefix(prefix: Path, pairs) -> Path:
    Path(f"{prefix}.en").write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    Path(f"{prefix}.de").write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return prefix


def test_split_tsv_columns_blank_lines_and_errors(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_bytes(b"1\tHallo Welt\t2\tHello world\r\n\n3\tZwei\t4\tTwo\n")
    n = split_tsv(path, tmp_path / "a.de", tmp_path / "a.en", columns=(1, 3))
    assert n == 3
    assert (tmp_path / "a.de").read_text() == "Hallo Welt\n\nZwei\n"  # \r dropped, blank kept
    assert (tmp_path / "a.en").read_text() == "Hello world\n\nTwo\n"
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nonly one field\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.tsv:2: expected at least 2 tab-separated fields"):
        split_tsv(bad, tmp_path / "b.en", tmp_path / "b.de")
    assert not (tmp_path / "b.en").exists() and not (tmp_path / "b.de").exists()


def _cfg(tmp_path: Path, **data) -> ExperimentConfig:
    cfg = load_config(REPO / "configs" / "own_files.yaml")
    base = {"vocab_size": 60, "max_tokens": 200, **data}
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **base))


def test_datamodule_reads_tsv_and_prefix_files(tmp_path):
    train = _tsv(tmp_path / "train.tsv", _pairs(200) + _pairs(5))  # 5 exact duplicates
    valid = _prefix(tmp_path / "valid", _pairs(20, 300))
    cfg = _cfg(tmp_path, train_prefix=str(train), valid_prefix=str(valid))
    dm = TranslationDataModule(cfg, tmp_path / "run")
    dm.prepare_data()
    dm.setup("fit")
    assert dm.split_files("train") == (
        tmp_path / "run/data/text/train.en",
        tmp_path / "run/data/text/train.de",
    )
    assert count_lines(tmp_path / "run/data/text/train.de") == 205
    assert len(dm.train_store) == 200  # own_files.yaml: data.dedup pairs
    assert dm.train_store.header["stats"]["duplicate"] == 5
    assert dm.valid_ref_text[0] == _pairs(1, 300)[0][1]
    assert len(dm.valid_store) == 20


def test_an_spm_model_in_out_is_reused_only_if_it_matches(tmp_path):
    train = _prefix(tmp_path / "train", _pairs(300))
    valid = _prefix(tmp_path / "valid", _pairs(20, 300))
    cfg = _cfg(tmp_path, train_prefix=str(train), valid_prefix=str(valid))
    run = tmp_path / "run"
    TranslationDataModule(cfg, run).prepare_data()  # e.g. a first train --out run that failed
    assert trained_options(run / "spm.model")["vocab_size"] == 60
    before = (run / "spm.model").read_bytes()
    TranslationDataModule(cfg, run).prepare_data()  # the same settings: reused
    assert (run / "spm.model").read_bytes() == before
    other = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, vocab_size=50))
    with pytest.raises(UserError, match=r"spm\.model already exists and was trained with "
                       r"vocab_size 60 \(the config says 50\).*data\.spm_model"):  # fmt: skip
        TranslationDataModule(other, run).prepare_data()
    unigram = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, spm_type="unigram"))
    with pytest.raises(UserError, match=r"model_type bpe \(the config says unigram\)"):
        TranslationDataModule(unigram, run).prepare_data()
    # reusing a model on purpose: copied into a new run, whatever vocab_size says
    reuse = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, vocab_size=50, spm_model=str(run / "spm.model"))
    )
    TranslationDataModule(reuse, tmp_path / "run2").prepare_data()
    assert (tmp_path / "run2" / "spm.model").read_bytes() == before
    assert Tokenizer.load(tmp_path / "run2").src_vocab_size <= 60
    # ... but not over another model
    (tmp_path / "run3").mkdir()
    (tmp_path / "run3" / "spm.model").write_bytes((tmp_path / "run2" / "spm.model").read_bytes())
    TranslationDataModule(other, tmp_path / "run4").prepare_data()
    mine = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, spm_model=str(tmp_path / "run4" / "spm.model"))
    )
    with pytest.raises(UserError, match="is not the SentencePiece model data.spm_model names"):
        TranslationDataModule(mine, tmp_path / "run3").prepare_data()


TINY = [
    "data.vocab_size=120",
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "training.max_steps=4",
    "training.val_every_steps=2",
    "training.warmup_steps=2",
    "training.threads=1",
    "decoding.beam_size=2",
    "decoding.max_len_b=5",
]


@pytest.mark.slow
def test_own_files_recipe_end_to_end(tmp_path):
    """SentencePiece, train, average, test (a TSV and a prefix), export, on the user's files."""
    train = _tsv(tmp_path / "train.tsv", _pairs(300), extra=True)
    valid = _prefix(tmp_path / "valid", _pairs(30, 400))
    test_a = _tsv(tmp_path / "test.tsv", _pairs(25, 500), extra=True)
    test_b = _prefix(tmp_path / "news", _pairs(15, 600))
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "recipes/own_files.py", "--pair", "en-de", "--train", str(train),
         "--valid", str(valid), "--test", str(test_a), "--test", str(test_b), "--out", str(out),
         "data.tsv_columns=[1,3]", *TINY],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for artifact in (
        "model/spm.model", "model/manifest.json", "averaged/manifest.json",
        "export/ctranslate2/model.bin", "eval/test.tsv.en.json", "eval/news.en.json",
        "eval/news.en.moses-lc.json", "results.tsv",
    ):  # fmt: skip
        assert (out / artifact).exists(), artifact
    lines = (out / "results.tsv").read_text().splitlines()
    assert [line.split("\t")[2] for line in lines] == ["test.tsv", "test.tsv", "news", "news"]
    assert all(line.startswith("files\ten-de\t") for line in lines)
    scores = json.loads((out / "eval/news.en.json").read_text())["scores"]
    assert lines[2].split("\t")[4] == f"BLEU {scores['bleu']:.2f}"
    hyps = (out / "eval/test.tsv.en.hyp").read_text().split("\n")
    assert len(hyps) == 25 + 1
    cfg = load_config(out / "model" / "config.yaml")
    assert cfg.data.corpus == "files" and cfg.data.train_prefix == str(train)
    # a missing file is one clear line, exit 2
    bad = subprocess.run(
        [sys.executable, "recipes/own_files.py", "--pair", "en-de", "--train", str(tmp_path / "nope"),
         "--valid", str(valid), "--out", str(tmp_path / "bad"), *TINY],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "data.train_prefix file" in bad.stderr and "nope.en not found" in bad.stderr
    assert "Traceback" not in bad.stderr

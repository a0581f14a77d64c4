"""TranslationDataModule: prepare_data + setup on the Multi30K mirror and on plain files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from seq2seq.config.schema import DataConfig, ExperimentConfig
from seq2seq.core.errors import UserError
from seq2seq.data.batching import Batch
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

MAX_TOKENS = 600


def _cfg(**data) -> ExperimentConfig:
    base = {
        "max_train_pairs": 300,
        "max_valid_pairs": 100,
        "vocab_size": 400,
        "max_tokens": MAX_TOKENS,
    }
    return ExperimentConfig(data=DataConfig(**{**base, **data}))


def _check_batch(batch: Batch, max_tokens: int) -> None:
    assert isinstance(batch, Batch)
    B, S = batch.src_ids.shape
    assert batch.tgt_ids.shape[0] == batch.index.shape[0] == B
    assert B * max(S, batch.tgt_ids.shape[1]) <= max_tokens
    specials = torch.tensor([PAD_ID, BOS_ID, EOS_ID])  # UNK may occur in the text
    for src, tgt in zip(batch.src_ids, batch.tgt_ids):
        src, tgt = src[src != PAD_ID], tgt[tgt != PAD_ID]
        assert src[-1] == EOS_ID and not torch.isin(src[:-1], specials).any()
        assert tgt[0] == BOS_ID and tgt[-1] == EOS_ID
        assert not torch.isin(tgt[1:-1], specials).any()
    # padding only at the end of each row
    src_pad = batch.src_ids == PAD_ID
    assert (src_pad.int().diff(dim=1) >= 0).all()
    assert batch.n_tgt_tokens == int((batch.tgt_ids[:, 1:] != PAD_ID).sum())


@pytest.fixture(scope="module")
def prepared(mirror, tmp_path_factory):
    root = tmp_path_factory.mktemp("dm")
    dm = TranslationDataModule(_cfg(), root / "run", mirror=mirror, cache_dir=root / "cache")
    dm.prepare_data()
    dm.setup("fit")
    return dm, root


def test_prepare_data_makes_tokenizer_and_stores(prepared, mirror):
    dm, root = prepared
    run = root / "run"
    assert (run / "spm.model").is_file()
    assert (run / "data" / "train" / "header.json").is_file()
    assert (run / "data" / "valid" / "header.json").is_file()
    assert not (root / "cache").exists()  # the mirror was used in place
    assert 250 <= len(dm.train_store) <= 300
    assert len(dm.valid_store) == len(dm.valid_src_text) == len(dm.valid_ref_text) == 100
    raw_val_de = (run / "data" / "text" / "val.de").read_text(encoding="utf-8").split("\n")
    assert dm.valid_ref_text == [line.strip() for line in raw_val_de[:100]]
    assert dm.tokenizer.joint and dm.tokenizer.src_vocab_size <= 400
    # SentencePiece was trained on the first 300 training pairs only: training it directly on
    # them gives the very same model
    lines = {
        lang: (run / "data" / "text" / f"train.{lang}")
        .read_text(encoding="utf-8")
        .split("\n")[:300]
        for lang in ("en", "de")
    }
    for lang, text in lines.items():
        (root / f"first300.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    direct = train_tokenizer(
        root / "first300.en", root / "first300.de", root / "direct", vocab_size=400, seed=1
    )
    assert direct.fingerprint() == dm.tokenizer.fingerprint()


def test_train_batches_have_the_right_shapes_and_specials(prepared):
    dm, _ = prepared
    seen = []
    for batch in dm.train_dataloader():
        _check_batch(batch, MAX_TOKENS)
        seen.extend(batch.index.tolist())
        for row, i in zip(batch.tgt_ids, batch.index.tolist()):
            _, _, tgt_pieces = dm.train_store[i]
            assert row[row != PAD_ID].tolist() == [BOS_ID, *tgt_pieces.tolist(), EOS_ID]
    assert sorted(seen) == list(range(len(dm.train_store)))


def test_validation_batches_map_back_to_the_references(prepared):
    dm, _ = prepared
    seen = []
    widths = []
    for batch in dm.val_dataloader():
        _check_batch(batch, MAX_TOKENS)
        widths.append(batch.tgt_ids.shape[1])
        for src_row, tgt_row, i in zip(batch.src_ids, batch.tgt_ids, batch.index.tolist()):
            seen.append(i)
            want_src = dm.tokenizer.encode_src([dm.valid_src_text[i]])[0]
            want_tgt = dm.tokenizer.encode_tgt([dm.valid_ref_text[i]])[0]
            assert src_row[src_row != PAD_ID].tolist() == [*want_src, EOS_ID]
            assert tgt_row[tgt_row != PAD_ID].tolist() == [BOS_ID, *want_tgt, EOS_ID]
    assert sorted(seen) == list(range(100))
    assert [b.index.tolist() for b in dm.val_dataloader()] == [
        b.index.tolist() for b in dm.val_dataloader()
    ]  # same order every time


def test_prepare_again_reuses_and_rebuilds_only_what_changed(prepared, mirror):
    dm, root = prepared
    run = root / "run"
    stamps = {
        p: p.stat().st_mtime_ns
        for p in (run / "spm.model", run / "data/train/header.json", run / "data/valid/header.json")
    }
    again = TranslationDataModule(_cfg(), run, mirror=mirror, cache_dir=root / "cache")
    again.prepare_data()
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    smaller = TranslationDataModule(
        _cfg(max_train_pairs=200), root / "run2", mirror=mirror, cache_dir=root / "cache"
    )
    smaller.prepare_data()
    smaller.setup("fit")
    assert len(smaller.train_store) <= 200


def test_lightning_reshuffles_every_epoch(prepared):
    dm, _ = prepared

    class Recorder(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.seen: dict[int, list[list[int]]] = {}

        def training_step(self, batch, batch_idx):
            assert isinstance(batch, Batch)
            self.seen.setdefault(self.current_epoch, []).append(batch.index.tolist())
            return self.w.sum() * 0.0 + self.w.square().sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Recorder()
    trainer = pl.Trainer(
        max_epochs=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,  # the sampler shards by itself
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(model, datamodule=dm)
    assert set(model.seen) == {0, 1}
    for epoch in (0, 1):
        assert model.seen[epoch] == [b.tolist() for b in dm.train_sampler.batches(epoch)]
    assert model.seen[0] != model.seen[1]


def test_plain_files_and_separate_vocabularies(tmp_path):
    rows = [(f"the dog number {i} runs", f"der hund nummer {i} rennt") for i in range(60)]
    rows[5] = ("", "leer")
    for name, part in (("tr", rows[:50]), ("va", rows[50:])):
        (tmp_path / f"{name}.en").write_text("\n".join(s for s, _ in part) + "\n", encoding="utf-8")
        (tmp_path / f"{name}.de").write_bytes(("\r\n".join(t for _, t in part) + "\r\n").encode())
    cfg = _cfg(
        corpus="files",
        train_prefix=str(tmp_path / "tr"),
        valid_prefix=str(tmp_path / "va"),
        joint_vocab=False,
        vocab_size=40,
        spm_type="unigram",
        max_train_pairs=0,
        max_valid_pairs=0,
    )
    dm = TranslationDataModule(cfg, tmp_path / "run")
    dm.prepare_data()
    dm.setup("fit")
    assert (tmp_path / "run" / "spm.src.model").is_file()
    assert (tmp_path / "run" / "spm.tgt.model").is_file()
    assert not dm.tokenizer.joint
    assert len(dm.train_store) == 49  # the empty pair is dropped
    assert dm.valid_ref_text == [t for _, t in rows[50:]]
    te = tmp_path / "te"
    with pytest.raises(UserError, match=r"file not found: .*te\.en"):
        dm.test_files(str(te))  # with corpus: files a test split is a file prefix
    Path(f"{te}.en").write_text("x\n")
    Path(f"{te}.de").write_text("y\n")
    assert dm.test_files(str(te)) == (Path(f"{te}.en"), Path(f"{te}.de"))
    for batch in dm.train_dataloader():
        _check_batch(batch, MAX_TOKENS)


def test_mistakes_are_user_errors(tmp_path, mirror):
    cfg = _cfg(
        corpus="files", train_prefix=str(tmp_path / "nope"), valid_prefix=str(tmp_path / "nope")
    )
    with pytest.raises(UserError, match=r"train file not found: .*nope\.en"):
        TranslationDataModule(cfg, tmp_path / "run").prepare_data()
    with pytest.raises(UserError, match="data.valid_prefix must be set"):
        TranslationDataModule(
            dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, valid_prefix=None)),
            tmp_path / "run",
        ).split_files("val")
    with pytest.raises(UserError, match="language pair"):
        TranslationDataModule(_cfg(pair="ende"), tmp_path / "run")
    with pytest.raises(UserError, match="test_2018_flickr.*not available"):
        TranslationDataModule(
            _cfg(valid_split="test_2018_flickr"), tmp_path / "run", mirror=mirror
        ).prepare_data()
    with pytest.raises(UserError, match="no SentencePiece model|not found"):
        TranslationDataModule(_cfg(), tmp_path / "empty").setup("fit")

"""Every experiment in configs/ loads, builds its model and takes one training step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq.config.loading import load_config
from seq2seq.config.schema import _MAX_TIME_RE
from seq2seq.train.module import TranslationModule

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_the_documented_configs_exist():
    names = {p.stem for p in CONFIGS}
    for name in ("multi30k_quick", "multi30k_tiny", "multi30k_base", "iwslt14_de_en",
                 "wmt14_en_de_base", "wmt14_en_de_big", "wmt16_en_ro", "own_files"):  # fmt: skip
        assert name in names


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_builds_and_trains_one_step(path):
    cfg = load_config(path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#") and "--config configs/" in text, "header must give the command"
    vocab = cfg.data.vocab_size
    torch.manual_seed(0)
    module = TranslationModule(cfg=cfg, src_vocab_size=vocab, tgt_vocab_size=vocab)
    model = module.model
    assert model.d_model == cfg.model.d_model
    assert len(model.encoder.layers) == cfg.model.n_encoder_layers
    assert len(model.decoder.layers) == cfg.model.n_decoder_layers
    if cfg.model.share_embeddings:
        assert model.encoder.embedding is model.decoder.embedding
    if cfg.model.tie_output:
        assert model.output_proj.weight is model.decoder.embedding.weight
    # One real optimizer step on a two-sentence batch: the loss is finite and the weights move.
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 3, 0, 0]])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = model.decoder.layers[0].ff.linear1.weight.detach().clone()
    out = module.compute_loss(src, tgt)
    assert out.n_tokens == 6 and torch.isfinite(out.loss)
    (out.loss / out.n_tokens).backward()
    optimizer.step()
    assert not torch.equal(before, model.decoder.layers[0].ff.linear1.weight)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_names_registered_corpus_pair_variant_and_splits(path):
    from seq2seq.data.registry import get_corpus, parse_pair

    cfg = load_config(path)
    if cfg.data.corpus == "files":  # the user's own files: prefixes are given at run time
        parse_pair(cfg.data.pair)
        return
    corpus = get_corpus(cfg.data.corpus)
    for lang in parse_pair(cfg.data.pair):
        assert lang in corpus.languages
    assert cfg.data.variant in corpus.variants
    for split in (cfg.data.train_split, cfg.data.valid_split, *cfg.data.test_splits):
        assert split in corpus.splits, split


PACED = [p for p in CONFIGS if "expected_step_s" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("path", PACED, ids=[p.stem for p in PACED])
def test_a_stated_pace_fits_the_configs_own_time_guard(path):
    """A config that states its pace and a max_time guard expects all its updates inside it."""
    t = load_config(path).training
    assert t.expected_step_s > 0
    if t.max_time:
        days, hours, minutes, seconds = map(int, _MAX_TIME_RE.fullmatch(t.max_time).groups())
        guard = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
        assert t.expected_step_s * t.max_steps <= guard

"""Gradient accumulation is normalized as in fairseq: by the tokens of the whole update."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from seq2seq.config import load_config
from seq2seq.data import Batch, collate
from seq2seq.system import TranslationModule

TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=2",
    "model.dropout=0.0",
    "training.label_smoothing=0.1",
    "training.warmup_steps=1",
]
VOCAB = 60


def _pairs(lens: list[tuple[int, int]], seed: int) -> list[tuple[int, list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (
            i,
            torch.randint(4, VOCAB, (s,), generator=g).tolist(),
            torch.randint(4, VOCAB, (t,), generator=g).tolist(),
        )
        for i, (s, t) in enumerate(lens)
    ]


class _Capture(TranslationModule):
    """Keeps a copy of the gradients the optimizer would apply (after normalization)."""

    grads: dict[str, torch.Tensor]

    def on_before_optimizer_step(self, optimizer) -> None:
        super().on_before_optimizer_step(optimizer)
        self.grads = {n: p.grad.clone() for n, p in self.model.named_parameters()}


def _update_grads(batches: list[Batch], accumulate: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(3)  # the same initial weights in every run
    cfg = load_config(None, [*TINY, f"training.accumulate={accumulate}"])
    module = _Capture(cfg=cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    trainer = pl.Trainer(
        max_steps=1,
        accelerator="cpu",
        devices=1,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    return module.grads


def test_accumulating_two_batches_equals_one_update_over_both():
    a_items = _pairs([(7, 9), (3, 12), (5, 6)], seed=1)  # 30 target tokens (pieces + EOS)
    b_items = _pairs([(4, 2)], seed=2)  # 3 target tokens: very unequal micro-batches
    a, b, both = collate(a_items), collate(b_items), collate(a_items + b_items)
    assert (a.n_tgt_tokens, b.n_tgt_tokens, both.n_tgt_tokens) == (30, 3, 33)

    accumulated = _update_grads([a, b], accumulate=2)
    one = _update_grads([both], accumulate=1)
    for name, grad in one.items():
        torch.testing.assert_close(accumulated[name], grad, rtol=1e-4, atol=1e-6, msg=name)

    # The per-micro-batch normalization (the mean of A's and B's mean gradients) differs: the
    # test above could fail.
    ga, gb = _update_grads([a], accumulate=1), _update_grads([b], accumulate=1)
    name = "output_proj.weight" if "output_proj.weight" in one else next(iter(one))
    mean_of_means = (ga[name] + gb[name]) / 2
    assert not torch.allclose(mean_of_means, one[name], rtol=1e-2, atol=1e-4)
    weighted = (30 * ga[name] + 3 * gb[name]) / 33
    torch.testing.assert_close(weighted, one[name], rtol=1e-4, atol=1e-6)

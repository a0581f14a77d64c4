"""Gradient accumulation is normalized as in fairseq: by the tokens of the whole update."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from seq2seq.config.loading import load_config
from seq2seq.data.batching import Batch, collate
from seq2seq.train.module import TranslationModule

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


# Two DDP ranks (gloo, CPU), each accumulating two micro-batches of unequal sizes: the update's
# gradient is that of one batch holding all four.
DDP_RUNNER = textwrap.dedent(
    """
    import sys
    import pytorch_lightning as pl
    import torch
    sys.path.insert(0, sys.argv[2])  # tests/: this file's helpers
    from test_accumulation import TINY, VOCAB, _Capture, micro_batches
    from seq2seq.config.loading import load_config

    class PerRank(_Capture):
        def train_dataloader(self):
            batches = micro_batches()[2 * self.trainer.global_rank :][:2]
            return torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)

    torch.manual_seed(3)
    cfg = load_config(None, [*TINY, "training.accumulate=2"])
    module = PerRank(cfg=cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    trainer = pl.Trainer(
        max_steps=1, accelerator="cpu", devices=2, strategy="ddp", accumulate_grad_batches=2,
        use_distributed_sampler=False,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
    )
    trainer.fit(module)
    torch.save(module.grads, f"{sys.argv[1]}.rank{trainer.global_rank}")
    """
)


def micro_batches() -> list[Batch]:
    """Four micro-batches of 30, 3, 11 and 20 target tokens (ranks 0 and 1 take two each)."""
    sizes = [[(7, 9), (3, 12), (5, 6)], [(4, 2)], [(6, 10)], [(2, 4), (9, 14)]]
    return [collate(_pairs(lens, seed=10 + i)) for i, lens in enumerate(sizes)]


@pytest.mark.slow
def test_ddp_ranks_and_micro_batches_weigh_by_their_tokens(tmp_path):
    script = tmp_path / "ddp_accumulate.py"
    script.write_text(DDP_RUNNER, encoding="utf-8")
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=str(tests.parent))
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "grads"), str(tests)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    batches = micro_batches()
    assert [b.n_tgt_tokens for b in batches] == [30, 3, 11, 20]
    items = []
    for b in batches:  # one batch holding every sentence of the four
        for i in range(len(b)):
            src = b.src_ids[i][b.src_ids[i].ne(0)].tolist()[:-1]  # pieces, without EOS
            tgt = b.tgt_ids[i][b.tgt_ids[i].ne(0)].tolist()[1:-1]  # without BOS, EOS
            items.append((len(items), src, tgt))
    one = _update_grads([collate(items)], accumulate=1)
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"grads.rank{rank}", weights_only=True)
        for name, grad in one.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)

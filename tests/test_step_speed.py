"""The faster training step computes what the plain one does: fused AdamW, the Tiny benchmark."""

from __future__ import annotations

import copy

import pytest
import torch

from seq2seq.config.loading import load_config
from seq2seq.train.module import TranslationModule

TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=2",
    "model.dropout=0.0",
    "training.weight_decay=0.01",
    "training.warmup_steps=1",
    "training.lr=0.01",
    # The key bias' gradient is zero up to rounding noise (softmax ignores a constant shift),
    # and Adam divides that noise by its own size: with eps 1e-8 the noise of two runs (their
    # weights differ by rounding after a step) moves that bias apart by ~lr. eps 1e-4 damps it.
    "training.eps=1e-4",
]


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 50, (4, 7), generator=g)
    src[:, -1] = 3
    tgt = torch.randint(4, 50, (4, 6), generator=g)
    tgt[:, 0], tgt[:, -1] = 2, 3
    return src, tgt


@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_fused_adamw_takes_the_steps_of_the_per_parameter_loop(precision):
    cfg = load_config(None, [*TINY, f"training.precision={precision}"])
    torch.manual_seed(0)
    fused = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    loop = copy.deepcopy(fused)
    opt = fused.configure_optimizers()["optimizer"]
    assert opt.defaults["fused"] is True
    decay, plain = opt.param_groups
    ref = torch.optim.AdamW(
        [
            {"params": _same(loop, fused, decay["params"]), "weight_decay": 0.01},
            {"params": _same(loop, fused, plain["params"]), "weight_decay": 0.0},
        ],
        lr=0.01,
        betas=(0.9, 0.98),
        eps=1e-4,
        foreach=False,
        fused=False,
    )
    before = {n: p.detach().clone() for n, p in fused.model.named_parameters()}
    for seed in range(3):
        for module, optimizer in ((fused, opt), (loop, ref)):
            out = module.compute_loss(*_batch(seed))
            (out.loss / out.n_tokens).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    for (name, a), b in zip(fused.model.named_parameters(), loop.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
        assert not torch.equal(a, before[name]), name  # every weight moved


def _same(loop: TranslationModule, fused: TranslationModule, params: list) -> list:
    """``loop``'s parameters at the positions ``params`` have in ``fused``."""
    index = {id(p): i for i, p in enumerate(fused.model.parameters())}
    theirs = list(loop.model.parameters())
    return [theirs[index[id(p)]] for p in params]


@pytest.mark.parametrize(
    ("precision", "clip_norm", "fused"),
    [
        ("16-mixed", 0.0, False),  # Lightning must unscale before the gradient hooks
        ("bf16-mixed", 1.0, False),  # Lightning's mixed precision clips only then
        ("auto", 1.0, False),  # auto may become bf16-mixed
        ("bf16-mixed", 0.0, True),
        ("32", 1.0, True),
    ],
)
def test_where_adamw_is_fused(precision, clip_norm, fused):
    cfg = load_config(
        None, [*TINY, f"training.precision={precision}", f"training.clip_norm={clip_norm}"]
    )
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    opt = module.configure_optimizers()["optimizer"]
    assert bool(opt.defaults["fused"]) is fused and bool(opt.defaults["foreach"]) is not fused

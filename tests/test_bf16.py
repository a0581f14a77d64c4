"""bf16 mixed precision: the fused bf16 projection + loss, float32 master weights, the same step."""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

import seq2seq.train.module as system
from seq2seq.config.loading import load_config
from seq2seq.data.batching import collate
from seq2seq.model.loss import label_smoothed_nll, projected_label_smoothed_nll
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


def test_bf16_projected_loss_matches_float32_within_bf16_precision():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(700, 32, generator=g, requires_grad=True)  # two chunks of 512
    weight = (torch.randn(300, 32, generator=g) * 0.3).requires_grad_()
    target = torch.randint(0, 300, (700,), generator=g)

    ref = label_smoothed_nll(hidden @ weight.t(), target, epsilon=0.1, ignore_index=-1)
    ref_h, ref_w = torch.autograd.grad(ref.loss, (hidden, weight))
    out = projected_label_smoothed_nll(
        hidden, weight, target, epsilon=0.1, compute_dtype=torch.bfloat16
    )
    assert out.loss.dtype == torch.float32 and out.n_tokens == 700
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-2, atol=0.0)
    torch.testing.assert_close(out.nll, ref.nll, rtol=1e-2, atol=0.0)
    grad_h, grad_w = torch.autograd.grad(out.loss, (hidden, weight))
    # gradients come back in the inputs' dtypes (float32 master weights) ...
    assert grad_h.dtype == torch.float32 and grad_w.dtype == torch.float32
    # ... and agree to bf16 precision (8 bits of mantissa), relative to their scale
    for got, want in ((grad_h, ref_h), (grad_w, ref_w)):
        err = (got - want).norm() / want.norm()
        assert err < 2e-2, float(err)
    # the general backward (per-token weights) too
    out = projected_label_smoothed_nll(
        hidden, weight, target, epsilon=0.1, compute_dtype=torch.bfloat16
    )
    ref = label_smoothed_nll(hidden @ weight.t(), target, epsilon=0.1, ignore_index=-1)
    got = torch.autograd.grad(out.loss + 0.5 * out.nll, weight)[0]
    want = torch.autograd.grad(ref.loss + 0.5 * ref.nll, weight)[0]
    assert (got - want).norm() / want.norm() < 2e-2


def test_autocast_bf16_takes_the_fused_loss(monkeypatch):
    cfg = load_config(None, TINY)
    torch.manual_seed(0)
    module = TranslationModule(cfg=cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    batch = collate([(0, [5, 6, 7, 8], [9, 10, 11]), (1, [12, 13], [14, 15, 16, 17, 18])])
    ref = module.compute_loss(batch.src_ids, batch.tgt_ids)

    def unfused(*args, **kwargs):
        raise AssertionError("bf16 autocast took the unfused (N, V) logits path")

    monkeypatch.setattr(system, "label_smoothed_nll", unfused)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module.compute_loss(batch.src_ids, batch.tgt_ids)
    assert out.n_tokens == ref.n_tokens == 10
    torch.testing.assert_close(out.loss.float(), ref.loss, rtol=3e-2, atol=0.0)


def _one_update(precision: str, *extra: str) -> tuple[TranslationModule, float]:
    torch.manual_seed(3)
    cfg = load_config(None, [*TINY, f"training.precision={precision}", "training.lr=0.005", *extra])
    module = TranslationModule(cfg=cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    g = torch.Generator().manual_seed(1)
    items = [
        (i, torch.randint(4, VOCAB, (s,), generator=g).tolist(),
         torch.randint(4, VOCAB, (t,), generator=g).tolist())
        for i, (s, t) in enumerate([(7, 9), (3, 12), (5, 6), (8, 8)])
    ]  # fmt: skip
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        devices=1,
        precision=precision,
        gradient_clip_val=cfg.training.clip_norm or None,  # as seq2seq train passes it
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    loader = torch.utils.data.DataLoader([collate(items)] * 2, batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    return module, float(trainer.callback_metrics["train/loss"])


def test_bf16_mixed_updates_float32_master_weights_like_fp32():
    bf16, loss_bf16 = _one_update("bf16-mixed")
    fp32, loss_fp32 = _one_update("32")
    assert abs(loss_bf16 - loss_fp32) < 0.02 * loss_fp32
    opt = bf16.trainer.optimizers[0]
    for p in bf16.model.parameters():
        assert p.dtype == torch.float32  # the weights the optimizer updates stay float32
        for value in opt.state[p].values():
            assert value.dtype == torch.float32
    # The two updates moved the weights the same way, up to bf16 noise: compare the moves.
    torch.manual_seed(3)
    init = TranslationModule(cfg=fp32.cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    moves = [
        torch.cat(
            [(p - p0).flatten() for p, p0 in zip(m.model.parameters(), init.model.parameters())]
        )
        for m in (bf16, fp32)
    ]
    assert moves[1].abs().max() > 1e-3  # the weights moved
    cosine = torch.nn.functional.cosine_similarity(moves[0], moves[1], dim=0)
    assert cosine > 0.95, float(cosine)


def _bf16_casts(module: TranslationModule, src: torch.Tensor) -> tuple[list[str], int]:
    """Validation's greedy search under Lightning's bf16 autocast: output, casts to bf16."""
    from torch.profiler import ProfilerActivity, profile

    shapes = {tuple(p.shape) for p in module.model.parameters() if p.dim() == 2}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):  # as Lightning
            hyps = module.translate_batch(src)
    return hyps, sum(
        1
        for e in prof.events()
        if e.name == "aten::_to_copy" and e.input_shapes and tuple(e.input_shapes[0]) in shapes
    )


def test_validation_search_runs_in_float32_under_autocast():
    from seq2seq.data.tokenizer import EOS_ID

    cfg = load_config(None, [*TINY, "training.val_method=greedy", "decoding.max_len_b=12"])
    torch.manual_seed(0)
    module = TranslationModule(cfg=cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB).eval()

    class Ids:  # translate_batch only needs a decoder of ids here
        def decode_tgt(self, rows):
            return [" ".join(map(str, r)) for r in rows]

    module.tokenizer = Ids()
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 0]])
    hyps, casts = _bf16_casts(module, src)
    assert hyps == module.translate_batch(src)  # the float32 search, token for token
    assert casts == 0  # no weight cast at any step (per-call recasts: ~100 here)


def test_bf16_mixed_with_clipping_trains():
    # Lightning's mixed precision plugin refuses to clip for a fused AdamW: the module must
    # not build one then (seq2seq/train/module.py _adamw).
    module, loss = _one_update("bf16-mixed", "training.clip_norm=1.0")
    assert math.isfinite(loss) and not module.trainer.optimizers[0].defaults["fused"]

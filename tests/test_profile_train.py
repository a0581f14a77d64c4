"""benchmarks/profile_train.py: its buckets and multiply counts, on a tiny model's real updates
under torch.profiler (docs/benchmarks.md, "What a training update is made of")."""

from __future__ import annotations

import benchmark_scripts
import pytest
import torch

from seq2seq.config.loading import load_config
from seq2seq.data import PAD_ID
from seq2seq.model import attention, layers
from seq2seq.train.module import TranslationModule

D, FF, V = 16, 32, 37  # V matches no other dimension of the model or the batch


@pytest.fixture(scope="module")
def profile_train():
    return benchmark_scripts.load("profile_train")


def test_multiply_flops_from_shapes(profile_train):
    flops = profile_train.multiply_flops
    assert flops("aten::mm", [[3, 4], [4, 5]]) == 2 * 3 * 4 * 5
    assert flops("aten::addmm", [[5], [3, 4], [4, 5]]) == 2 * 3 * 4 * 5
    assert flops("aten::addmm_", [[3, 5], [3, 4], [4, 5]]) == 2 * 3 * 4 * 5
    assert flops("aten::bmm", [[2, 3, 4], [2, 4, 5]]) == 2 * 2 * 3 * 4 * 5
    assert flops("aten::add", [[3, 4], [3, 4]]) == 0


@pytest.mark.parametrize("rdrop", [False, True])
def test_buckets_of_real_updates(profile_train, monkeypatch, rdrop: bool):
    cfg = load_config(None, [
        f"model.d_model={D}", "model.n_heads=2", f"model.d_ff={FF}",
        "model.n_encoder_layers=1", "model.n_decoder_layers=1", "model.dropout=0.3",
        f"training.rdrop_alpha={1.0 if rdrop else 0.0}", "training.label_smoothing=0.1",
    ])  # fmt: skip
    torch.manual_seed(0)
    module = TranslationModule(cfg=cfg, src_vocab_size=V, tgt_vocab_size=V).train()
    optimizer = module.configure_optimizers()["optimizer"]
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [8, 9, 3, PAD_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[1, 10, 11, 12, 3], [1, 13, 3, PAD_ID, PAD_ID]])
    n_target = int(tgt[:, 1:].ne(PAD_ID).sum())  # 6 projected positions per pass
    for target, name in ((attention, "attend"), (layers, "dropout")):
        monkeypatch.setattr(target, name, getattr(target, name))  # undone after the test
    profile_train._wrap_scopes(profile_train.SCOPES)

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:  # fmt: skip
        for _ in range(2):
            module.zero_grad(set_to_none=True)
            out = module.compute_loss(src, tgt)
            (out.loss / out.n_tokens).backward()
            with torch.profiler.record_function("## optimizer"):
                optimizer.step()
    seconds, flops = profile_train.breakdown(prof.events(), V, 2)

    passes = 2 if rdrop else 1
    # projection forward, gradient of the hidden states, gradient of the weight: 3 multiplies
    assert flops["vocabulary projection"] == passes * 3 * 2 * n_target * D * V
    # every position (padding too) through the layers; x3 for forward + the two gradients
    enc_tokens, dec_tokens = src.numel(), tgt[:, :-1].numel()
    macs = enc_tokens * (4 * D * D + 2 * D * FF + 2 * D * D) + dec_tokens * (6 * D * D + 2 * D * FF)
    assert flops["linear layers"] == passes * 3 * 2 * macs
    for part in ("loss, the rest", "attention", "dropout", "layer norm", "optimizer"):
        assert seconds[part] > 0, part

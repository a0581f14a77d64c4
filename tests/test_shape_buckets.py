"""Under CPU bf16 autocast: bucketed row counts, the same results, attention in float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import seq2seq.model.attention as attention
from seq2seq.config.loading import load_config
from seq2seq.data.batching import collate
from seq2seq.model.attention import SelfAttention
from seq2seq.model.layers import FeedForward
from seq2seq.model.loss import label_smoothed_nll, projected_label_smoothed_nll
from seq2seq.model.shape_buckets import bucket_rows, bucketed, cpu_bf16
from seq2seq.train.module import TranslationModule


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_bucket_rows_pads_under_a_sixteenth_to_a_few_sizes():
    for rows in range(1, 6000):
        padded = bucket_rows(rows)
        assert padded >= rows and padded % 16 == 0
        assert bucket_rows(padded) == padded  # a bucket size is its own bucket
        if rows >= 256:
            assert padded - rows < rows / 16
    # a demo run's batches (1,500-2,600 tokens) meet few sizes
    assert len({bucket_rows(r) for r in range(1500, 2601)}) <= 16
    assert bucket_rows(0) == 0


def test_bucketed_is_a_plain_call_outside_cpu_bf16_autocast():
    layer = nn.Linear(8, 5)
    x = torch.randn(3, 7, 8)
    seen = []

    def rows_fn(t):
        seen.append(t.shape)
        return layer(t)

    assert not cpu_bf16(x)
    assert torch.equal(bucketed(rows_fn, x), layer(x)) and seen == [x.shape]
    with torch.autocast("cpu", dtype=torch.float16):  # not bf16: untouched
        bucketed(rows_fn, x)
    assert seen[-1] == x.shape


def test_bucketed_rows_give_the_unpadded_outputs_and_gradients():
    torch.manual_seed(0)
    layer = nn.Linear(32, 48)
    x = torch.randn(3, 7, 32, requires_grad=True)  # 21 rows -> 32
    upstream = torch.randn(3, 7, 48)
    seen = []

    def rows_fn(t):
        seen.append(tuple(t.shape))
        return layer(t)

    with bf16_autocast():
        out = bucketed(rows_fn, x)
        ref = layer(x)
    assert seen == [(32, 32)]
    assert out.shape == ref.shape == (3, 7, 48) and out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref)
    got = torch.autograd.grad((out.float() * upstream).sum(), (x, layer.weight, layer.bias))
    want = torch.autograd.grad((ref.float() * upstream).sum(), (x, layer.weight, layer.bias))
    for g, w in zip(got, want):
        assert g.dtype == torch.float32  # master weights' and inputs' own dtype
        assert (g - w).norm() / w.norm() < 1e-2


def test_a_feed_forward_blocks_padding_rows_add_nothing_to_the_gradients():
    # relu(bias) makes the padding rows' hidden units nonzero: their outputs must be dropped
    # and get no gradient, so the weights' gradients are those of the real rows alone
    torch.manual_seed(1)
    ffn = FeedForward(d_model=16, d_ff=40, activation="relu", activation_dropout=0.0)
    with torch.no_grad():
        ffn.linear1.bias.fill_(0.5)
    x = torch.randn(5, 3, 16)  # 15 rows -> 16
    with bf16_autocast():
        out = ffn(x)
        ref = ffn._rows(x)
    torch.testing.assert_close(out, ref)
    params = list(ffn.parameters())
    got = torch.autograd.grad(out.float().square().sum(), params)
    want = torch.autograd.grad(ref.float().square().sum(), params)
    for g, w in zip(got, want):
        assert (g - w).norm() / w.norm() < 1e-2


def test_every_linear_layer_of_a_bf16_training_step_sees_a_bucket_size(monkeypatch):
    cfg = load_config(None, ["model.d_model=32", "model.n_heads=2", "model.d_ff=64",
                             "model.n_encoder_layers=2", "model.n_decoder_layers=2"])  # fmt: skip
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    rows = []
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            layer.register_forward_pre_hook(lambda _, args: rows.append(args[0].shape[:-1]))
    batch = collate([(0, [5, 6, 7, 8, 9], [9, 10, 11]), (1, [12, 13], [14, 15, 16, 17, 18, 19])])
    with bf16_autocast():
        out = module.compute_loss(batch.src_ids, batch.tgt_ids)
    out.loss.backward()
    counts = [s.numel() for s in rows]
    assert len(counts) == 2 * 4 + 2 * 7  # per encoder layer 4 linear layers, per decoder 7
    assert all(len(s) == 1 for s in rows)  # flattened rows
    assert all(bucket_rows(n) == n for n in counts), counts
    assert set(counts) == {16}  # 2 x 6 source and 2 x 7 target positions, padded
    assert module.model.encoder.layers[0].self_attn.qkv_proj.weight.grad is not None


@pytest.mark.parametrize("short_keys", [0, 40])
def test_attention_runs_in_float32_with_autocast_off_under_cpu_bf16(monkeypatch, short_keys):
    """SDPA gets float32 with autocast off; with 9 keys <= SHORT_KEYS the explicit path runs
    instead (on the same float32 inputs: attend casts before it routes)."""
    monkeypatch.setattr(attention, "SHORT_KEYS", short_keys)
    torch.manual_seed(2)
    attn = SelfAttention(d_model=16, n_heads=2)
    x = torch.randn(2, 9, 16)
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", spy)
    with bf16_autocast():
        out, _, _ = attn(x, is_causal=True)
    if short_keys == 0:
        assert seen == [(torch.float32, torch.float32, torch.float32, False)]
    else:
        assert seen == []
    assert out.dtype == torch.bfloat16  # the output projection is bf16 again
    ref, _, _ = attn(x, is_causal=True)
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.02)


def test_the_bf16_loss_drops_its_padding_rows():
    # 513 rows -> 544: 31 zero rows whose (uniform) losses must not be counted
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(513, 24, generator=g, requires_grad=True)
    weight = (torch.randn(200, 24, generator=g) * 0.3).requires_grad_()
    target = torch.randint(0, 200, (513,), generator=g)
    out = projected_label_smoothed_nll(
        hidden, weight, target, epsilon=0.1, compute_dtype=torch.bfloat16
    )
    # the same bf16 products, unpadded: agreement far tighter than 31 rows' share (6%)
    logits = (hidden.bfloat16() @ weight.bfloat16().t()).float()
    ref = label_smoothed_nll(logits, target, epsilon=0.1, ignore_index=-1)
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-3, atol=0.0)
    torch.testing.assert_close(out.nll, ref.nll, rtol=1e-3, atol=0.0)
    grad_h, grad_w = torch.autograd.grad(out.loss + 0.5 * out.nll, (hidden, weight))
    assert grad_h.shape == hidden.shape and grad_w.shape == weight.shape
    ref_h, ref_w = torch.autograd.grad(ref.loss + 0.5 * ref.nll, (hidden, weight))
    for got, want in ((grad_h, ref_h), (grad_w, ref_w)):
        assert (got - want).norm() / want.norm() < 2e-2


def test_each_lever_switches_off_on_its_own(monkeypatch):
    # the benchmark's ablation (train_throughput --impls ours-bf16-rows,...) relies on this
    import seq2seq.model.shape_buckets as shape_buckets

    layer = nn.Linear(8, 4)
    x = torch.randn(21, 8)
    seen = []

    def rows_fn(t):
        seen.append(t.shape[0])
        return layer(t)

    q = torch.randn(1, 2, 3, 4)
    for levers, rows, fp32 in (
        ({"rows"}, 32, False),
        ({"attention"}, 21, True),
        (set(), 21, False),
    ):
        monkeypatch.setattr(shape_buckets, "LEVERS", set(levers))
        with bf16_autocast():
            assert bucketed(rows_fn, x).shape == (21, 4)
            assert shape_buckets.float32_attention(q) is fp32
        assert seen[-1] == rows and shape_buckets.padded_rows(21) == rows

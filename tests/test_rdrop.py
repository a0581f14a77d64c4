"""R-Drop (Liang et al., 2021): the loss equals its definition, computed by hand with torch ops,
and the training module runs two dropout passes only when asked. Token cutoff (SimCut's second
pass): whole token vectors dropped, by hand and as a property, and the module's clean and cut
passes pulled together by the same KL."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.config import ConfigError
from seq2seq.config.loading import load_config
from seq2seq.data import PAD_ID
from seq2seq.model.cutoff import token_cutoff
from seq2seq.model.layers import TokenEmbedding
from seq2seq.model.loss import (
    _ProjectedLoss,
    label_smoothed_nll,
    projected_rdrop_loss,
    rdrop_loss,
)
from seq2seq.train.module import TranslationModule


def _by_hand(logits1, logits2, target, eps, alpha):
    """The paper's eq. 3 summed over the non-pad tokens, halved (rdrop_loss's docstring)."""
    keep = target.ne(PAD_ID)
    a, b, t = logits1[keep], logits2[keep], target[keep]  # (N, V), (N, V), (N,)
    ce1 = F.cross_entropy(a, t, label_smoothing=eps, reduction="sum")
    ce2 = F.cross_entropy(b, t, label_smoothing=eps, reduction="sum")
    lp1, lp2 = F.log_softmax(a, -1), F.log_softmax(b, -1)
    # F.kl_div(input, target) is KL(target || input) with input as log-probabilities
    kl_12 = F.kl_div(lp2, lp1, log_target=True, reduction="sum")  # KL(p1 || p2)
    kl_21 = F.kl_div(lp1, lp2, log_target=True, reduction="sum")  # KL(p2 || p1)
    return (ce1 + ce2 + alpha * 0.5 * (kl_12 + kl_21)) / 2, int(keep.sum())


@pytest.mark.parametrize("alpha", [0.0, 0.7, 5.0])
def test_rdrop_loss_equals_its_definition(alpha):
    gen = torch.Generator().manual_seed(0)
    logits1 = torch.randn(2, 4, 7, generator=gen, dtype=torch.float64)  # (B, T, V)
    logits2 = torch.randn(2, 4, 7, generator=gen, dtype=torch.float64)
    target = torch.tensor([[4, 5, 6, PAD_ID], [3, 4, PAD_ID, PAD_ID]])  # (B, T), some padding
    out = rdrop_loss(logits1, logits2, target, epsilon=0.1, alpha=alpha, ignore_index=PAD_ID)
    want, n = _by_hand(logits1, logits2, target, 0.1, alpha)
    assert out.n_tokens == n == 5
    torch.testing.assert_close(out.loss, want)
    nll1 = label_smoothed_nll(logits1, target, epsilon=0.0, ignore_index=PAD_ID).nll
    nll2 = label_smoothed_nll(logits2, target, epsilon=0.0, ignore_index=PAD_ID).nll
    torch.testing.assert_close(out.nll, (nll1 + nll2) / 2)


def test_rdrop_kl_term_is_zero_for_equal_passes_and_grows_with_alpha():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    other = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    target = torch.tensor([4, 5, 6, 7, 8, PAD_ID])
    same = rdrop_loss(logits, logits, target, epsilon=0.1, alpha=3.0, ignore_index=PAD_ID)
    plain = label_smoothed_nll(logits, target, epsilon=0.1, ignore_index=PAD_ID)
    torch.testing.assert_close(same.loss, plain.loss)
    low = rdrop_loss(logits, other, target, epsilon=0.1, alpha=1.0, ignore_index=PAD_ID)
    high = rdrop_loss(logits, other, target, epsilon=0.1, alpha=2.0, ignore_index=PAD_ID)
    assert float(high.loss) > float(low.loss)


def _module(dropout: float, alpha: float, cutoff: float = 0.0, start: int = 0) -> TranslationModule:
    cfg = load_config(
        None,
        [
            "model.d_model=16",
            "model.n_heads=2",
            "model.d_ff=32",
            "model.n_encoder_layers=1",
            "model.n_decoder_layers=1",
            f"model.dropout={dropout}",
            f"training.rdrop_alpha={alpha}",
            f"training.rdrop_cutoff={cutoff}",
            f"training.rdrop_start={start}",
            "training.label_smoothing=0.1",
        ],
    )
    torch.manual_seed(0)
    return TranslationModule(cfg=cfg, src_vocab_size=20, tgt_vocab_size=20)


def _batch():
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, PAD_ID]])
    tgt = torch.tensor([[2, 10, 11, 3], [2, 12, 3, PAD_ID]])
    return src, tgt


def test_module_rdrop_runs_two_dropout_passes_in_training_only():
    src, tgt = _batch()
    module = _module(dropout=0.3, alpha=1.0)
    plain = _module(dropout=0.3, alpha=0.0)
    plain.model.load_state_dict(module.model.state_dict())
    module.train()
    plain.train()
    torch.manual_seed(5)
    two = module.compute_loss(src, tgt)
    # by hand: the same two dropout passes (same generator state), then rdrop_loss
    torch.manual_seed(5)
    keep = tgt[:, 1:].ne(PAD_ID)
    passes = []
    for _ in range(2):
        memory, src_pad = plain.model.encode(src)
        hidden = plain.model.decode(tgt[:, :-1], memory, src_pad)
        passes.append(plain.model.project(hidden[keep]))
    assert not torch.equal(passes[0], passes[1])  # dropout differs between the passes
    want = rdrop_loss(*passes, tgt[:, 1:][keep], epsilon=0.1, alpha=1.0, ignore_index=PAD_ID)
    torch.testing.assert_close(two.loss, want.loss)
    module.eval()
    plain.eval()
    torch.testing.assert_close(
        module.compute_loss(src, tgt).loss, plain.compute_loss(src, tgt).loss
    )


def test_rdrop_alpha_must_not_be_negative():
    from seq2seq.config import ConfigError

    with pytest.raises(ConfigError, match="rdrop_alpha"):
        load_config(None, ["training.rdrop_alpha=-1"])


def _embedding() -> TokenEmbedding:
    torch.manual_seed(0)
    return TokenEmbedding(vocab_size=50, d_model=4, pad_id=PAD_ID, scale=False)


def test_cutoff_by_hand():
    emb = _embedding()
    ids = torch.tensor([[5, 6, 7, 8, PAD_ID]])
    # the draw torch.rand makes after manual_seed(7), and so which tokens p = 0.5 keeps
    torch.manual_seed(7)
    kept = (torch.rand(1, 5) >= 0.5)[0].tolist()
    assert kept == [True, False, True, True, False]  # seed 7: tokens 5, 7 and 8 survive
    torch.manual_seed(7)
    with token_cutoff(emb, 0.5):
        out = emb(ids)  # (1, 5, 4)
    w = emb.weight.detach()
    want = torch.stack([w[5], torch.zeros(4), w[7], w[8], torch.zeros(4)])
    torch.testing.assert_close(out[0], want)
    # the hook is gone after the block, and p = 0 never touches the module
    torch.testing.assert_close(emb(ids)[0, :4], w[5:9])
    with token_cutoff(emb, 0.0):
        assert not emb._forward_hooks
        torch.testing.assert_close(emb(ids), emb(ids))
    assert not emb._forward_hooks


@settings(max_examples=20, deadline=None)
@given(p=st.floats(0.05, 0.9), seed=st.integers(0, 2**16))
def test_cutoff_drops_whole_tokens_at_rate_p(p, seed):
    emb = _embedding()
    ids = torch.randint(1, 50, (40, 50))  # 2,000 tokens, no padding
    plain = emb(ids)
    torch.manual_seed(seed)
    with token_cutoff(emb, p):
        cut = emb(ids)
    zero = cut.eq(0).all(-1)  # (B, L): token vector entirely dropped
    same = cut.eq(plain).all(-1)
    assert bool((zero | same).all())  # a token is kept whole or dropped whole, never rescaled
    rate = float(zero.float().mean())
    sd = (p * (1 - p) / zero.numel()) ** 0.5
    assert abs(rate - p) < 6 * sd


def test_cutoff_probability_is_checked():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        with token_cutoff(_embedding(), 1.0):
            pass
    with pytest.raises(ConfigError, match="rdrop_cutoff"):
        load_config(None, ["training.rdrop_cutoff=1.0"])


def test_module_second_pass_is_cut_and_pulled_towards_the_clean_one():
    src, tgt = _batch()
    # no dropout: the two passes differ only by the cutoff
    module = _module(dropout=0.0, alpha=1.0, cutoff=0.4)
    module.train()
    torch.manual_seed(7)
    got = module.compute_loss(src, tgt)
    torch.manual_seed(7)
    keep = tgt[:, 1:].ne(PAD_ID)
    passes = []
    for p in (0.0, 0.4):
        with token_cutoff(module.model, p):
            memory, src_pad = module.model.encode(src)
            hidden = module.model.decode(tgt[:, :-1], memory, src_pad)
        passes.append(module.model.project(hidden[keep]))
    assert not torch.equal(passes[0], passes[1])
    want = rdrop_loss(*passes, tgt[:, 1:][keep], epsilon=0.1, alpha=1.0, ignore_index=PAD_ID)
    torch.testing.assert_close(got.loss, want.loss)
    # without cutoff and dropout both passes are the same: the KL term vanishes
    clean = _module(dropout=0.0, alpha=1.0, cutoff=0.0)
    clean.model.load_state_dict(module.model.state_dict())
    clean.train()
    single: TranslationModule = _module(dropout=0.0, alpha=0.0)
    single.model.load_state_dict(module.model.state_dict())
    single.train()
    torch.testing.assert_close(
        clean.compute_loss(src, tgt).loss, single.compute_loss(src, tgt).loss
    )


@pytest.mark.parametrize(("alpha", "eps"), [(0.0, 0.1), (0.5, 0.0), (5.0, 0.1)])
def test_rdrop_gradients_equal_autograd_through_its_definition(alpha, eps):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(3, 5, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 5, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    target = torch.randint(3, 11, (3, 5), generator=gen)
    target[0, 3:] = PAD_ID
    target[2, 1:] = PAD_ID
    out = rdrop_loss(a, b, target, epsilon=eps, alpha=alpha, ignore_index=PAD_ID)
    (0.7 * out.loss + 0.2 * out.nll).backward()  # both outputs carry a gradient
    got = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    want, _ = _by_hand(a, b, target, eps, alpha)
    nll = (
        F.cross_entropy(a[target.ne(PAD_ID)], target[target.ne(PAD_ID)], reduction="sum")
        + F.cross_entropy(b[target.ne(PAD_ID)], target[target.ne(PAD_ID)], reduction="sum")
    ) / 2
    (0.7 * want + 0.2 * nll).backward()
    torch.testing.assert_close(got[0], a.grad)
    torch.testing.assert_close(got[1], b.grad)
    assert got[0][0, 3:].abs().sum() == 0 and got[1][2, 1:].abs().sum() == 0  # padding: none


def test_rdrop_passes_gradcheck():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([3, 4, 5, PAD_ID])

    def loss(x, y):
        return rdrop_loss(x, y, target, epsilon=0.1, alpha=2.0, ignore_index=PAD_ID).loss

    assert torch.autograd.gradcheck(loss, (a, b))


def _projected_case(seed: int, n: int = 21, d: int = 6, v: int = 13):
    gen = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=gen, dtype=torch.float64)
    h2 = h1 + 0.5 * torch.randn(n, d, generator=gen, dtype=torch.float64)  # a second "pass"
    weight = torch.randn(v, d, generator=gen, dtype=torch.float64)
    target = torch.randint(1, v, (n,), generator=gen)
    return h1, h2, weight, target


@pytest.mark.parametrize("chunk_rows", [1, 4, 21, 64])
@pytest.mark.parametrize(("alpha", "eps"), [(0.0, 0.1), (0.5, 0.0), (5.0, 0.1)])
def test_projected_rdrop_equals_the_unfused_loss(chunk_rows, alpha, eps):
    """Values and gradients of the chunked form equal logits -> rdrop_loss under autograd."""
    h1, h2, weight, target = _projected_case(11)
    fused = [x.clone().requires_grad_(True) for x in (h1, h2, weight)]
    plain = [x.clone().requires_grad_(True) for x in (h1, h2, weight)]
    ours = projected_rdrop_loss(*fused, target, epsilon=eps, alpha=alpha, chunk_rows=chunk_rows)
    a, b, w = plain
    ref = rdrop_loss(a @ w.t(), b @ w.t(), target, epsilon=eps, alpha=alpha, ignore_index=PAD_ID)
    torch.testing.assert_close(ours.loss, ref.loss)
    torch.testing.assert_close(ours.nll, ref.nll)
    assert ours.n_tokens == ref.n_tokens == 21
    (ours.loss / 21).backward()  # the training case: the gradient made in the forward
    (ref.loss / 21).backward()
    for got, want in zip(fused, plain):
        torch.testing.assert_close(got.grad, want.grad)


def test_projected_rdrop_general_gradient_passes_gradcheck():
    """Per-token weights and a differentiated NLL take the exact (recomputing) path."""
    h1, h2, weight, target = _projected_case(12, n=7, d=4, v=6)
    inputs = tuple(x.requires_grad_(True) for x in (h1, h2, weight))
    per_token = torch.linspace(0.5, 2.0, 7, dtype=torch.float64)

    def weighted(a, b, w):
        loss, nll = _ProjectedLoss.apply(w, target, 0.2, 1.5, 3, None, a, b)
        return (per_token * loss).sum() + 0.3 * nll.sum()

    def uniform(a, b, w):
        return projected_rdrop_loss(a, b, w, target, epsilon=0.2, alpha=1.5, chunk_rows=3).loss

    assert torch.autograd.gradcheck(weighted, inputs)
    assert torch.autograd.gradcheck(uniform, inputs)


def test_projected_rdrop_in_bf16_is_close_to_float32():
    """bf16 multiplies, float32 softmax and KL: near the float32 values and gradients."""
    h1, h2, weight, target = (
        x.float() if x.is_floating_point() else x for x in _projected_case(13, n=40, d=16, v=50)
    )
    got, want = [], []
    for dtype, out in ((torch.bfloat16, got), (torch.float32, want)):
        inputs = [x.clone().requires_grad_(True) for x in (h1, h2, weight)]
        res = projected_rdrop_loss(*inputs, target, epsilon=0.1, alpha=1.0, compute_dtype=dtype)
        res.loss.backward()
        out.extend([res.loss.detach(), *(x.grad for x in inputs)])
    assert got[0].dtype == torch.float32 and got[3].dtype == torch.float32  # master dtypes
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w, rtol=0.05, atol=0.05 * float(w.abs().max()))


def test_projected_rdrop_without_grad_and_empty():
    h1, h2, weight, target = _projected_case(14)
    with torch.no_grad():
        out = projected_rdrop_loss(h1, h2, weight, target, epsilon=0.1, alpha=2.0)
    ref = rdrop_loss(
        h1 @ weight.t(), h2 @ weight.t(), target, epsilon=0.1, alpha=2.0, ignore_index=PAD_ID
    )
    torch.testing.assert_close(out.loss, ref.loss)
    a, b = (x[:0].clone().requires_grad_(True) for x in (h1, h2))
    w = weight.clone().requires_grad_(True)
    empty = projected_rdrop_loss(a, b, w, target[:0], epsilon=0.1, alpha=2.0)
    assert empty.n_tokens == 0 and empty.loss.item() == 0.0
    empty.loss.backward()
    assert torch.equal(w.grad, torch.zeros_like(w)) and a.grad.shape == (0, 6)


def test_rdrop_start_runs_one_pass_before_it_and_two_from_it(monkeypatch):
    src, tgt = _batch()
    late = _module(dropout=0.3, alpha=1.0, start=3)
    early = _module(dropout=0.3, alpha=1.0)
    plain = _module(dropout=0.3, alpha=0.0)
    for other in (early, plain):
        other.model.load_state_dict(late.model.state_dict())
    step = {"now": 2}
    monkeypatch.setattr(TranslationModule, "global_step", property(lambda self: step["now"]))
    for m in (late, early, plain):
        m.train()

    def loss(m):
        torch.manual_seed(5)
        return m.compute_loss(src, tgt).loss

    torch.testing.assert_close(loss(late), loss(plain))  # update 2: one pass
    assert not torch.allclose(loss(late), loss(early))
    step["now"] = 3
    torch.testing.assert_close(loss(late), loss(early))  # from update 3: the two passes

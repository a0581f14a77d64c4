"""label_smoothed_nll against F.cross_entropy, with padding ignored."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seq2seq.model.loss import (
    LossOutput,
    _ProjectedLoss,
    label_smoothed_nll,
    projected_label_smoothed_nll,
)

PAD = 0


def batch(seed: int = 0, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B, T, V) and targets (B, T) with trailing padding in some rows."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 6, 11, generator=g, dtype=dtype) * 3
    target = torch.randint(1, 11, (3, 6), generator=g)
    target[0, 4:] = PAD
    target[2, 1:] = PAD
    return logits, target


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_matches_cross_entropy(epsilon: float) -> None:
    logits, target = batch()
    out = label_smoothed_nll(logits, target, epsilon=epsilon, ignore_index=PAD)
    assert isinstance(out, LossOutput)
    assert out.loss.dtype == out.nll.dtype == torch.float64  # float64 is not cut to float32
    flat_logits, flat_target = logits.reshape(-1, 11), target.reshape(-1)
    expected = F.cross_entropy(
        flat_logits, flat_target, reduction="sum", ignore_index=PAD, label_smoothing=epsilon
    )
    nll = F.cross_entropy(flat_logits, flat_target, reduction="sum", ignore_index=PAD)
    torch.testing.assert_close(out.loss, expected, atol=1e-10, rtol=1e-12)
    torch.testing.assert_close(out.nll, nll, atol=1e-10, rtol=1e-12)
    assert out.n_tokens == int((target != PAD).sum()) == 18 - 2 - 5
    if epsilon == 0.0:
        torch.testing.assert_close(out.loss, out.nll)
    else:
        assert not torch.allclose(out.loss, out.nll)


def test_flat_and_batched_shapes_agree() -> None:
    logits, target = batch(1)
    a = label_smoothed_nll(logits, target, epsilon=0.1, ignore_index=PAD)
    b = label_smoothed_nll(
        logits.reshape(-1, 11), target.reshape(-1), epsilon=0.1, ignore_index=PAD
    )
    torch.testing.assert_close(a.loss, b.loss)
    torch.testing.assert_close(a.nll, b.nll)
    assert a.n_tokens == b.n_tokens


def test_padding_positions_contribute_nothing() -> None:
    logits, target = batch(2)
    out = label_smoothed_nll(logits, target, epsilon=0.1, ignore_index=PAD)
    # whatever the logits at padded targets are, nothing moves
    noisy = logits.clone()
    noisy[target == PAD] = torch.randn(int((target == PAD).sum()), 11, dtype=logits.dtype) * 50
    out2 = label_smoothed_nll(noisy, target, epsilon=0.1, ignore_index=PAD)
    torch.testing.assert_close(out2.loss, out.loss)
    torch.testing.assert_close(out2.nll, out.nll)
    # and their gradient is exactly zero
    leaf = logits.clone().requires_grad_(True)
    label_smoothed_nll(leaf, target, epsilon=0.1, ignore_index=PAD).loss.backward()
    assert torch.equal(
        leaf.grad[target == PAD], torch.zeros(int((target == PAD).sum()), 11, dtype=leaf.dtype)
    )
    assert (leaf.grad[target != PAD].abs().sum(-1) > 0).all()
    # dropping the padded columns entirely gives the same sums
    kept = label_smoothed_nll(logits[0, :4], target[0, :4], epsilon=0.1, ignore_index=PAD)
    rest = label_smoothed_nll(logits[1:], target[1:], epsilon=0.1, ignore_index=PAD)
    torch.testing.assert_close(kept.loss + rest.loss, out.loss)
    assert kept.n_tokens + rest.n_tokens == out.n_tokens


def test_no_padding_and_all_padding() -> None:
    logits, target = batch(3)
    full = target.clone()
    full[full == PAD] = 5
    out = label_smoothed_nll(logits, full, epsilon=0.2, ignore_index=PAD)
    assert out.n_tokens == 18
    expected = F.cross_entropy(
        logits.reshape(-1, 11), full.reshape(-1), reduction="sum", label_smoothing=0.2
    )
    torch.testing.assert_close(out.loss, expected, atol=1e-10, rtol=1e-12)
    empty = label_smoothed_nll(logits, torch.zeros_like(target), epsilon=0.1, ignore_index=PAD)
    assert empty.n_tokens == 0
    assert empty.loss.item() == 0.0 and empty.nll.item() == 0.0


def test_closed_form_smoothing() -> None:
    """(1 - eps) * nll + eps * mean_v(-log p_v) for one token, by hand."""
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0]], dtype=torch.float64)
    target = torch.tensor([2])
    log_p = logits.log_softmax(-1)[0]
    eps = 0.25
    expected = (1 - eps) * -log_p[2] + eps * -log_p.mean()
    out = label_smoothed_nll(logits, target, epsilon=eps, ignore_index=PAD)
    torch.testing.assert_close(out.loss, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(out.nll, -log_p[2], atol=1e-12, rtol=0)
    assert out.n_tokens == 1


def test_low_precision_logits_are_upcast() -> None:
    logits, target = batch(4, dtype=torch.float32)
    out = label_smoothed_nll(logits.bfloat16(), target, epsilon=0.1, ignore_index=PAD)
    assert out.loss.dtype == torch.float32
    ref = label_smoothed_nll(logits.bfloat16().float(), target, epsilon=0.1, ignore_index=PAD)
    torch.testing.assert_close(out.loss, ref.loss)
    torch.testing.assert_close(out.nll, ref.nll)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_fused_backward_passes_gradcheck(epsilon: float) -> None:
    """The hand-written gradient (loss and nll, both used) against finite differences."""
    logits, target = batch(5)
    leaf = logits.detach().requires_grad_(True)
    w = torch.tensor([0.7, 1.3], dtype=torch.float64)

    def both(x: torch.Tensor) -> torch.Tensor:
        out = label_smoothed_nll(x, target, epsilon=epsilon, ignore_index=PAD)
        return w[0] * out.loss + w[1] * out.nll

    assert torch.autograd.gradcheck(both, (leaf,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradient_equals_cross_entropy_autograd(dtype: torch.dtype) -> None:
    logits, target = batch(6, dtype=torch.float32)
    ours = logits.to(dtype).requires_grad_(True)
    ref = logits.to(dtype).requires_grad_(True)
    label_smoothed_nll(ours, target, epsilon=0.1, ignore_index=PAD).loss.backward()
    F.cross_entropy(
        ref.float().reshape(-1, 11),
        target.reshape(-1),
        reduction="sum",
        ignore_index=PAD,
        label_smoothing=0.1,
    ).backward()
    assert ours.grad.dtype == dtype
    torch.testing.assert_close(ours.grad, ref.grad)


def projected_case(seed: int, n: int = 23, d: int = 6, v: int = 13):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64)
    weight = torch.randn(v, d, generator=g, dtype=torch.float64)
    target = torch.randint(1, v, (n,), generator=g)
    return hidden, weight, target


@pytest.mark.parametrize("chunk_rows", [1, 5, 23, 64])
def test_projected_loss_equals_the_unfused_one(chunk_rows: int) -> None:
    """Values and gradients of the chunked projection + loss equal logits -> label_smoothed_nll."""
    hidden, weight, target = projected_case(7)
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    ours = projected_label_smoothed_nll(h1, w1, target, epsilon=0.1, chunk_rows=chunk_rows)
    ref = label_smoothed_nll(h2 @ w2.t(), target, epsilon=0.1, ignore_index=PAD)
    torch.testing.assert_close(ours.loss, ref.loss)
    torch.testing.assert_close(ours.nll, ref.nll)
    assert ours.n_tokens == ref.n_tokens == 23
    (ours.loss / 23).backward()  # the training case: the fast path
    (ref.loss / 23).backward()
    torch.testing.assert_close(h1.grad, h2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)


def test_projected_loss_general_gradient_passes_gradcheck() -> None:
    """Per-token weights and a differentiated NLL take the exact (recomputing) path."""
    hidden, weight, target = projected_case(8, n=9, d=4, v=7)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    per_token = torch.linspace(0.5, 2.0, 9, dtype=torch.float64)

    def weighted(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss, nll = _ProjectedLoss.apply(w, target, 0.2, 0.0, 4, None, h)
        return (per_token * loss).sum() + 0.3 * nll.sum()

    def uniform(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return projected_label_smoothed_nll(h, w, target, epsilon=0.2, chunk_rows=4).loss * 1.7

    assert torch.autograd.gradcheck(weighted, (hidden, weight))
    assert torch.autograd.gradcheck(uniform, (hidden, weight))


def test_projected_loss_without_grad_and_empty() -> None:
    hidden, weight, target = projected_case(9)
    with torch.no_grad():
        out = projected_label_smoothed_nll(hidden, weight, target, epsilon=0.1)
    ref = label_smoothed_nll(hidden @ weight.t(), target, epsilon=0.1, ignore_index=PAD)
    torch.testing.assert_close(out.loss, ref.loss)
    h = hidden[:0].clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    empty = projected_label_smoothed_nll(h, w, target[:0], epsilon=0.1)
    assert empty.n_tokens == 0 and empty.loss.item() == 0.0
    empty.loss.backward()
    assert torch.equal(w.grad, torch.zeros_like(w))

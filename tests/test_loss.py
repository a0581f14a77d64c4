"""label_smoothed_nll against F.cross_entropy, with padding ignored."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seq2seq.loss import LossOutput, label_smoothed_nll

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

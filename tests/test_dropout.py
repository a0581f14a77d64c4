"""layers.dropout: the cheaper CPU mask keeps F.dropout's contract."""

from __future__ import annotations

import pytest
import torch

from seq2seq.model.layers import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drop_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(200_001)  # odd: the last int32 draw is only half used
    y = dropout(x, p, training=True)
    dropped = y == 0
    # 200k Bernoulli draws: the rate is within 5 standard deviations of p
    sd = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(dropped.float().mean().item() - p) < 5 * sd
    # kept elements are scaled by 1 / (1 - p) for p a multiple of 1/32768
    k = round(p * 32768)
    torch.testing.assert_close(y[~dropped], torch.full_like(y[~dropped], 32768 / (32768 - k)))
    # so the mean is kept
    assert abs(y.mean().item() - 1.0) < 5 * sd / (1 - p)


def test_every_position_is_dropped_alike() -> None:
    """Both 15-bit halves of each int32 draw give the same drop rate (even and odd positions)."""
    torch.manual_seed(1)
    y = dropout(torch.ones(400_000), 0.25, training=True).view(-1, 2)
    rates = (y == 0).float().mean(0)
    sd = (0.25 * 0.75 / 200_000) ** 0.5
    assert (rates - 0.25).abs().max().item() < 5 * sd
    # and neighbours are independent: P(both dropped) = p^2
    both = ((y == 0).all(1)).float().mean().item()
    assert abs(both - 0.25**2) < 5 * (0.0625 * 0.9375 / 200_000) ** 0.5


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(2)
    x = torch.randn(7, 9, dtype=torch.float64, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    y.backward(torch.ones_like(y))
    ratio = torch.where(x != 0, y / x, torch.zeros_like(x)).detach()
    torch.testing.assert_close(x.grad, ratio)
    assert y.dtype == torch.float64


def test_seeded_identity_in_eval_and_p_zero() -> None:
    x = torch.randn(5, 6)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    torch.manual_seed(3)
    a = dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    b = dropout(x, 0.3, training=True)
    assert torch.equal(a, b)
    assert not torch.equal(a, dropout(x, 0.3, training=True))
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))  # F.dropout's p=1


def test_module_follows_train_and_eval() -> None:
    m = Dropout(0.5)
    x = torch.ones(1000)
    assert (m(x) == 0).any()
    m.eval()
    assert torch.equal(m(x), x)
    assert "p=0.5" in repr(m)
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_low_precision_keeps_its_dtype() -> None:
    torch.manual_seed(4)
    y = dropout(torch.ones(1000, dtype=torch.bfloat16), 0.1, training=True)
    assert y.dtype == torch.bfloat16
    assert (y == 0).any() and (y != 0).any()

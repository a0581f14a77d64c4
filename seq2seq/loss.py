"""Label-smoothed cross-entropy over the target vocabulary, padding ignored."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["LossOutput", "label_smoothed_nll"]


@dataclass
class LossOutput:
    """Sums over the non-padding target tokens of one batch.

    Attributes:
        loss: label-smoothed loss summed over tokens (what is minimised, after dividing
            by ``n_tokens``).
        nll: plain negative log-likelihood summed over tokens (perplexity = exp(nll / n)).
        n_tokens: number of non-padding target tokens.
    """

    loss: Tensor
    nll: Tensor
    n_tokens: int


def label_smoothed_nll(
    logits: Tensor, target: Tensor, *, epsilon: float, ignore_index: int
) -> LossOutput:
    """Label-smoothed cross-entropy: (1 - eps) * nll + eps * mean over V of -log p.

    This is the smoothing of ``F.cross_entropy(label_smoothing=eps)``: eps/V of the mass on
    every class, the gold one included.

    Args:
        logits: (N, V) or (B, T, V) unnormalised scores.
        target: (N,) or (B, T) gold ids; ``ignore_index`` positions contribute nothing.
        epsilon: smoothing in [0, 1).
        ignore_index: the padding id.
    """
    logits = logits.reshape(-1, logits.size(-1))
    target = target.reshape(-1)
    keep = target.ne(ignore_index)
    if not bool(keep.all()):
        logits, target = logits[keep], target[keep]
    loss, nll = _SmoothedNLL.apply(logits, target, epsilon)
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))


class _SmoothedNLL(torch.autograd.Function):
    """Per-token label-smoothed loss and NLL with one fused backward pass.

    Autograd through log_softmax, gather and mean makes four passes over the (N, V) tensor
    in the backward (the mean's gradient, the gather's zero-filled scatter, their sum, the
    log-softmax backward); with p = softmax(logits) the gradient is simply

        d loss_i / d logits_ij = p_ij - (1 - eps) [j = t_i] - eps / V
        d nll_i  / d logits_ij = p_ij - [j = t_i]

    computed here from the saved log-probabilities: half the time of the autograd version
    for an (N, 8000) batch on the CPU.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        # At least float32 (fp16/bf16 are upcast; float64 keeps its precision).
        log_probs = logits.log_softmax(
            dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)
        )
        nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        smooth = -log_probs.mean(dim=-1)  # (N,)
        ctx.save_for_backward(log_probs, target)
        ctx.epsilon = epsilon
        ctx.logits_dtype = logits.dtype
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        log_probs, target = ctx.saved_tensors
        eps = ctx.epsilon
        on_probs = grad_loss + grad_nll  # (N,) coefficient of p
        on_gold = (1.0 - eps) * grad_loss + grad_nll  # (N,) coefficient of the one-hot
        on_all = (eps / log_probs.size(-1)) * grad_loss  # (N,) coefficient of the uniform
        grad = log_probs.exp()
        grad.mul_(on_probs.unsqueeze(1)).sub_(on_all.unsqueeze(1))
        grad.scatter_add_(1, target.unsqueeze(1), -on_gold.unsqueeze(1))
        return grad.to(ctx.logits_dtype), None, None


def projected_label_smoothed_nll(
    hidden: Tensor, weight: Tensor, target: Tensor, *, epsilon: float, chunk_rows: int = 512
) -> LossOutput:
    """``label_smoothed_nll(hidden @ weight.T, target)``, without padding, computed in chunks.

    The (N, V) logits of a batch (125 MB for 4k tokens and 8k pieces) never exist at once:
    each chunk of ``chunk_rows`` tokens is projected, normalised and differentiated while
    its logits are still in the CPU cache, which makes the vocabulary projection and softmax
    ~10% of a CPU training step cheaper and saves the (N, V) activations. The gradient of the
    loss is computed in the forward pass for the common case (backward of ``loss.sum()``
    times a constant, the NLL only logged) and exactly recomputed otherwise.

    Args:
        hidden: (N, D) decoder states of the non-padding target positions.
        weight: (V, D) output projection (no bias).
        target: (N,) gold ids, none of them padding.
        epsilon: label smoothing.
        chunk_rows: tokens per chunk.
    """
    loss, nll = _ProjectedSmoothedNLL.apply(hidden, weight, target, epsilon, chunk_rows)
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))


def _smoothed_chunk(
    h: Tensor, weight: Tensor, t: Tensor, epsilon: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, nll, log-probs) of one chunk: h (n, D) -> logits (n, V)."""
    log_probs = (h @ weight.t()).log_softmax(dim=-1)
    nll = -log_probs.gather(1, t.unsqueeze(1)).squeeze(1)
    smooth = -log_probs.mean(dim=-1)
    return (1.0 - epsilon) * nll + epsilon * smooth, nll, log_probs


def _logit_grad_(
    log_probs: Tensor, t: Tensor, epsilon: float, on_loss: Tensor | None, on_nll: Tensor | None
) -> Tensor:
    """d(sum_i on_loss_i loss_i + on_nll_i nll_i) / d logits, in place of ``log_probs``.

    ``on_loss`` and ``on_nll`` are (n,) weights; None means 1 for the loss and 0 for the NLL
    (the gradient of ``loss.sum()``). See :class:`_SmoothedNLL` for the formula.
    """
    n, vocab = log_probs.shape
    grad = log_probs.exp_()
    if on_loss is None:
        grad.sub_(epsilon / vocab)
        on_gold = grad.new_full((n, 1), 1.0 - epsilon)
    else:
        on_loss, on_nll = on_loss.unsqueeze(1), on_nll.unsqueeze(1)
        grad.mul_(on_loss + on_nll).sub_(epsilon / vocab * on_loss)
        on_gold = (1.0 - epsilon) * on_loss + on_nll
    return grad.scatter_add_(1, t.unsqueeze(1), -on_gold)


class _ProjectedSmoothedNLL(torch.autograd.Function):
    """Chunked ``hidden @ weight.T`` -> per-token (loss, nll); see projected_label_smoothed_nll.

    Float32 or float64 inputs (the caller falls back to the unfused path otherwise).
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, epsilon, chunk_rows):
        n = hidden.size(0)
        loss = hidden.new_empty(n)
        nll = hidden.new_empty(n)
        want_grad = any(ctx.needs_input_grad[:2])
        grad_h = torch.empty_like(hidden) if want_grad else None
        grad_w = torch.zeros_like(weight) if want_grad else None
        for start in range(0, n, chunk_rows):
            h, t = hidden[start : start + chunk_rows], target[start : start + chunk_rows]
            loss_c, nll_c, log_probs = _smoothed_chunk(h, weight, t, epsilon)
            loss[start : start + h.size(0)] = loss_c
            nll[start : start + h.size(0)] = nll_c
            if want_grad:  # the gradient of loss.sum(): used as is when that is what's asked
                g = _logit_grad_(log_probs, t, epsilon, None, None)
                torch.mm(g, weight, out=grad_h[start : start + h.size(0)])
                grad_w.addmm_(g.t(), h)
        ctx.save_for_backward(hidden, weight, target, grad_h, grad_w)
        ctx.epsilon, ctx.chunk_rows = epsilon, chunk_rows
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        hidden, weight, target, grad_h, grad_w = ctx.saved_tensors
        if hidden.size(0) == 0:
            return torch.zeros_like(hidden), torch.zeros_like(weight), None, None, None
        if not bool(grad_nll.any()) and bool((grad_loss == grad_loss[0]).all()):
            scale = grad_loss[0]
            return grad_h * scale, grad_w * scale, None, None, None
        # General case (per-token weights, or the NLL differentiated too): recompute exactly.
        grad_h, grad_w = torch.empty_like(hidden), torch.zeros_like(weight)
        rows = ctx.chunk_rows
        for start in range(0, hidden.size(0), rows):
            end = min(start + rows, hidden.size(0))
            h, t = hidden[start:end], target[start:end]
            _, _, log_probs = _smoothed_chunk(h, weight, t, ctx.epsilon)
            g = _logit_grad_(log_probs, t, ctx.epsilon, grad_loss[start:end], grad_nll[start:end])
            torch.mm(g, weight, out=grad_h[start:end])
            grad_w.addmm_(g.t(), h)
        return grad_h, grad_w, None, None, None

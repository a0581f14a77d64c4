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
    # At least float32 (fp16/bf16 are upcast; float64 keeps its precision).
    log_probs = logits.log_softmax(dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
    smooth = -log_probs.mean(dim=-1)  # (N,)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))

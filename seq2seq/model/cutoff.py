"""Token cutoff (Shen et al., 2020; SimCut, Wu et al., 2022): whole token embeddings dropped.

SimCut's consistency regularisation runs a batch twice, the second time with each input
token's embedding (source and target side) zeroed with probability ``p``, and pulls the two
passes' output distributions together with a KL term (``training.rdrop_alpha``,
seq2seq.model.loss.rdrop_loss). Dropout drops single coordinates; cutoff drops tokens, so the
second pass must predict each target word without some of its context.

The cutoff is a context manager over the model's token embeddings rather than a model
option: the model stays the same module in training, validation, decoding and export, and
only the training step that asks for a perturbed pass gets one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from seq2seq.model.layers import TokenEmbedding

__all__ = ["token_cutoff"]


@contextmanager
def token_cutoff(model: nn.Module, p: float) -> Iterator[None]:
    """Inside the block, every ``TokenEmbedding`` of ``model`` zeroes each token's vector with
    probability ``p`` (an independent draw per (sentence, position), from torch's generator).

    A shared source/target embedding is one module, so both sides are cut, each with its own
    draw (one per call). No rescaling by 1 / (1 - p): cutoff, unlike dropout, removes tokens
    rather than noise, as in the papers.

    Args:
        model: the module whose token embeddings are cut (a ``Seq2SeqTransformer``).
        p: the cutoff probability in [0, 1); 0 leaves the model untouched.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"token cutoff probability must be in [0, 1), got {p}")
    if p == 0.0:
        yield
        return

    def cut(_module: nn.Module, _inputs: tuple, out: Tensor) -> Tensor:
        keep = torch.rand(out.shape[:-1], device=out.device) >= p  # (B, L)
        return out * keep.unsqueeze(-1).to(out.dtype)  # (B, L, D)

    handles = [
        m.register_forward_hook(cut) for m in model.modules() if isinstance(m, TokenEmbedding)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()

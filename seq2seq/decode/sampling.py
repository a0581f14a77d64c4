"""Sampling: one hypothesis per sentence drawn from the (tempered, truncated) distribution,
reproducibly from a seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from seq2seq.decode.constraints import Constraints
from seq2seq.decode.greedy import decode_one_each
from seq2seq.decode.search_base import (
    AttentionFn,
    Hypothesis,
    ReorderFn,
    State,
    StepFn,
    check_options,
    max_lens_tensor,
    search_device,
)

__all__ = ["sample"]

_NEG_INF = -math.inf


def _truncate(lp: Tensor, *, top_k: int, top_p: float) -> Tensor:
    """Keep the ``top_k`` best tokens and the top-p nucleus of each row; others -inf.

    Args:
        lp: (N, V) log-probs (possibly with -inf entries).

    Returns:
        (N, V) with the excluded tokens at -inf. The nucleus is the smallest set of best
        tokens whose probability (renormalized over the allowed tokens) reaches ``top_p``;
        the best token is always kept.
    """
    if 0 < top_k < lp.size(1):
        kth = lp.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        lp = lp.masked_fill(lp < kth, _NEG_INF)
    if top_p < 1.0:
        sorted_lp, order = lp.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_lp.softmax(-1)
        drop_sorted = probs.cumsum(-1) - probs >= top_p  # mass before this token already >= p
        drop = drop_sorted.scatter(1, order, drop_sorted)  # back to vocabulary order
        lp = lp.masked_fill(drop, _NEG_INF)
    return lp


def sample(
    step: StepFn,
    reorder: ReorderFn,
    state: State,
    *,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_lens: Tensor | int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    min_len: int = 1,
    len_penalty: float = 1.0,
    no_repeat_ngram: int = 0,
    unk_id: int | None = None,
    unk_penalty: float = 0.0,
    attention: AttentionFn | None = None,
    device: torch.device | str | None = None,
    constraints: Sequence[Constraints] | None = None,
) -> list[Hypothesis]:
    """Sample one hypothesis per sentence, reproducibly from ``seed``.

    As in fairseq, the temperature scales the model's distribution first
    (``log_softmax(log_probs / temperature)``), then the search rules apply (pad, unk penalty,
    ``min_len``, forced EOS, n-grams), then top-k and top-p truncate, and a token is drawn from
    what is left. ``token_scores`` are the temperature-scaled, rule-constrained log-probs before
    truncation (fairseq's). Unlike fairseq, the top-p nucleus is computed on probabilities
    renormalized over the allowed tokens.

    Draws come from one ``torch.Generator`` on the decoding device seeded with ``seed``: the
    same inputs, seed and device give the same output (CPU and CUDA streams differ).

    Args:
        step: as in :func:`greedy_search`.
        reorder: as in :func:`greedy_search`.
        state: as in :func:`greedy_search`.
        batch_size: B.
        bos_id: special tokens.
        eos_id: as ``bos_id``.
        pad_id: as ``bos_id``.
        max_lens: (B,) or int, max length per sentence including EOS.
        temperature: > 0; below 1 sharpens, above 1 flattens.
        top_k: sample among the k best tokens only (0: all).
        top_p: sample from the smallest set of best tokens with this much mass (1: all).
        seed: seed of the generator.
        min_len: as in :func:`greedy_search`.
        len_penalty: as in :func:`greedy_search`.
        no_repeat_ngram: as in :func:`greedy_search`.
        unk_id: as in :func:`greedy_search`.
        unk_penalty: as in :func:`greedy_search`.
        attention: as in :func:`greedy_search`.
        device: as in :func:`greedy_search`.
        constraints: as in :func:`greedy_search`.

    Returns:
        One hypothesis per sentence, in input order.
    """
    check_options(
        batch_size,
        method="sample",
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    dev = search_device(max_lens, device)
    max_lens = max_lens_tensor(max_lens, batch_size, dev)
    if batch_size == 0:
        return []
    generator = torch.Generator(device=dev)
    generator.manual_seed(seed)

    def tempered_step(prefix: Tensor, st: State) -> tuple[Tensor, State]:
        log_probs, st = step(prefix, st)  # (N, V)
        if temperature != 1.0:
            log_probs = torch.log_softmax(log_probs.float() / temperature, dim=-1)
        return log_probs, st

    def draw(lp: Tensor) -> Tensor:
        kept = _truncate(lp, top_k=top_k, top_p=top_p)  # (N, V)
        kept = kept.masked_fill(~kept.isfinite().any(-1, keepdim=True), 0.0)  # dead rows: any
        probs = kept.float().softmax(-1)  # (N, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (N,)

    return decode_one_each(
        tempered_step,
        reorder,
        state,
        draw,
        batch_size=batch_size,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        max_lens=max_lens,
        min_len=min_len,
        len_penalty=len_penalty,
        no_repeat_ngram=no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
        attention=attention,
        constraints=constraints,
    )

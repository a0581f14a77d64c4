"""What greedy, beam and sampling search share: the model seen as three callables, the
:class:`Hypothesis` each search returns, and the checks of their common arguments. The
searches know nothing else about the model.

The three callables:

- ``step(prefix, state) -> (log_probs, state)``: ``prefix`` (N, t+1) holds the token ids so far,
  start token (BOS) first; ``log_probs`` (N, V) are normalized log-probabilities of the next
  token. A KV-cached decoder reads only ``prefix[:, -1]``; the whole prefix is passed so that a
  cache-less step works too.
- ``reorder(state, index) -> state``: keeps the rows ``index`` (M,) of the state, in that order.
  M may be larger than N (expanding sentences to beams), equal (reordering beams) or smaller
  (dropping finished sentences, which then stop costing compute).
- optional ``attention(state) -> (N, S)``: the cross-attention weights of the last step, for
  alignment plots. When given, every hypothesis carries its (len, S) attention rows.

Shape letters (see docs/design.md): B sentences, K beam size, V vocabulary, S source length,
N rows the step function sees (B*K for beam search, B otherwise, shrinking as sentences
finish), Ba sentences still being decoded, t tokens generated so far (BOS not counted).

Scoring follows fairseq's ``SequenceGenerator`` (details in
:func:`seq2seq.decode.beam.beam_search`). The one deliberate difference is the meaning of
``max_lens``: here it bounds the hypothesis length *including* EOS (at most ``max_len``
tokens), whereas fairseq allows ``max_len`` tokens plus EOS; ``max_lens = m`` here is
fairseq's ``max_len = m - 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig
from seq2seq.core import UserError

__all__ = [
    "AttentionFn",
    "Hypothesis",
    "ReorderFn",
    "State",
    "StepFn",
    "check_options",
    "max_lens_tensor",
    "search_device",
]

State = TypeVar("State")
StepFn = Callable[[Tensor, State], tuple[Tensor, State]]
"""``step(prefix (N, t+1), state) -> (log_probs (N, V), state)``."""
ReorderFn = Callable[[State, Tensor], State]
"""``reorder(state, index (M,)) -> state`` with the rows ``index`` of ``state``."""
AttentionFn = Callable[[State], Tensor]
"""``attention(state) -> (N, S)`` cross-attention weights of the last step."""


@dataclass
class Hypothesis:
    """One finished output sequence.

    Attributes:
        tokens: generated token ids, EOS included (last) when the hypothesis ended with EOS;
            never the start token; a forced prefix first. Every search here ends every
            hypothesis with EOS.
        score: ``sum(token_scores) / (len(tokens) - prefix_len) ** len_penalty`` (fairseq
            normalization; the prefix is given, not searched, so it does not count).
        token_scores: log-probability of each generated token as it entered the score (after
            the unk penalty; for sampling, under the temperature-scaled distribution); 0.0 for
            the prefix tokens.
        attention: (len(tokens), S) cross-attention rows, row i from the step that produced
            ``tokens[i]``, on the CPU; None unless an ``attention`` callable was given. S is the
            source length the step sees (the batch's padded length): trim to the sentence's own.
            Rows of prefix tokens decoded in the one-pass prefix step are zeros.
        prefix_len: tokens of the forced prefix at the start of ``tokens``.
    """

    tokens: list[int]
    score: float
    token_scores: list[float]
    attention: Tensor | None = None
    prefix_len: int = 0


def check_options(batch_size: int, **options: object) -> None:
    """Refuse a negative batch size (a caller's bug: ValueError) and search options no search
    can run (UserError naming ``decoding.KEY``).

    The options (``method``, ``beam_size``, ``min_len``, ...: fields of
    :class:`seq2seq.config.DecodingConfig`) go through the one check of the search options,
    :meth:`seq2seq.config.DecodingConfig.validate`, the same as the config and
    :class:`seq2seq.decode.options.SearchOptions`.
    """
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    DecodingConfig(**options).validate(search=True)  # type: ignore[arg-type]


def max_lens_tensor(max_lens: Tensor | int, batch_size: int, device: torch.device) -> Tensor:
    """Per-sentence max lengths as a (B,) long tensor on ``device``; non-integers are floored."""
    if isinstance(max_lens, Tensor):
        if max_lens.shape != (batch_size,):
            raise ValueError(
                f"max_lens has shape {tuple(max_lens.shape)}, expected ({batch_size},)"
            )
        out = max_lens.to(device).floor().long() if max_lens.is_floating_point() else max_lens
        out = out.to(device=device, dtype=torch.long)
    else:
        out = torch.full((batch_size,), int(max_lens), dtype=torch.long, device=device)
    if batch_size and int(out.min()) < 1:
        raise UserError(
            f"max length must be >= 1 for every sentence (got {int(out.min())}); "
            "raise decoding.max_len_a / decoding.max_len_b"
        )
    return out


def search_device(max_lens: Tensor | int, device: torch.device | str | None) -> torch.device:
    """``device``, else ``max_lens``'s device, else the CPU."""
    if device is not None:
        return torch.device(device)
    return max_lens.device if isinstance(max_lens, Tensor) else torch.device("cpu")

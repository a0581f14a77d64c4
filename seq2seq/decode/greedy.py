"""Greedy search: the most probable token at every step, one hypothesis per sentence; and the
one-hypothesis-per-sentence loop that sampling (seq2seq.decode.sampling) shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constrained_search import prefix_pass, start_constraints
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.rules import constrain, fused_columns
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

__all__ = ["decode_one_each", "greedy_search"]


def _greedy_pick(
    log_probs: Tensor,
    prefix: Tensor,
    max_lens: Tensor,
    **rules: object,
) -> tuple[Tensor, Tensor] | None:
    """Greedy's token (N,) and its constrained log-prob (N,) without :func:`constrain`'s copy.

    The same token as ``argmax`` of the constrained row (the lowest id among equal maxima),
    or None (the exact path runs) when a row's maximum could tie with a token outside the
    columns looked at, or a row has no finite entry (it ends with EOS on the exact path).
    """
    generated = prefix.size(1) - 1
    fused = fused_columns(log_probs, 1, generated, max_lens, **rules)  # type: ignore[arg-type]
    if fused is None:
        return None
    vals, toks, outside = fused
    best = vals.max(dim=1).values  # (N,)
    if not bool((outside < best).all()):  # a tie outside the columns, or a dead row
        return None
    tok = toks.masked_fill(vals != best[:, None], log_probs.size(1)).min(dim=1).values
    return tok, best


def decode_one_each(
    step: StepFn,
    reorder: ReorderFn,
    state: State,
    choose: Callable[[Tensor], Tensor] | None,
    *,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_lens: Tensor,
    min_len: int,
    len_penalty: float,
    no_repeat_ngram: int,
    unk_id: int | None,
    unk_penalty: float,
    attention: AttentionFn | None,
    constraints: Sequence[Constraints] | None = None,
) -> list[Hypothesis]:
    """Extend each sentence by the token ``choose`` picks until EOS; drop finished rows.

    ``choose(lp (N, V)) -> (N,)`` picks one token per row of the constrained log-probs; rows
    without any finite entry get EOS instead, so every sentence ends. ``choose=None`` is the
    argmax (greedy search), which mostly runs without the (N, V) copy (``_greedy_pick``).
    ``constraints``: prefixes and avoided phrases (``include`` phrases need beam search).
    """
    dev = max_lens.device
    if constraints is not None and any(c.include for c in constraints):
        raise UserError("positive constraints need beam search (or greedy: beam size 1)")
    cstate, max_lens = start_constraints(
        constraints, max_lens, dev, no_repeat_ngram=no_repeat_ngram
    )
    plen = [0] * batch_size if cstate is None else cstate.given_list
    results: list[Hypothesis | None] = [None] * batch_size
    alive = torch.arange(batch_size, device=dev)  # (N,) sentence id of each row
    first = prefix_pass(step, state, cstate, bos_id=bos_id, device=dev, attention=attention)
    pending = step_attn0 = None
    if first is None:
        tokens = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=dev)  # (N, t+1)
    else:
        tokens, pending, step_attn0, state, cstate = first
    t0 = tokens.size(1) - 1
    token_scores = torch.zeros((batch_size, t0), device=dev)  # (N, t), the prefix: 0
    attn: Tensor | None = None  # (N, t, S)

    rules = dict(
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
    )
    for t in range(t0, int(max_lens.max())):
        if pending is not None:
            log_probs, pending, step_attn = pending, None, step_attn0
        else:
            log_probs, state = step(tokens, state)  # (N, V)
            step_attn = attention(state) if attention is not None else None  # (N, S)
        extra = None if cstate is None else cstate.rules(t)
        picked = (
            None
            if choose is not None
            else _greedy_pick(log_probs, tokens, max_lens[alive], **rules, extra=extra)
        )
        if picked is not None:
            tok, tok_lp = picked[0], picked[1][:, None]  # (N,), (N, 1)
        else:
            lp = constrain(log_probs, tokens, max_lens[alive], **rules, extra=extra)  # (N, V)
            dead = ~lp.isfinite().any(-1)  # (N,) nothing allowed: end the row
            tok = torch.where(dead, eos_id, (choose or _argmax)(lp))  # (N,)
            tok_lp = lp.gather(1, tok[:, None])  # (N, 1)
        if step_attn is not None:
            if attn is None:  # no attention rows for the one-pass prefix: zeros
                attn = step_attn.new_zeros((step_attn.size(0), t0, step_attn.size(1)))
            attn = torch.cat([attn, step_attn[:, None]], dim=1)  # (N, t+1, S)
        tokens = torch.cat([tokens, tok[:, None]], dim=1)  # (N, t+2)
        token_scores = torch.cat([token_scores.to(tok_lp.dtype), tok_lp], dim=1)  # (N, t+1)
        if cstate is not None:
            cstate = cstate.advance(tok)

        done = (tok == eos_id) | (tokens.size(1) - 1 >= max_lens[alive])  # (N,)
        if not bool(done.any()):
            continue
        rows = done.nonzero().squeeze(1)  # (F,)
        totals = token_scores[rows].sum(-1).tolist()
        hyp_tokens = tokens[rows, 1:].tolist()
        hyp_token_scores = token_scores[rows].tolist()
        hyp_attn = attn[rows].cpu() if attn is not None else None  # (F, t+1, S)
        for i, sent in enumerate(alive[rows].tolist()):
            results[sent] = Hypothesis(
                tokens=hyp_tokens[i],
                score=totals[i] / (len(hyp_tokens[i]) - plen[sent]) ** len_penalty,
                token_scores=hyp_token_scores[i],
                attention=None if hyp_attn is None else hyp_attn[i],
                prefix_len=plen[sent],
            )
        keep = (~done).nonzero().squeeze(1)  # (N',)
        if keep.numel() == 0:
            break
        state = reorder(state, keep)
        alive, tokens, token_scores = alive[keep], tokens[keep], token_scores[keep]
        if cstate is not None:
            cstate = cstate.reorder(keep)
        if attn is not None:
            attn = attn[keep]

    assert all(h is not None for h in results), "a sentence outlived its max length"
    return results  # type: ignore[return-value]


def greedy_search(
    step: StepFn,
    reorder: ReorderFn,
    state: State,
    *,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_lens: Tensor | int,
    min_len: int = 1,
    len_penalty: float = 1.0,
    no_repeat_ngram: int = 0,
    unk_id: int | None = None,
    unk_penalty: float = 0.0,
    attention: AttentionFn | None = None,
    device: torch.device | str | None = None,
    constraints: Sequence[Constraints] | None = None,
) -> list[Hypothesis]:
    """Pick the most probable token at every step; one hypothesis per sentence.

    Same rules as :func:`beam_search` (pad, unk penalty, ``min_len``, ``max_lens`` with EOS
    counted, n-gram blocking, attention) and the same score, ``sum(token_scores) / len **
    len_penalty``. ``beam_search`` with ``beam_size=1`` finds the same tokens (up to ties). The
    state keeps one row per sentence; finished sentences are dropped through ``reorder``.

    Args:
        step: as in :func:`beam_search` (``state`` has B rows, not expanded).
        reorder: as in :func:`beam_search` (``state`` has B rows, not expanded).
        state: as in :func:`beam_search` (``state`` has B rows, not expanded).
        batch_size: B.
        bos_id: special tokens.
        eos_id: as ``bos_id``.
        pad_id: as ``bos_id``.
        max_lens: (B,) or int, max length per sentence including EOS.
        min_len: EOS is forbidden while fewer than this many tokens were generated.
        len_penalty: exponent of the score's length normalization.
        no_repeat_ngram: n-gram size that may not repeat (0: off; BOS counts).
        unk_id: subtract ``unk_penalty`` from the unk token's log-prob.
        unk_penalty: as ``unk_id``.
        attention: optional ``attention(state) -> (N, S)``.
        device: device of the prefix tensors (default: ``max_lens.device`` or the CPU).
        constraints: per sentence, a forced prefix and avoided phrases (see
            :func:`beam_search`); ``include`` phrases need beam search (a UserError here).

    Returns:
        One hypothesis per sentence, in input order.
    """
    check_options(
        batch_size,
        method="greedy",
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
    )
    dev = search_device(max_lens, device)
    max_lens = max_lens_tensor(max_lens, batch_size, dev)
    if batch_size == 0:
        return []
    return decode_one_each(
        step,
        reorder,
        state,
        None,  # the argmax
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


def _argmax(lp: Tensor) -> Tensor:
    return lp.argmax(-1)

"""The search-time side of constrained decoding (seq2seq.decode.constraints holds the typed
state): the start state and the length limits it raises, the one-pass step over a forced
prefix, and beam candidates under positive constraints (dynamic beam allocation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from seq2seq.decode.constraints import Constraints, ConstraintState, allocate
from seq2seq.decode.rules import constrain, constrain_columns, fused_columns
from seq2seq.decode.search_base import AttentionFn, State, StepFn

__all__ = ["dba_candidates", "prefix_pass", "start_constraints"]

_NEG_INF = -math.inf


def start_constraints(
    constraints: Sequence[Constraints] | None,
    max_lens: Tensor,
    device: torch.device,
    *,
    no_repeat_ngram: int = 0,
) -> tuple[ConstraintState | None, Tensor]:
    """The constraint state (B rows) and the max lengths, raised where the constraints need it.

    A sentence's max length (EOS counted) becomes at least ``len(prefix) + (tokens of its
    include phrases) + 1 + reserve``, so that the prefix and every phrase fit, one after the
    other; the reserve (:meth:`ConstraintState.reserve_of_rows`) is the number of include
    phrases when tokens may be banned (avoided phrases, ``no_repeat_ngram``), else 0.
    None when no sentence has a constraint (the search runs exactly as without).
    """
    if constraints is None or all(c.empty for c in constraints):
        return None, max_lens
    if len(constraints) != max_lens.size(0):
        raise ValueError(f"{len(constraints)} constraints for {max_lens.size(0)} sentences")
    cstate = ConstraintState.start(constraints, device, bans=no_repeat_ngram > 0)
    bans = no_repeat_ngram > 0
    need = torch.tensor([c.needed_len(bans=bans) for c in constraints], device=max_lens.device)
    return cstate, torch.maximum(max_lens, need)


def prefix_pass(
    step: StepFn,
    state: State,
    cstate: ConstraintState | None,
    *,
    bos_id: int,
    device: torch.device,
    attention: AttentionFn | None,
) -> tuple[Tensor, Tensor, Tensor | None, State, ConstraintState] | None:
    """Feed BOS and the prefix tokens every sentence has through one step call (B rows).

    With a KV cache the step decodes those m + 1 positions in one forward pass. Sentences with
    a longer prefix get their remaining prefix tokens forced one per step (the rule
    :meth:`ConstraintState.rules` gives); their log-probs are not scored either.

    Returns:
        (tokens (B, m+1), log-probs (B, V) after them, attention (B, S) or None, the new
        state, the constraint state advanced over the m tokens), or None when m = 0.
    """
    if cstate is None or cstate.common_prefix == 0:
        return None
    m = cstate.common_prefix
    block = cstate.prefix_block(m)  # (B, m)
    bos = torch.full((block.size(0), 1), bos_id, dtype=torch.long, device=device)
    tokens = torch.cat([bos, block], dim=1)  # (B, m+1)
    log_probs, state = step(tokens, state)
    step_attn = attention(state) if attention is not None else None
    for j in range(m):
        cstate = cstate.advance(block[:, j])
    return tokens, log_probs, step_attn, state, cstate


def dba_candidates(
    log_probs: Tensor,
    prefix: Tensor,
    max_lens: Tensor,
    scores: Tensor,
    cstate: ConstraintState,
    *,
    beam_size: int,
    rules: dict,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`beam_candidates` under positive constraints: dynamic beam allocation.

    Each beam proposes its own 2K best tokens (constrained log-probs, the rules of
    :func:`constrain` and of ``cstate``) plus the tokens that advance one of its constraints
    (:meth:`ConstraintState.next_tokens`, when not already among them). A candidate that would
    leave too few tokens before the max length to meet the remaining constraints is dropped
    (-inf): the token that advances the most advanced phrase always fits, so a sentence never
    runs out of room (its max length was raised to fit the constraints), unless that token is
    banned (an avoided phrase, an n-gram repeat). For that a sentence keeps a reserve of spare
    tokens (:meth:`ConstraintState.reserve_of_rows`) while any candidate can. The sentence's
    candidates are then grouped in banks by the constraint tokens met and taken in turns
    (:func:`seq2seq.decode.constraints.allocate`); with no constraint this is the plain order.

    Returns:
        As :func:`beam_candidates`, (Ba, 2K) each, in allocation order.
    """
    K = beam_size
    rows, V = log_probs.shape
    Ba = rows // K
    generated = prefix.size(1) - 1
    eos_id = rules["eos_id"]
    M = min(2 * K, V)
    extra = cstate.rules(generated)
    fused = fused_columns(log_probs, M, generated, max_lens, **rules, extra=extra)
    nxt = cstate.next_tokens()  # (N, P), -1: none
    if fused is not None:
        vals, toks, _ = fused
        vals, pos = vals.topk(M, dim=1)  # (N, M) the row's M best constrained tokens
        toks = toks.gather(1, pos)
        nxt_vals = torch.nan_to_num(
            log_probs.gather(1, nxt.clamp(min=0)).to(vals.dtype), nan=_NEG_INF
        )
        rule_args = {k: v for k, v in rules.items() if k != "no_repeat_ngram"}
        nxt_vals = constrain_columns(
            nxt_vals, nxt.clamp(min=0), generated, max_lens, **rule_args, extra=extra
        )
    else:
        lp = constrain(log_probs, prefix, max_lens, **rules, extra=extra)  # (N, V)
        vals, toks = lp.topk(M, dim=1)
        nxt_vals = lp.gather(1, nxt.clamp(min=0))
    if nxt.size(1):
        P = nxt.size(1)
        dup = (nxt[:, :, None] == toks[:, None, :]).any(-1) | (nxt < 0)  # (N, P)
        earlier = torch.ones(P, P, dtype=torch.bool, device=nxt.device).tril(-1)
        dup |= ((nxt[:, :, None] == nxt[:, None, :]) & earlier).any(-1)
        vals = torch.cat([vals, nxt_vals.masked_fill(dup, _NEG_INF)], 1)
        toks = torch.cat([toks, nxt.clamp(min=0)], 1)
    C = toks.size(1)
    met = cstate.met_after(toks)  # (N, C)
    room = max_lens - generated - 2  # (N,) tokens allowed after this one, before EOS
    slack = room[:, None] - cstate.needed(met)  # (N, C) tokens to spare after the candidate
    # Keep the sentence's reserve of spare tokens (for a way around a banned token) while
    # some candidate can; never go below 0 (the constraints would no longer fit).
    best = slack.masked_fill(~vals.isfinite(), -1).amax(1, keepdim=True)  # (N, 1)
    keep = torch.minimum(best, cstate.reserve_of_rows()[:, None]).clamp(min=0)
    fits = (toks == eos_id) | (slack >= keep)
    vals = vals.masked_fill(~fits, _NEG_INF)
    cum = (scores.to(vals.dtype)[:, None] + vals).view(Ba, K * C)
    total = cstate.total_of_rows().view(Ba, K)[:, 0]  # (Ba,)
    pos = allocate(
        cum, met.view(Ba, K * C), total, min(2 * K, K * C), total_max=cstate.total_max
    )  # (Ba, 2K)
    return (
        cum.gather(1, pos),
        pos // C,
        toks.view(Ba, K * C).gather(1, pos),
        vals.view(Ba, K * C).gather(1, pos),
    )

"""Greedy, beam and sampling search over a step function; knows nothing about the model.

The model is seen only through three callables:

- ``step(prefix, state) -> (log_probs, state)``: ``prefix`` (N, t+1) holds the token ids so far,
  start token (BOS) first; ``log_probs`` (N, V) are normalized log-probabilities of the next
  token. A KV-cached decoder reads only ``prefix[:, -1]``; the whole prefix is passed so that a
  cache-less step works too.
- ``reorder(state, index) -> state``: keeps the rows ``index`` (M,) of the state, in that order.
  M may be larger than N (expanding sentences to beams), equal (reordering beams) or smaller
  (dropping finished sentences, which then stop costing compute).
- optional ``attention(state) -> (N, S)``: the cross-attention weights of the last step, for
  alignment plots. When given, every hypothesis carries its (len, S) attention rows.

Shape letters (see DESIGN.md): B sentences, K beam size, V vocabulary, S source length,
N rows the step function sees (B*K for beam search, B otherwise, shrinking as sentences
finish), Ba sentences still being decoded, t tokens generated so far (BOS not counted).

Scoring follows fairseq's ``SequenceGenerator`` (details in :func:`beam_search`). The one
deliberate difference is the meaning of ``max_lens``: here it bounds the hypothesis length
*including* EOS (at most ``max_len`` tokens), whereas fairseq allows ``max_len`` tokens plus
EOS; ``max_lens = m`` here is fairseq's ``max_len = m - 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints, ConstraintState, StepRules, allocate

__all__ = [
    "AttentionFn",
    "Hypothesis",
    "ReorderFn",
    "StepFn",
    "beam_candidates",
    "beam_search",
    "greedy_search",
    "sample",
]

State = TypeVar("State")
StepFn = Callable[[Tensor, State], tuple[Tensor, State]]
"""``step(prefix (N, t+1), state) -> (log_probs (N, V), state)``."""
ReorderFn = Callable[[State, Tensor], State]
"""``reorder(state, index (M,)) -> state`` with the rows ``index`` of ``state``."""
AttentionFn = Callable[[State], Tensor]
"""``attention(state) -> (N, S)`` cross-attention weights of the last step."""

_NEG_INF = -math.inf


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


# ---------------------------------------------------------------------------------------------
# Shared rules: option checks and the log-prob constraints every search applies


def _check_options(
    *, batch_size: int, min_len: int, no_repeat_ngram: int, len_penalty: float
) -> None:
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    if min_len < 0:
        raise UserError(f"decoding.min_len must be >= 0, got {min_len}")
    if no_repeat_ngram < 0:
        raise UserError(f"decoding.no_repeat_ngram must be >= 0, got {no_repeat_ngram}")
    if not math.isfinite(len_penalty):
        raise UserError(f"decoding.len_penalty must be a finite number, got {len_penalty}")


def _max_lens_tensor(max_lens: Tensor | int, batch_size: int, device: torch.device) -> Tensor:
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


def _device(max_lens: Tensor | int, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return max_lens.device if isinstance(max_lens, Tensor) else torch.device("cpu")


def _ngram_ban(prefix: Tensor, n: int, vocab_size: int) -> Tensor | None:
    """Tokens that would repeat an n-gram of ``prefix`` (BOS included, as fairseq does).

    Args:
        prefix: (N, L) token ids, BOS first.
        n: n-gram size (>= 1).
        vocab_size: V.

    Returns:
        (N, V) bool, True where the token would complete an n-gram already in the row; None when
        the prefix is shorter than n (nothing can repeat yet).
    """
    rows, length = prefix.shape
    if length < n:
        return None
    grams = prefix.unfold(1, n, 1)  # (N, L-n+1, n) every n-gram of the prefix
    key = prefix[:, length - n + 1 :]  # (N, n-1) the last n-1 tokens
    match = (grams[:, :, :-1] == key[:, None, :]).all(-1)  # (N, L-n+1) n-grams starting like key
    banned = grams[:, :, -1].masked_fill(~match, vocab_size)  # (N, L-n+1); V = "no ban" column
    ban = torch.zeros(rows, vocab_size + 1, dtype=torch.bool, device=prefix.device)
    ban.scatter_(1, banned, True)
    return ban[:, :vocab_size]  # (N, V)


def _constrain(
    log_probs: Tensor,
    prefix: Tensor,
    max_lens: Tensor,
    *,
    eos_id: int,
    pad_id: int,
    bos_id: int,
    min_len: int,
    no_repeat_ngram: int,
    unk_id: int | None,
    unk_penalty: float,
    extra: StepRules | None = None,
    generated: int | Tensor | None = None,
) -> Tensor:
    """Apply the search rules to one step's log-probabilities (a new tensor; input untouched).

    In fairseq's order: NaN -> -inf; pad and BOS never chosen (BOS only starts a prefix); ``unk_penalty`` subtracted from unk;
    n-gram repeats -> -inf; EOS forbidden while fewer than ``min_len`` tokens were generated;
    rows at their max length may only emit EOS. The forced EOS wins over ``min_len`` (fairseq
    would leave no token at all there; it asserts ``min_len <= max_len`` instead). Then the
    constraint rules of ``extra`` (seq2seq.decode.constraints): banned tokens (avoid) -> -inf, EOS
    -inf in rows whose constraints are not met yet, and a row with a forced prefix token may
    only take that token, at log-prob 0 (the prefix is given, not scored).

    Beam and greedy search mostly skip this function (:func:`_fused_columns` applies the same
    rules to a few columns per row): a rule added here must be added to
    :func:`_constrain_columns` too, or make :func:`_fused_columns` return None when it applies.

    Args:
        log_probs: (N, V) from the step function; half precision is promoted to float32.
        prefix: (N, t+1) tokens so far, BOS first.
        max_lens: (N,) max length (EOS included) of each row's sentence.
        extra: the constraint rules of this step, or None.
        generated: tokens generated so far (BOS not counted): an int for every row, or (N,)
            per row (a search whose rows started at different steps, seq2seq.decode.continuous);
            None: ``prefix.size(1) - 1``.

    Returns:
        (N, V) constrained log-probabilities.
    """
    if log_probs.dtype in (torch.float16, torch.bfloat16):
        log_probs = log_probs.float()
    # (N, V), a copy; one pass (masked_fill(isnan()) takes three, and was 6% of a beam search)
    lp = torch.nan_to_num(log_probs, nan=_NEG_INF, posinf=math.inf, neginf=_NEG_INF)
    vocab_size = lp.size(1)
    lp[:, pad_id] = _NEG_INF
    if bos_id != eos_id:
        lp[:, bos_id] = _NEG_INF
    if unk_id is not None and unk_penalty:
        lp[:, unk_id] -= unk_penalty
    if no_repeat_ngram > 0:
        ban = _ngram_ban(prefix, no_repeat_ngram, vocab_size)
        if ban is not None:
            lp = lp.masked_fill(ban, _NEG_INF)
    if generated is None:
        generated = prefix.size(1) - 1
    eos_lp = lp[:, eos_id].clone()  # (N,) kept for the forced rows
    if isinstance(generated, Tensor):
        lp[:, eos_id] = lp[:, eos_id].masked_fill(generated < min_len, _NEG_INF)
    elif generated < min_len:
        lp[:, eos_id] = _NEG_INF
    forced = generated + 1 >= max_lens  # (N,) the next token is the last allowed one
    if bool(forced.any()):
        only_eos = torch.full_like(lp, _NEG_INF)
        only_eos[:, eos_id] = eos_lp
        lp = torch.where(forced[:, None], only_eos, lp)
    if extra is not None:
        if extra.banned is not None:
            ban = torch.zeros(lp.size(0), vocab_size + 1, dtype=torch.bool, device=lp.device)
            ban.scatter_(1, extra.banned.masked_fill(extra.banned < 0, vocab_size), True)
            lp = lp.masked_fill(ban[:, :vocab_size], _NEG_INF)
        if extra.eos_blocked is not None:
            lp[:, eos_id] = lp[:, eos_id].masked_fill(extra.eos_blocked, _NEG_INF)
        if extra.forced is not None:
            rows = extra.forced >= 0  # (N,)
            if bool(rows.any()):
                one = torch.full_like(lp, _NEG_INF)
                one.scatter_(1, extra.forced.clamp(min=0)[:, None], 0.0)
                lp = torch.where(rows[:, None], one, lp)
    return lp


_FUSED_MIN_VOCAB = 64
"""Vocabularies at least this large (and at least 4 * beam + 8) take the fused candidate path."""


def _constrain_columns(
    vals: Tensor,
    toks: Tensor,
    generated: int | Tensor,
    max_lens: Tensor,
    *,
    eos_id: int,
    pad_id: int,
    bos_id: int,
    min_len: int,
    unk_id: int | None,
    unk_penalty: float,
    extra: StepRules | None = None,
) -> Tensor:
    """:func:`_constrain`'s rules (but the n-gram ban and forced prefix tokens) on some columns.

    Args:
        vals: (N, C) log-probs of the tokens ``toks`` (N, C), no NaN.
        generated: tokens generated so far (BOS not counted), for every row or (N,) per row.
        max_lens: (N,) max length of each row's sentence.
        extra: the constraint rules (banned tokens, blocked EOS); ``forced`` must be unset.

    Returns:
        (N, C) the constrained values: exactly what :func:`_constrain` gives those tokens.
    """
    banned = toks == pad_id
    if bos_id != eos_id:
        banned |= toks == bos_id
    vals = vals.masked_fill(banned, _NEG_INF)
    if unk_id is not None and unk_penalty:
        vals = torch.where(toks == unk_id, vals - unk_penalty, vals)
    is_eos = toks == eos_id  # (N, C)
    forced = generated + 1 >= max_lens  # (N,)
    if isinstance(generated, Tensor):  # per row; the forced EOS wins over min_len
        vals = vals.masked_fill(is_eos & ((generated < min_len) & ~forced)[:, None], _NEG_INF)
    elif generated < min_len:  # the forced EOS (the pre-min_len value) wins over min_len
        vals = vals.masked_fill(is_eos & ~forced[:, None], _NEG_INF)
    if bool(forced.any()):
        vals = vals.masked_fill(forced[:, None] & ~is_eos, _NEG_INF)
    if extra is not None:
        if extra.banned is not None:
            hit = (toks[:, :, None] == extra.banned[:, None, :]).any(-1)  # (N, C)
            vals = vals.masked_fill(hit, _NEG_INF)
        if extra.eos_blocked is not None:
            vals = vals.masked_fill(is_eos & extra.eos_blocked[:, None], _NEG_INF)
    return vals


def _fused_columns(
    log_probs: Tensor,
    n_best: int,
    generated: int | Tensor,
    max_lens: Tensor,
    *,
    eos_id: int,
    pad_id: int,
    bos_id: int,
    min_len: int,
    no_repeat_ngram: int,
    unk_id: int | None,
    unk_penalty: float,
    extra: StepRules | None = None,
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Each row's columns that can hold its ``n_best`` best constrained log-probs.

    Those are among the row's ``n_best + 4 + A`` best raw log-probs (the rules lower at most pad,
    BOS, EOS, unk and the A tokens ``extra`` bans) plus EOS and unk themselves (the rules may raise them: a forced EOS, a
    negative unk penalty), taken as extra columns and removed from the top-k part. One top-k
    reads the (N, V) matrix once, where :func:`_constrain` writes a copy of it.

    Returns:
        (vals, toks, outside): the constrained log-probs (N, C) of the tokens ``toks`` (N, C),
        in float32 or wider, and (N,) a bound on the constrained log-prob of every other
        token of the row (the smallest raw log-prob of the top-k part; -inf in rows where only
        EOS is allowed); or None when the exact path must run: a NaN in the step's output (it
        ranks first in a top-k), an n-gram ban (any number of tokens per row), a forced prefix
        token (maybe outside the columns), or a small vocabulary.
    """
    rows, V = log_probs.shape
    k = n_best + 4
    if extra is not None:
        if extra.forced is not None and bool((extra.forced >= 0).any()):
            return None
        if extra.banned is not None:
            k += extra.banned.size(1)
    if no_repeat_ngram > 0 or V < max(_FUSED_MIN_VOCAB, 2 * k):
        return None
    vals, toks = log_probs.topk(k, dim=1)  # (N, k) one read of the (N, V) matrix
    if bool(vals.isnan().any()):
        return None
    outside = vals[:, -1]
    extra_cols = [eos_id]
    if unk_id is not None and unk_penalty and unk_id != eos_id:
        extra_cols.append(unk_id)
    extra_ids = torch.tensor(extra_cols, device=toks.device)  # (E,)
    dup = (toks[:, :, None] == extra_ids).any(-1)  # (N, k) taken as extra columns instead
    toks = torch.cat([toks.masked_fill(dup, pad_id), extra_ids.expand(rows, -1)], 1)
    vals = torch.cat([vals.masked_fill(dup, _NEG_INF), log_probs[:, extra_cols]], 1)
    if vals.dtype in (torch.float16, torch.bfloat16):
        vals, outside = vals.float(), outside.float()
    vals = _constrain_columns(
        vals,
        toks,
        generated,
        max_lens,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        min_len=min_len,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
        extra=extra,
    )  # (N, C)
    outside = outside.masked_fill(generated + 1 >= max_lens, _NEG_INF)  # forced rows: EOS only
    return vals, toks, outside


def _greedy_pick(
    log_probs: Tensor,
    prefix: Tensor,
    max_lens: Tensor,
    **rules: object,
) -> tuple[Tensor, Tensor] | None:
    """Greedy's token (N,) and its constrained log-prob (N,) without :func:`_constrain`'s copy.

    The same token as ``argmax`` of the constrained row (the lowest id among equal maxima),
    or None (the exact path runs) when a row's maximum could tie with a token outside the
    columns looked at, or a row has no finite entry (it ends with EOS on the exact path).
    """
    fused = _fused_columns(log_probs, 1, prefix.size(1) - 1, max_lens, **rules)  # type: ignore[arg-type]
    if fused is None:
        return None
    vals, toks, outside = fused
    best = vals.max(dim=1).values  # (N,)
    if not bool((outside < best).all()):  # a tie outside the columns, or a dead row
        return None
    tok = toks.masked_fill(vals != best[:, None], log_probs.size(1)).min(dim=1).values
    return tok, best


def beam_candidates(
    log_probs: Tensor,
    prefix: Tensor,
    max_lens: Tensor,
    scores: Tensor,
    *,
    beam_size: int,
    eos_id: int,
    pad_id: int,
    bos_id: int,
    min_len: int,
    no_repeat_ngram: int,
    unk_id: int | None,
    unk_penalty: float,
    extra: StepRules | None = None,
    generated: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The best 2K (beam, token) continuations of each sentence, by cumulative log-prob.

    The exact definition: :func:`_constrain` the step's log-probs, add each beam's score, take
    the top 2K of each sentence's K * V continuations. That reads and writes the whole (N, V)
    matrix three times (NaN guard, score add, top-k) and allocates two copies of it. The fused
    path reads it once: a beam's continuations that can reach its sentence's top 2K are among
    its own 2K + 4 best raw log-probs (the 4: pad, BOS, EOS and unk, the only tokens the rules
    move) plus EOS and unk, taken as extra columns. So it takes a per-row top-(2K + 4), applies
    the rules to those columns only (:func:`_constrain_columns`) and picks the 2K best of the
    small (Ba, K * (2K + 6)) matrix. The candidate values are the same floating-point sums as
    the exact path's; only the order among exactly equal scores may differ (top-k ties are
    unordered in both). NaN anywhere in a row shows in its top-k (NaN ranks first), and such a
    step, an n-gram ban, or a small vocabulary takes the exact path.

    Args:
        log_probs: (N, V) from the step function, N = Ba * K (not modified).
        prefix: (N, t+1) tokens so far, BOS first.
        max_lens: (N,) max length of each row's sentence.
        scores: (N,) cumulative log-prob of each beam (-inf for dead beams).
        extra: the constraint rules of this step (prefix, avoid, blocked EOS), or None.
        generated: (N,) tokens each row generated so far, where rows started at different
            steps (seq2seq.decode.continuous; ``prefix`` is then left-padded and the n-gram ban
            must be off); None: ``prefix.size(1) - 1`` for every row.

    Returns:
        (cand_scores, cand_beam, cand_tok, cand_lp), each (Ba, n_cand) with n_cand =
        min(2K, K * V), best first: the cumulative score, the beam (0..K-1) within the
        sentence, the token, and the token's own constrained log-prob.
    """
    K = beam_size
    rows, V = log_probs.shape
    Ba = rows // K
    n_cand = min(2 * K, K * V)
    if generated is None:
        generated_rows: int | Tensor = prefix.size(1) - 1
    elif no_repeat_ngram > 0:
        raise ValueError("per-row generated counts need no_repeat_ngram = 0")
    else:
        generated_rows = generated
    fused = _fused_columns(
        log_probs,
        n_cand,
        generated_rows,
        max_lens,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
        extra=extra,
    )
    if fused is not None:
        vals, toks, _ = fused  # (N, C) each
        C = vals.size(1)
        cum = (scores.to(vals.dtype)[:, None] + vals).view(Ba, K * C)
        cand_scores, pos = cum.topk(n_cand, dim=1)  # (Ba, 2K)
        cand_tok = toks.view(Ba, K * C).gather(1, pos)
        cand_lp = vals.view(Ba, K * C).gather(1, pos)
        return cand_scores, pos // C, cand_tok, cand_lp
    lp = _constrain(
        log_probs,
        prefix,
        max_lens,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
        extra=extra,
        generated=generated_rows,
    )  # (N, V)
    cum = (scores.to(lp.dtype)[:, None] + lp).view(Ba, K * V)  # (Ba, K*V)
    cand_scores, cand_idx = cum.topk(n_cand, dim=1)  # (Ba, 2K), best first
    cand_lp = lp.view(Ba, K * V).gather(1, cand_idx)  # (Ba, 2K)
    return cand_scores, cand_idx // V, cand_idx % V, cand_lp


def _dba_candidates(
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
    :func:`_constrain` and of ``cstate``) plus the tokens that advance one of its constraints
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
    fused = _fused_columns(log_probs, M, generated, max_lens, **rules, extra=extra)
    nxt = cstate.next_tokens()  # (N, P), -1: none
    if fused is not None:
        vals, toks, _ = fused
        vals, pos = vals.topk(M, dim=1)  # (N, M) the row's M best constrained tokens
        toks = toks.gather(1, pos)
        nxt_vals = torch.nan_to_num(
            log_probs.gather(1, nxt.clamp(min=0)).to(vals.dtype), nan=_NEG_INF
        )
        rule_args = {k: v for k, v in rules.items() if k != "no_repeat_ngram"}
        nxt_vals = _constrain_columns(
            nxt_vals, nxt.clamp(min=0), generated, max_lens, **rule_args, extra=extra
        )
    else:
        lp = _constrain(log_probs, prefix, max_lens, **rules, extra=extra)  # (N, V)
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


# ---------------------------------------------------------------------------------------------
# Constraints: the start state, the length limit, the one-pass prefix


def _start_constraints(
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


def _prefix_pass(
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


# ---------------------------------------------------------------------------------------------
# Beam search


def beam_search(
    step: StepFn,
    reorder: ReorderFn,
    state: State,
    *,
    batch_size: int,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_lens: Tensor | int,
    min_len: int = 1,
    len_penalty: float = 1.0,
    nbest: int = 1,
    no_repeat_ngram: int = 0,
    unk_id: int | None = None,
    unk_penalty: float = 0.0,
    attention: AttentionFn | None = None,
    device: torch.device | str | None = None,
    constraints: Sequence[Constraints] | None = None,
) -> list[list[Hypothesis]]:
    """Beam search with fairseq's ``SequenceGenerator`` semantics, vectorized over sentences.

    Each step takes, per sentence, the top 2K (beam, token) continuations by cumulative
    log-probability. Those ending in EOS among the first K are finalized, with score
    ``cumulative / len ** len_penalty`` (len = generated tokens including EOS, BOS not counted);
    the first K continuations that do not end in EOS form the next beams. A sentence is finished
    once K hypotheses were finalized (extra EOS candidates of that step, lower in cumulative
    score, are dropped, as in fairseq) or when it reaches its max length; its rows are then
    dropped through ``reorder``. The returned n-best are the finalized hypotheses sorted by
    normalized score. The length penalty therefore only ranks finalized hypotheses; it never
    changes which ones are found (fairseq behaves the same).

    Other rules (fairseq's): the pad token is never produced; ``unk_penalty`` is subtracted from
    the unk token's log-prob and that penalized value is what enters the score; EOS is forbidden
    while fewer than ``min_len`` tokens were generated (1: no empty output); with
    ``no_repeat_ngram`` = n > 0 a token that would complete an n-gram already present in the
    hypothesis is forbidden, where the hypothesis includes the start token (so with n = 1 the
    BOS token itself can never be produced; with n >= 2 n-grams starting at BOS never repeat).

    Departures from fairseq:
        - ``max_lens`` counts EOS: a hypothesis has at most ``max_len`` tokens including EOS
          (EOS is forced when ``max_len - 1`` tokens were generated). fairseq's ``max_len`` counts
          the tokens before EOS. Each sentence has its own max length (fairseq: one per batch).
        - Where the forced EOS and ``min_len`` conflict, the forced EOS wins.
        - Candidates of score -inf are never finalized, and EOS never continues a beam (fairseq
          may carry a -inf EOS candidate as a dead beam). A sentence whose hypotheses all have
          probability zero returns fewer than ``nbest`` hypotheses (possibly none).

    Args:
        step: the step function (see the module docstring).
        reorder: selects rows of the state.
        state: the initial state, one row per sentence (B rows); expanded here to B*K rows with
            ``reorder(state, arange(B).repeat_interleave(K))``, beams of a sentence adjacent.
        batch_size: B.
        beam_size: K.
        bos_id: the start token placed at ``prefix[:, 0]``.
        eos_id: the end-of-sentence token.
        pad_id: the padding token (never generated).
        max_lens: (B,) or an int: max hypothesis length per sentence, EOS included
            (callers compute ``max_len_a * src_len + max_len_b``); floats are floored.
        min_len: EOS is forbidden while fewer than this many tokens were generated.
        len_penalty: exponent of the length normalization (0: unnormalized sum).
        nbest: hypotheses returned per sentence (<= beam_size).
        no_repeat_ngram: n-gram size that may not repeat (0: off).
        unk_id: the unknown token, for ``unk_penalty``.
        unk_penalty: subtracted from the unk token's log-prob (positive: fewer unks).
        attention: optional ``attention(state) -> (N, S)``; collects per-hypothesis attention.
        device: where the prefix and bookkeeping tensors live; defaults to ``max_lens.device``
            when ``max_lens`` is a tensor, else the CPU. Must be the model's device.
        constraints: per sentence, a :class:`~seq2seq.decode.constraints.Constraints` (prefix,
            ``include`` phrases, avoided phrases), or None. See :func:`_start_constraints` for
            the prefix and the length limit; ``include`` phrases switch candidate selection
            to dynamic beam allocation (:func:`_dba_candidates`): a hypothesis may only end
            once it holds every phrase.

    Returns:
        Per sentence, up to ``nbest`` hypotheses, best normalized score first.
    """
    _check_options(
        batch_size=batch_size,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
    )
    if beam_size < 1:
        raise UserError(f"decoding.beam_size must be >= 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise UserError(
            f"decoding.nbest must be between 1 and beam_size ({beam_size}), got {nbest}"
        )
    dev = _device(max_lens, device)
    max_lens = _max_lens_tensor(max_lens, batch_size, dev)  # (B,)
    if batch_size == 0:
        return []
    K = beam_size
    cstate, max_lens = _start_constraints(
        constraints, max_lens, dev, no_repeat_ngram=no_repeat_ngram
    )
    max_len_list = max_lens.tolist()
    expand = torch.arange(batch_size, device=dev).repeat_interleave(K)  # (B*K,)

    alive = torch.arange(batch_size, device=dev)  # (Ba,) sentence id of each live sentence
    alive_list = alive.tolist()
    # Cumulative log-prob per beam. All K beams start identical; only beam 0 is live at first
    # (the others at -inf), which is fairseq's "use only the first beam at step 0".
    scores = torch.full((batch_size, K), _NEG_INF, device=dev)
    scores[:, 0] = 0.0
    scores = scores.view(-1)  # (N,)
    finalized: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    plen = [0] * batch_size if cstate is None else cstate.prefix_list

    first = _prefix_pass(step, state, cstate, bos_id=bos_id, device=dev, attention=attention)
    if first is None:
        state = reorder(state, expand)  # N = B*K
        tokens = torch.full((batch_size * K, 1), bos_id, dtype=torch.long, device=dev)
        pending = None
        t0 = 0
    else:  # the prefix tokens every sentence has went through the model once, on B rows
        tokens, pending, step_attn0, state, cstate = first
        state = reorder(state, expand)
        tokens, pending = tokens[expand], pending[expand]
        step_attn0 = None if step_attn0 is None else step_attn0[expand]
        t0 = tokens.size(1) - 1
    if cstate is not None:
        cstate = cstate.reorder(expand)
    token_scores = torch.zeros((batch_size * K, t0), device=dev)  # (N, t), prefix: 0
    attn: Tensor | None = None  # (N, t, S)

    for t in range(t0, int(max_lens.max())):
        if pending is not None:
            log_probs, pending = pending, None
            step_attn = step_attn0
        else:
            log_probs, state = step(tokens, state)  # (N, V)
            step_attn = attention(state) if attention is not None else None  # (N, S)
        Ba = len(alive_list)
        if step_attn is not None and attn is None:  # no attention for the one-pass prefix
            attn = step_attn.new_zeros((step_attn.size(0), t0, step_attn.size(1)))

        # Candidates: the best 2K (beam, token) continuations of each sentence.
        rules = dict(
            eos_id=eos_id,
            pad_id=pad_id,
            bos_id=bos_id,
            min_len=min_len,
            no_repeat_ngram=no_repeat_ngram,
            unk_id=unk_id,
            unk_penalty=unk_penalty,
        )
        row_max = max_lens[alive].repeat_interleave(K)  # (N,)
        if cstate is not None and cstate.has_include:
            cand_scores, cand_beam, cand_tok, cand_lp = _dba_candidates(
                log_probs, tokens, row_max, scores, cstate, beam_size=K, rules=rules
            )  # each (Ba, 2K), in allocation order
        else:
            extra = None if cstate is None else cstate.rules(t)
            cand_scores, cand_beam, cand_tok, cand_lp = beam_candidates(
                log_probs, tokens, row_max, scores, beam_size=K, **rules, extra=extra
            )  # each (Ba, 2K), best first; cand_lp is the token's own (constrained) log-prob
        n_cand = cand_scores.size(1)
        scores = scores.to(cand_lp.dtype)
        token_scores = token_scores.to(cand_lp.dtype)
        cand_rows = cand_beam + (torch.arange(Ba, device=dev) * K)[:, None]  # (Ba, 2K) in N
        is_eos = cand_tok == eos_id  # (Ba, 2K)

        # Finalize EOS candidates among the first K (bookkeeping only: one loop over them).
        fin = is_eos[:, :K] & cand_scores[:, :K].isfinite()  # (Ba, K)
        if bool(fin.any()):
            s_idx, c_idx = fin.nonzero(as_tuple=True)  # (F,), (F,) in rank order per sentence
            rows = cand_rows[s_idx, c_idx]  # (F,)
            hyp_tokens = tokens[rows, 1:].tolist()  # F x t
            hyp_token_scores = torch.cat(
                [token_scores[rows], cand_lp[s_idx, c_idx, None]], dim=1
            ).tolist()  # F x (t+1)
            denom = torch.tensor(
                [(t + 1 - plen[alive_list[a]]) ** len_penalty for a in s_idx.tolist()],
                dtype=cand_scores.dtype,
                device=dev,
            )  # (F,) the prefix is given, not scored: its tokens do not count
            hyp_scores = (cand_scores[s_idx, c_idx] / denom).tolist()
            hyp_attn = None
            if attn is not None and step_attn is not None:
                hyp_attn = torch.cat(
                    [attn[rows], step_attn[rows, None]], dim=1
                ).cpu()  # (F, t+1, S)
            for i, a in enumerate(s_idx.tolist()):
                sent = alive_list[a]
                if len(finalized[sent]) < K:
                    finalized[sent].append(
                        Hypothesis(
                            tokens=hyp_tokens[i] + [eos_id],
                            score=hyp_scores[i],
                            token_scores=hyp_token_scores[i],
                            attention=None if hyp_attn is None else hyp_attn[i],
                            prefix_len=plen[sent],
                        )
                    )
        done = [len(finalized[s]) >= K or t + 1 >= max_len_list[s] for s in alive_list]

        # Next beams: the first K candidates (in rank order) that do not end in EOS. Should
        # fewer than K exist (tiny vocabularies), EOS candidates fill in as dead (-inf) beams.
        rank_key = torch.arange(n_cand, device=dev) + is_eos * n_cand  # (Ba, 2K)
        sel = rank_key.topk(K, dim=1, largest=False).indices  # (Ba, K)
        new_rows = cand_rows.gather(1, sel)  # (Ba, K)
        new_tok = cand_tok.gather(1, sel)  # (Ba, K)
        new_lp = cand_lp.gather(1, sel)  # (Ba, K)
        new_scores = cand_scores.gather(1, sel).masked_fill(is_eos.gather(1, sel), _NEG_INF)

        if any(done):  # drop finished sentences: their rows leave the state
            keep_list = [i for i, d in enumerate(done) if not d]
            if not keep_list:
                break
            keep = torch.tensor(keep_list, device=dev)  # (Ba',)
            new_rows, new_tok, new_lp, new_scores = (
                new_rows[keep],
                new_tok[keep],
                new_lp[keep],
                new_scores[keep],
            )
            alive = alive[keep]
            alive_list = [alive_list[i] for i in keep_list]

        new_rows = new_rows.reshape(-1)  # (N',)
        tokens = torch.cat([tokens[new_rows], new_tok.reshape(-1, 1)], dim=1)  # (N', t+2)
        token_scores = torch.cat([token_scores[new_rows], new_lp.reshape(-1, 1)], dim=1)
        scores = new_scores.reshape(-1)  # (N',)
        if attn is not None and step_attn is not None:
            attn = torch.cat([attn[new_rows], step_attn[new_rows, None]], dim=1)  # (N', t+1, S)
        state = reorder(state, new_rows)
        if cstate is not None:
            cstate = cstate.reorder(new_rows).advance(new_tok.reshape(-1))

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finalized]


# ---------------------------------------------------------------------------------------------
# One hypothesis per sentence: greedy and sampling


def _decode_one_each(
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
    argmax (greedy search), which mostly runs without the (N, V) copy (:func:`_greedy_pick`).
    ``constraints``: prefixes and avoided phrases (``include`` phrases need beam search).
    """
    dev = max_lens.device
    if constraints is not None and any(c.include for c in constraints):
        raise UserError("positive constraints need beam search (or greedy: beam size 1)")
    cstate, max_lens = _start_constraints(
        constraints, max_lens, dev, no_repeat_ngram=no_repeat_ngram
    )
    plen = [0] * batch_size if cstate is None else cstate.prefix_list
    results: list[Hypothesis | None] = [None] * batch_size
    alive = torch.arange(batch_size, device=dev)  # (N,) sentence id of each row
    first = _prefix_pass(step, state, cstate, bos_id=bos_id, device=dev, attention=attention)
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
            lp = _constrain(log_probs, tokens, max_lens[alive], **rules, extra=extra)  # (N, V)
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
        step, reorder, state: as in :func:`beam_search` (``state`` has B rows, not expanded).
        batch_size: B.
        bos_id, eos_id, pad_id: special tokens.
        max_lens: (B,) or int, max length per sentence including EOS.
        min_len: EOS is forbidden while fewer than this many tokens were generated.
        len_penalty: exponent of the score's length normalization.
        no_repeat_ngram: n-gram size that may not repeat (0: off; BOS counts).
        unk_id, unk_penalty: subtract ``unk_penalty`` from the unk token's log-prob.
        attention: optional ``attention(state) -> (N, S)``.
        device: device of the prefix tensors (default: ``max_lens.device`` or the CPU).
        constraints: per sentence, a forced prefix and avoided phrases (see
            :func:`beam_search`); ``include`` phrases need beam search (a UserError here).

    Returns:
        One hypothesis per sentence, in input order.
    """
    _check_options(
        batch_size=batch_size,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
    )
    dev = _device(max_lens, device)
    max_lens = _max_lens_tensor(max_lens, batch_size, dev)
    if batch_size == 0:
        return []
    return _decode_one_each(
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
        step, reorder, state: as in :func:`greedy_search`.
        batch_size: B.
        bos_id, eos_id, pad_id: special tokens.
        max_lens: (B,) or int, max length per sentence including EOS.
        temperature: > 0; below 1 sharpens, above 1 flattens.
        top_k: sample among the k best tokens only (0: all).
        top_p: sample from the smallest set of best tokens with this much mass (1: all).
        seed: seed of the generator.
        min_len, len_penalty, no_repeat_ngram, unk_id, unk_penalty, attention, device,
            constraints: as in :func:`greedy_search`.

    Returns:
        One hypothesis per sentence, in input order.
    """
    _check_options(
        batch_size=batch_size,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
    )
    if not temperature > 0:
        raise UserError(f"decoding.temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise UserError(f"decoding.top_k must be >= 0, got {top_k}")
    if not 0 < top_p <= 1:
        raise UserError(f"decoding.top_p must be in (0, 1], got {top_p}")
    dev = _device(max_lens, device)
    max_lens = _max_lens_tensor(max_lens, batch_size, dev)
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

    return _decode_one_each(
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

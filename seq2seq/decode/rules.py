"""The rules every search applies to a step's log-probabilities, in fairseq's order: pad and
BOS never chosen, the unk penalty, n-gram repeats banned, EOS forbidden before ``min_len`` and
forced at the max length, then a step's constraint rules
(:class:`~seq2seq.decode.constraints.StepRules`: forced prefix tokens, banned tokens, blocked
EOS).

:func:`constrain` is the definition, over the whole (N, V) matrix. :func:`fused_columns` gives
the same values for the few columns per row a search can pick from, reading the matrix once
(beam and greedy search take that path when it applies).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from seq2seq.decode.constraints import StepRules

__all__ = ["constrain", "constrain_columns", "fused_columns"]

_NEG_INF = -math.inf


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


def constrain(
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

    In fairseq's order: NaN -> -inf; pad and BOS never chosen (BOS only starts a prefix);
    ``unk_penalty`` subtracted from unk; n-gram repeats -> -inf; EOS forbidden while fewer than
    ``min_len`` tokens were generated; rows at their max length may only emit EOS. The forced
    EOS wins over ``min_len`` (fairseq would leave no token at all there; it asserts ``min_len
    <= max_len`` instead). Then the constraint rules of ``extra`` (seq2seq.decode.constraints):
    banned tokens (avoid) -> -inf, EOS -inf in rows whose constraints are not met yet, and a
    row with a forced prefix token may only take that token, at log-prob 0 (the prefix is
    given, not scored).

    Beam and greedy search mostly skip this function (:func:`fused_columns` applies the same
    rules to a few columns per row): a rule added here must be added to
    :func:`constrain_columns` too, or make :func:`fused_columns` return None when it applies.

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
    # (N, V), a copy; one pass over the matrix (masked_fill(isnan()) takes three)
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


def constrain_columns(
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
    """:func:`constrain`'s rules (but the n-gram ban and forced prefix tokens) on some columns.

    Args:
        vals: (N, C) log-probs of the tokens ``toks`` (N, C), no NaN.
        generated: tokens generated so far (BOS not counted), for every row or (N,) per row.
        max_lens: (N,) max length of each row's sentence.
        extra: the constraint rules (banned tokens, blocked EOS); ``forced`` must be unset.

    Returns:
        (N, C) the constrained values: exactly what :func:`constrain` gives those tokens.
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


def fused_columns(
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
    BOS, EOS, unk and the A tokens ``extra`` bans) plus EOS and unk themselves (the rules may
    raise them: a forced EOS, a negative unk penalty), taken as extra columns and removed from
    the top-k part. One top-k
    reads the (N, V) matrix once, where :func:`constrain` writes a copy of it.

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
    vals = constrain_columns(
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

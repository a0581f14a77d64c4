"""Beam search with fairseq's ``SequenceGenerator`` semantics, vectorized over sentences, and
its candidates (the best 2K continuations of each sentence at one step).

:func:`beam_search` reads as its steps: start the beams (``_start``), then at each step run
the model (``_model_step``), take the candidates (``_candidates``), finalize those that end in
EOS (``_finalize``), pick the next beams (``_next_beams``), drop the finished sentences
(``_keep_sentences``) and move every row along (``_advance``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from seq2seq.decode.constrained_search import dba_candidates, prefix_pass, start_constraints
from seq2seq.decode.constraints import Constraints, ConstraintState, StepRules
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

__all__ = ["beam_candidates", "beam_search"]

_NEG_INF = -math.inf


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

    The exact definition: :func:`constrain` the step's log-probs, add each beam's score, take
    the top 2K of each sentence's K * V continuations. That reads and writes the whole (N, V)
    matrix three times (NaN guard, score add, top-k) and allocates two copies of it. The fused
    path reads it once: a beam's continuations that can reach its sentence's top 2K are among
    its own 2K + 4 best raw log-probs (the 4: pad, BOS, EOS and unk, the only tokens the rules
    move) plus EOS and unk, taken as extra columns. So it takes a per-row top-(2K + 4), applies
    the rules to those columns only (:func:`constrain_columns`) and picks the 2K best of the
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
    fused = fused_columns(
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
    lp = constrain(
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
            ``include`` phrases, avoided phrases), or None. See :func:`start_constraints` for
            the prefix and the length limit; ``include`` phrases switch candidate selection
            to dynamic beam allocation (:func:`dba_candidates`): a hypothesis may only end
            once it holds every phrase.

    Returns:
        Per sentence, up to ``nbest`` hypotheses, best normalized score first.
    """
    check_options(
        batch_size,
        method="beam",
        beam_size=beam_size,
        nbest=nbest,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        len_penalty=len_penalty,
    )
    dev = search_device(max_lens, device)
    max_lens = max_lens_tensor(max_lens, batch_size, dev)  # (B,)
    if batch_size == 0:
        return []
    K = beam_size
    cstate, max_lens = start_constraints(
        constraints, max_lens, dev, no_repeat_ngram=no_repeat_ngram
    )
    max_len_list = max_lens.tolist()
    finalized: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    plen = [0] * batch_size if cstate is None else cstate.given_list
    rules = dict(
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        min_len=min_len,
        no_repeat_ngram=no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=unk_penalty,
    )
    beams, pending = _start(
        step,
        reorder,
        state,
        cstate,
        batch_size=batch_size,
        beam_size=K,
        bos_id=bos_id,
        device=dev,
        attention=attention,
    )
    for t in range(beams.t0, int(max_lens.max())):
        log_probs, step_attn = _model_step(beams, pending, step, attention)
        pending = None
        row_max = max_lens[beams.alive].repeat_interleave(K)  # (N,)
        cand = _candidates(beams, log_probs, row_max, t, beam_size=K, rules=rules)
        beams.token_scores = beams.token_scores.to(cand.lp.dtype)
        _finalize(
            beams,
            cand,
            step_attn,
            finalized,
            t=t,
            beam_size=K,
            eos_id=eos_id,
            len_penalty=len_penalty,
            plen=plen,
        )
        done = [len(finalized[s]) >= K or t + 1 >= max_len_list[s] for s in beams.alive_list]
        nxt = _next_beams(cand, beam_size=K)
        if any(done):  # drop finished sentences: their rows leave the state
            keep_list = [i for i, d in enumerate(done) if not d]
            if not keep_list:
                break
            nxt = _keep_sentences(beams, nxt, keep_list)
        _advance(beams, nxt, step_attn, reorder)

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finalized]


@dataclass
class _Beams:
    """The live rows of a beam search: K beams for each sentence still decoded (N = Ba * K).

    Attributes:
        state: the model's state, N rows.
        tokens: (N, t+1) tokens so far, BOS first.
        token_scores: (N, t) each token's log-prob as it entered the score (0 for a prefix).
        scores: (N,) cumulative log-prob of each beam (-inf: a dead beam).
        alive: (Ba,) sentence id of each live sentence (``alive_list``: the same as a list).
        cstate: the constraint progress of each row, or None without constraints.
        attn: (N, t, S) cross-attention rows, once the step gives attention.
        t0: tokens of the prefix every sentence has (decoded before the first search step).
    """

    state: object
    tokens: Tensor
    token_scores: Tensor
    scores: Tensor
    alive: Tensor
    alive_list: list[int]
    cstate: ConstraintState | None
    attn: Tensor | None
    t0: int


class _Candidates(NamedTuple):
    """A step's candidates, (Ba, 2K) each, in rank order: cumulative score, row in N, token,
    the token's own constrained log-prob, and whether it is EOS."""

    scores: Tensor
    rows: Tensor
    tok: Tensor
    lp: Tensor
    is_eos: Tensor


class _Next(NamedTuple):
    """The next beams, (Ba, K) each: the row each continues, its new token, the token's
    log-prob, the new cumulative score."""

    rows: Tensor
    tok: Tensor
    lp: Tensor
    scores: Tensor


def _start(
    step: StepFn,
    reorder: ReorderFn,
    state: State,
    cstate: ConstraintState | None,
    *,
    batch_size: int,
    beam_size: int,
    bos_id: int,
    device: torch.device,
    attention: AttentionFn | None,
) -> tuple[_Beams, tuple[Tensor, Tensor | None] | None]:
    """The first beams (B sentences expanded to B*K rows, beams of a sentence adjacent), and
    the one-pass prefix step's (log_probs, attention) when a common prefix was decoded.

    All K beams start identical; only beam 0 is live at first (the others at -inf), which is
    fairseq's "use only the first beam at step 0".
    """
    K = beam_size
    expand = torch.arange(batch_size, device=device).repeat_interleave(K)  # (B*K,)
    alive = torch.arange(batch_size, device=device)  # (Ba,) sentence id of each live sentence
    scores = torch.full((batch_size, K), _NEG_INF, device=device)
    scores[:, 0] = 0.0
    first = prefix_pass(step, state, cstate, bos_id=bos_id, device=device, attention=attention)
    pending = None
    if first is None:
        state = reorder(state, expand)  # N = B*K
        tokens = torch.full((batch_size * K, 1), bos_id, dtype=torch.long, device=device)
    else:  # the prefix tokens every sentence has went through the model once, on B rows
        tokens, log_probs, step_attn, state, cstate = first
        state = reorder(state, expand)
        tokens = tokens[expand]
        pending = (log_probs[expand], None if step_attn is None else step_attn[expand])
    if cstate is not None:
        cstate = cstate.reorder(expand)
    t0 = tokens.size(1) - 1
    beams = _Beams(
        state=state,
        tokens=tokens,
        token_scores=torch.zeros((batch_size * K, t0), device=device),  # (N, t), prefix: 0
        scores=scores.view(-1),  # (N,)
        alive=alive,
        alive_list=alive.tolist(),
        cstate=cstate,
        attn=None,
        t0=t0,
    )
    return beams, pending


def _model_step(
    beams: _Beams,
    pending: tuple[Tensor, Tensor | None] | None,
    step: StepFn,
    attention: AttentionFn | None,
) -> tuple[Tensor, Tensor | None]:
    """This step's log-probs (N, V) and cross-attention (N, S) or None: what the one-pass
    prefix step gave (``pending``), else one call of the model (``beams.state`` moves on)."""
    if pending is not None:
        log_probs, step_attn = pending
    else:
        log_probs, beams.state = step(beams.tokens, beams.state)  # (N, V)
        step_attn = attention(beams.state) if attention is not None else None  # (N, S)
    if step_attn is not None and beams.attn is None:  # no attention for the one-pass prefix
        beams.attn = step_attn.new_zeros((step_attn.size(0), beams.t0, step_attn.size(1)))
    return log_probs, step_attn


def _candidates(
    beams: _Beams, log_probs: Tensor, row_max: Tensor, t: int, *, beam_size: int, rules: dict
) -> _Candidates:
    """The best 2K (beam, token) continuations of each sentence: by cumulative log-prob
    (:func:`beam_candidates`), or in dynamic beam allocation order under positive
    constraints (:func:`seq2seq.decode.constrained_search.dba_candidates`)."""
    K = beam_size
    cstate = beams.cstate
    if cstate is not None and cstate.has_include:
        cand_scores, cand_beam, cand_tok, cand_lp = dba_candidates(
            log_probs, beams.tokens, row_max, beams.scores, cstate, beam_size=K, rules=rules
        )
    else:
        extra = None if cstate is None else cstate.rules(t)
        cand_scores, cand_beam, cand_tok, cand_lp = beam_candidates(
            log_probs, beams.tokens, row_max, beams.scores, beam_size=K, **rules, extra=extra
        )
    Ba = len(beams.alive_list)
    rows = cand_beam + (torch.arange(Ba, device=cand_beam.device) * K)[:, None]  # (Ba, 2K) in N
    return _Candidates(cand_scores, rows, cand_tok, cand_lp, cand_tok == rules["eos_id"])


def _finalize(
    beams: _Beams,
    cand: _Candidates,
    step_attn: Tensor | None,
    finalized: list[list[Hypothesis]],
    *,
    t: int,
    beam_size: int,
    eos_id: int,
    len_penalty: float,
    plen: list[int],
) -> None:
    """Finalize the EOS candidates among the first K of each sentence (bookkeeping only: one
    loop over them), while the sentence has fewer than K hypotheses."""
    K = beam_size
    fin = cand.is_eos[:, :K] & cand.scores[:, :K].isfinite()  # (Ba, K)
    if not bool(fin.any()):
        return
    s_idx, c_idx = fin.nonzero(as_tuple=True)  # (F,), (F,) in rank order per sentence
    rows = cand.rows[s_idx, c_idx]  # (F,)
    hyp_tokens = beams.tokens[rows, 1:].tolist()  # F x t
    hyp_token_scores = torch.cat(
        [beams.token_scores[rows], cand.lp[s_idx, c_idx, None]], dim=1
    ).tolist()  # F x (t+1)
    alive_list = beams.alive_list
    denom = torch.tensor(
        [(t + 1 - plen[alive_list[a]]) ** len_penalty for a in s_idx.tolist()],
        dtype=cand.scores.dtype,
        device=cand.scores.device,
    )  # (F,) the prefix is given, not scored: its tokens do not count
    hyp_scores = (cand.scores[s_idx, c_idx] / denom).tolist()
    hyp_attn = None
    if beams.attn is not None and step_attn is not None:
        hyp_attn = torch.cat([beams.attn[rows], step_attn[rows, None]], dim=1).cpu()  # (F, t+1, S)
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


def _next_beams(cand: _Candidates, *, beam_size: int) -> _Next:
    """The first K candidates (in rank order) that do not end in EOS. Should fewer than K
    exist (tiny vocabularies), EOS candidates fill in as dead (-inf) beams."""
    n_cand = cand.scores.size(1)
    rank_key = torch.arange(n_cand, device=cand.scores.device) + cand.is_eos * n_cand  # (Ba, 2K)
    sel = rank_key.topk(beam_size, dim=1, largest=False).indices  # (Ba, K)
    return _Next(
        rows=cand.rows.gather(1, sel),
        tok=cand.tok.gather(1, sel),
        lp=cand.lp.gather(1, sel),
        scores=cand.scores.gather(1, sel).masked_fill(cand.is_eos.gather(1, sel), _NEG_INF),
    )


def _keep_sentences(beams: _Beams, nxt: _Next, keep_list: list[int]) -> _Next:
    """Only the sentences ``keep_list`` (indices into the live ones) go on."""
    keep = torch.tensor(keep_list, device=nxt.rows.device)  # (Ba',)
    beams.alive = beams.alive[keep]
    beams.alive_list = [beams.alive_list[i] for i in keep_list]
    return _Next(nxt.rows[keep], nxt.tok[keep], nxt.lp[keep], nxt.scores[keep])


def _advance(beams: _Beams, nxt: _Next, step_attn: Tensor | None, reorder: ReorderFn) -> None:
    """Every row continues the row it was chosen from with its new token: tokens, scores,
    attention, the model's state and the constraint state."""
    rows = nxt.rows.reshape(-1)  # (N',)
    new_tok = nxt.tok.reshape(-1)  # (N',)
    beams.tokens = torch.cat([beams.tokens[rows], new_tok[:, None]], dim=1)  # (N', t+2)
    beams.token_scores = torch.cat([beams.token_scores[rows], nxt.lp.reshape(-1, 1)], dim=1)
    beams.scores = nxt.scores.reshape(-1)  # (N',)
    if beams.attn is not None and step_attn is not None:
        beams.attn = torch.cat([beams.attn[rows], step_attn[rows, None]], dim=1)  # (N', t+1, S)
    beams.state = reorder(beams.state, rows)
    if beams.cstate is not None:
        beams.cstate = beams.cstate.reorder(rows).advance(new_tok)

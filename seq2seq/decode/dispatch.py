"""The one search dispatch every engine that runs seq2seq's own search shares: the method
:class:`~seq2seq.decode.options.SearchOptions` names, over an engine's step function.

Engines call it (torch, ONNX, ensembles: :func:`search_steps`; CTranslate2 only for the
sampled n-best, :func:`with_sampled_nbest`); it calls :mod:`seq2seq.decode.beam`,
:mod:`~seq2seq.decode.greedy` or :mod:`~seq2seq.decode.sampling`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from seq2seq.core import UserError
from seq2seq.decode.beam import beam_search
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.greedy import greedy_search
from seq2seq.decode.options import SearchOptions, max_target_lens
from seq2seq.decode.sampling import sample
from seq2seq.decode.search_base import Hypothesis

__all__ = ["run_search", "search_steps", "with_sampled_nbest"]


def run_search(
    step,
    reorder,
    state,
    src: list[list[int]],
    opts: SearchOptions,
    *,
    max_positions: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    unk_id: int,
    device: torch.device | None = None,
    attention: Callable | None = None,
    constraints: list[Constraints] | None = None,
) -> list[list[Hypothesis]]:
    """Run the search ``opts`` names over ``step``/``reorder`` from ``state`` (B rows).

    ``src`` only gives the source lengths (for the max length). Sampling with ``nbest`` > 1
    must be handled by the caller (replicate the rows), as the torch engine does.
    ``attention(state) -> (N, S)``: collect each hypothesis' cross-attention rows.

    ``constraints`` (per sentence, or None): prefixes and avoided phrases work with every
    method; include phrases need beam search (greedy runs as beam search with beam size 1;
    sampling is a UserError). A sentence's length limit is raised to fit its constraints
    (:meth:`Constraints.needed_len`); beyond the model's positions that is a UserError.
    """
    limits = max_target_lens([len(s) for s in src], opts, max_positions)
    if constraints is not None:
        if len(constraints) != len(src):
            raise ValueError(f"{len(constraints)} constraints for {len(src)} sentences")
        bans = opts.no_repeat_ngram > 0
        for c in constraints:
            if c.needed_len(bans=bans) > max_positions:
                raise UserError(
                    f"a prefix and constraints of {c.needed_len(bans=bans) - 1} tokens do "
                    f"not fit in the model's {max_positions} positions"
                )
        if any(c.include for c in constraints):
            if opts.method == "sample":
                raise UserError("positive constraints need beam search or greedy, not sampling")
            if opts.method == "greedy":
                opts = opts.replace(method="beam", beam_size=1, nbest=1)
    max_lens = torch.tensor(limits, device=device)  # (B,)
    common = dict(
        batch_size=len(src),
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        max_lens=max_lens,
        min_len=opts.min_len,
        len_penalty=opts.len_penalty,
        no_repeat_ngram=opts.no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=opts.unk_penalty,
        device=device,
        attention=attention,
        constraints=constraints,
    )
    if opts.method == "beam":
        return beam_search(
            step, reorder, state, beam_size=opts.beam_size, nbest=opts.nbest, **common
        )
    if opts.method == "greedy":
        return [[h] for h in greedy_search(step, reorder, state, **common)]
    hyps = sample(
        step,
        reorder,
        state,
        temperature=opts.temperature,
        top_k=opts.top_k,
        top_p=opts.top_p,
        seed=opts.seed,
        **common,
    )
    return [[h] for h in hyps]


def with_sampled_nbest(
    search,
    src: list[list[int]],
    opts: SearchOptions,
    constraints: list[Constraints] | None = None,
) -> list[list[Hypothesis]]:
    """``nbest`` independent samples per sentence (rows replicated), best score first.

    ``search(rows, constraints)`` searches the given rows with their constraints (or None).
    """
    if not (opts.method == "sample" and opts.nbest > 1):
        return search(src, constraints)
    rows = [s for s in src for _ in range(opts.nbest)]
    cons = None if constraints is None else [c for c in constraints for _ in range(opts.nbest)]
    flat = search(rows, cons)
    groups = [flat[i : i + opts.nbest] for i in range(0, len(flat), opts.nbest)]
    return [sorted((h for g in grp for h in g), key=lambda h: -h.score) for grp in groups]


def search_steps(
    engine,
    src: list[list[int]],
    opts: SearchOptions,
    constraints: list[Constraints] | None = None,
    *,
    attention: bool = False,
    device: torch.device | None = None,
) -> list[list[Hypothesis]]:
    """``Engine.translate_ids`` of an engine that runs seq2seq's own search over its steps.

    ``engine`` has ``start(src, *, attention) -> StepDecoder`` and the special ids
    (``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``): the torch and ONNX engines and ensembles.
    Sampled n-best rows are replicated (:func:`with_sampled_nbest`); each batch is one
    :func:`run_search` over the engine's :class:`StepDecoder`.
    """
    if not src:
        return []

    def search(rows: list[list[int]], cons: list[Constraints] | None) -> list[list[Hypothesis]]:
        dec = engine.start(rows, attention=attention)
        return run_search(
            dec.step,
            dec.reorder,
            dec.state,
            rows,
            opts,
            max_positions=dec.max_positions,
            pad_id=engine.pad_id,
            bos_id=engine.bos_id,
            eos_id=engine.eos_id,
            unk_id=engine.unk_id,
            device=device,
            attention=dec.attention,
            constraints=cons,
        )

    with torch.inference_mode():
        return with_sampled_nbest(search, src, opts, constraints)

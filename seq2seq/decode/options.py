"""Below both the Translator and the engines: search options, the Engine protocol, and the
one search dispatch every engine that runs seq2seq.decode.search shares.

:mod:`seq2seq.decode.translator` (text in, text out) and :mod:`seq2seq.decode.engines` (torch, CTranslate2,
ONNX Runtime) both import this module and neither imports the other's internals, so the data
flows one way: decoding -> engines -> translate.

Length limit (fairseq's): a hypothesis has at most ``max_len_a * src_len + max_len_b`` tokens
before its EOS, where ``src_len`` counts the source ids including their EOS, and at most
``max_positions - 1`` (the decoder cannot see further).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from seq2seq.config import DecodingConfig, ExperimentConfig
from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.search import Hypothesis, beam_search, greedy_search, sample

__all__ = [
    "METHODS",
    "Engine",
    "LoadedEngine",
    "SearchOptions",
    "StepDecoder",
    "max_target_lens",
    "reorder_state",
    "run_search",
    "search_steps",
    "with_sampled_nbest",
]

METHODS = ("beam", "greedy", "sample")


@dataclass(frozen=True)
class SearchOptions(DecodingConfig):
    """How to search: the fields (and defaults) of :class:`seq2seq.config.experiment.DecodingConfig`,
    validated together.

    ``method``: ``beam`` (fairseq scoring), ``greedy`` or ``sample`` (temperature, top-k,
    top-p, seeded). ``nbest`` > 1 needs ``beam`` (the n best beams, ``nbest <= beam_size``) or
    ``sample`` (``nbest`` independent samples, best score first). ``max_tokens`` bounds the
    source tokens of one batch, padding included.
    """

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(
                f"unknown decoding method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        self.validate(prefix="")  # the ranges DecodingConfig checks (no negative length limit)
        if self.method == "greedy" and self.nbest > 1:
            raise UserError(f"nbest {self.nbest} needs beam search or sampling, not greedy")
        if self.method == "beam" and not 1 <= self.nbest <= self.beam_size:
            raise UserError(
                f"nbest ({self.nbest}) must be between 1 and the beam size ({self.beam_size})"
            )
        if self.max_tokens < 1:
            raise UserError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @classmethod
    def from_config(cls, cfg: DecodingConfig, **overrides: object) -> SearchOptions:
        """Options from the config's ``decoding`` section; overrides that are None are ignored.

        Raises:
            TypeError: an override that is not a field of SearchOptions.
            UserError: an invalid combination (unknown method, nbest > beam size, ...).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"unknown search options {unknown}; valid: {sorted(names)}")
        values = {name: getattr(cfg, name) for name in names if hasattr(cfg, name)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **overrides: object) -> SearchOptions:
        """A copy with the non-None ``overrides`` applied (validated like the constructor)."""
        return SearchOptions.from_config(self, **overrides)  # type: ignore[arg-type]


class Engine(Protocol):
    """Source ids in, hypotheses out: what :class:`Translator` needs from a runtime.

    An engine may also have an int attribute ``batches_per_call`` (read with a default of 1):
    :meth:`Translator.translate_nbest` then hands it batches of up to that many times
    ``max_tokens`` source tokens, for an engine that splits batches over workers itself
    (:class:`seq2seq.decode.engines.CTranslate2Engine` on CPU).

    An engine that can return cross-attention (for word alignments, seq2seq.decode.alignments) takes
    a keyword ``attention: bool``; the Translator passes it only when alignments are asked
    for, and then expects each hypothesis' ``attention`` rows. Engines that run seq2seq.decode.search
    also expose ``start(src, *, attention) -> StepDecoder``, which is what an ensemble
    (seq2seq.decode.ensemble) combines.
    """

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        """Search each source.

        Args:
            src: source ids per sentence, each ending with EOS, none empty, none longer than
                the model's max positions.
            opts: search options; ``nbest`` hypotheses per sentence are wanted.
            constraints: per sentence, target prefix / include / avoid token ids (see
                :mod:`seq2seq.decode.constraints`), or None. An engine that cannot honour one raises
                a one-line UserError saying which engine can.

        Returns:
            Per sentence, up to ``opts.nbest`` hypotheses, best first; tokens end with EOS.
        """
        ...


@dataclass
class StepDecoder:
    """A model as seq2seq.decode.search sees it, ready for one batch of sources.

    Attributes:
        step: ``step(prefix, state) -> (log_probs, state)`` (see seq2seq.decode.search).
        reorder: ``reorder(state, index) -> state``.
        state: the initial state, one row per source sentence.
        attention: ``attention(state) -> (N, S)`` cross-attention of the last step, when the
            decoder was started with attention; else None.
        max_positions: positions the decoder can see.
    """

    step: Callable
    reorder: Callable
    state: object
    attention: Callable | None
    max_positions: int


def max_target_lens(src_lens: list[int], opts: SearchOptions, max_positions: int) -> list[int]:
    """Per-sentence hypothesis length limits for seq2seq.decode.search (EOS counted there).

    fairseq's ``min(max_len_a * src_len + max_len_b, max_positions - 1)`` tokens before EOS,
    plus one for the EOS (seq2seq.decode.search counts it). Never below 1.
    """
    out = []
    for n in src_lens:
        before_eos = min(int(opts.max_len_a * n + opts.max_len_b), max_positions - 1)
        out.append(max(before_eos, 0) + 1)
    return out


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
    """``Engine.translate_ids`` of an engine that runs seq2seq.decode.search over its own steps.

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


@dataclass
class LoadedEngine:
    """What :meth:`Translator.load` needs from an engine loader."""

    engine: Engine
    tokenizer: object  # seq2seq.data.tokenizer.Tokenizer
    cfg: ExperimentConfig
    max_src_positions: int


def reorder_state(state, index: torch.Tensor):
    """The search's ``reorder``: every decoding state here has a ``reorder(index)`` method."""
    return state.reorder(index)

"""Below both the Translator and the engines: the search options, the Engine protocol and what
an engine hands the search (:class:`StepDecoder`) or the Translator (:class:`LoadedEngine`).

:mod:`seq2seq.decode.translator` (text in, text out) and the engines
(:mod:`~seq2seq.decode.torch_engine`, :mod:`~seq2seq.decode.ctranslate2_engine`,
:mod:`~seq2seq.decode.onnx_engine`) both import this module and neither imports the other's
internals, so the options flow one way: Translator -> engine -> search
(:mod:`seq2seq.decode.dispatch`).

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
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.search_base import Hypothesis

__all__ = [
    "Engine",
    "LoadedEngine",
    "SearchOptions",
    "StepDecoder",
    "max_target_lens",
    "reorder_state",
]


@dataclass(frozen=True)
class SearchOptions(DecodingConfig):
    """How to search: the fields (and defaults) of :class:`seq2seq.config.DecodingConfig`,
    checked on construction by its one check of the search options
    (:meth:`~seq2seq.config.DecodingConfig.validate`, with ``search=True``).

    ``method``: ``beam`` (fairseq scoring), ``greedy`` or ``sample`` (temperature, top-k,
    top-p, seeded). ``nbest`` > 1 needs ``beam`` (the n best beams, ``nbest <= beam_size``) or
    ``sample`` (``nbest`` independent samples, best score first). ``max_tokens`` bounds the
    source tokens of one batch, padding included.
    """

    def __post_init__(self) -> None:
        self.validate(prefix="", search=True)

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
    (:class:`seq2seq.decode.ctranslate2_engine.CTranslate2Engine` on CPU), and an int
    attribute ``concurrent_calls`` (default 1): how many calls it may run at once from
    different threads (the server's batch lanes, seq2seq.serve.batcher).

    An engine that can return cross-attention (for word alignments, seq2seq.decode.alignments) takes
    a keyword ``attention: bool``; the Translator passes it only when alignments are asked
    for, and then expects each hypothesis' ``attention`` rows. Engines that run seq2seq's own search
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
    """A model as a search sees it, ready for one batch of sources.

    Attributes:
        step: ``step(prefix, state) -> (log_probs, state)`` (see seq2seq.decode.search_base).
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
    """Per-sentence hypothesis length limits for the search (EOS counted there).

    fairseq's ``min(max_len_a * src_len + max_len_b, max_positions - 1)`` tokens before EOS,
    plus one for the EOS (the search counts it). Never below 1.
    """
    out = []
    for n in src_lens:
        before_eos = min(int(opts.max_len_a * n + opts.max_len_b), max_positions - 1)
        out.append(max(before_eos, 0) + 1)
    return out


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

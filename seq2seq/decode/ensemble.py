"""Ensembles: several models decode as one, averaging their probabilities at every step.

The rule is fairseq's (``EnsembleModel.forward_decoder``): the ensemble's log-probability of a
token is the log of the mean of the members' probabilities,
``log(1/M * sum_m p_m(y | prefix, src))`` (not the mean of the log-probabilities), computed
stably as ``max + log(mean(exp(lp_m - max)))`` (:func:`combine_log_probs`; exact for one
member, or for identical members).

Search stays model-agnostic (docs/design.md): :class:`Ensemble` turns the members'
:class:`~seq2seq.decode.options.StepDecoder` s into ONE step function, reorder function and state.
Each member keeps its own decoding state (its own KV cache); ``reorder`` reorders all of them
with the same index, so the beams stay aligned. Cross-attention (for alignments) is the mean of
the members' (fairseq averages it too).

:class:`EnsembleEngine` implements the :class:`~seq2seq.decode.options.Engine` protocol over engines
that expose ``start(src, attention=...) -> StepDecoder`` (the torch engines and ONNX), so
``seq2seq translate DIR1 DIR2 ...``, ``evaluate`` and the Python API take an ensemble like a
single model. The members must share the vocabularies: the target one (the probabilities are
averaged token by token) and the source SentencePiece model (every member reads the same
source ids); :func:`load_ensemble` checks both with a one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.dispatch import search_steps
from seq2seq.decode.options import LoadedEngine, SearchOptions, StepDecoder
from seq2seq.decode.search_base import Hypothesis

__all__ = [
    "Ensemble",
    "EnsembleEngine",
    "EnsembleState",
    "check_same_vocabularies",
    "combine_log_probs",
    "load_ensemble",
]


def combine_log_probs(stack: Tensor) -> Tensor:
    """The log of the mean probability over the first dimension (the members).

    Args:
        stack: (M, ...) log-probabilities of M members.

    Returns:
        (...) ``log(mean_m exp(stack[m]))``, computed as ``top + log(mean(exp(stack - top)))``
        with ``top`` the members' maximum, so one member (or M identical ones) gives its own
        values bit for bit. Where every member has -inf the result is -inf.
    """
    if stack.size(0) == 1:
        return stack[0]
    top = stack.max(dim=0).values
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # -inf rows: exp -> 0
    return top + torch.exp(stack - top).mean(dim=0).log()


@dataclass
class EnsembleState:
    """The members' decoding states, one per member, rows aligned (N rows each)."""

    states: list


class Ensemble:
    """Several members' step functions as one (what a search sees).

    Args:
        members: one :class:`~seq2seq.decode.options.StepDecoder` per model, all started on the same
            sources (same rows).
    """

    def __init__(self, members: list[StepDecoder]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = members
        self.state = EnsembleState([m.state for m in members])
        self.max_positions = min(m.max_positions for m in members)
        with_attention = [m.attention is not None for m in members]
        self.attention = self._attention if all(with_attention) else None

    def step(self, prefix: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        """Every member's step on the same prefix; log-probs (N, V) combined by the mean rule."""
        outs = [m.step(prefix, s) for m, s in zip(self.members, state.states)]
        dtype = torch.promote_types(outs[0][0].dtype, torch.float32)  # bf16 -> float32
        stack = torch.stack([lp.to(dtype) for lp, _ in outs])  # (M, N, V)
        return combine_log_probs(stack), EnsembleState([s for _, s in outs])

    def reorder(self, state: EnsembleState, index: Tensor) -> EnsembleState:
        """The rows ``index`` of every member's state (each its own cache, reordered alike)."""
        return EnsembleState([m.reorder(s, index) for m, s in zip(self.members, state.states)])

    def _attention(self, state: EnsembleState) -> Tensor:
        rows = [m.attention(s).float() for m, s in zip(self.members, state.states)]  # M x (N, S)
        return torch.stack(rows).mean(dim=0)  # (N, S)


class EnsembleEngine:
    """The :class:`~seq2seq.decode.options.Engine` of an ensemble of step engines.

    Args:
        engines: engines with ``start(src, *, attention) -> StepDecoder`` and the special ids
            (``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``, the same for all), e.g.
            :class:`~seq2seq.decode.torch_engine.TorchEngine`.
        device: where the search's bookkeeping lives (the members' device; None: the CPU).
    """

    def __init__(self, engines: list, *, device: torch.device | str | None = None) -> None:
        if not engines:
            raise ValueError("an ensemble needs at least one engine")
        for e in engines:
            if not callable(getattr(e, "start", None)):
                raise UserError(
                    f"{type(e).__name__} cannot be part of an ensemble (it runs its own "
                    "search); use the torch or onnx engine"
                )
        first = engines[0]
        self.engines = engines
        self.device = None if device is None else torch.device(device)
        self.pad_id, self.bos_id = first.pad_id, first.bos_id
        self.eos_id, self.unk_id = first.eos_id, first.unk_id

    def start(self, src: list[list[int]], *, attention: bool = False) -> StepDecoder:
        """Start every member on ``src``: the ensemble as one step function for the search."""
        ensemble = Ensemble([e.start(src, attention=attention) for e in self.engines])
        return StepDecoder(
            step=ensemble.step,
            reorder=ensemble.reorder,
            state=ensemble.state,
            attention=ensemble.attention,
            max_positions=ensemble.max_positions,
        )

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`seq2seq.decode.options.Engine`; ``attention``: the members' mean."""
        return search_steps(self, src, opts, constraints, attention=attention, device=self.device)


def check_same_vocabularies(names: list[str], tokenizers: list) -> None:
    """Every tokenizer must have the first one's target vocabulary and source model.

    The target vocabularies are compared piece by piece (id -> piece), the source
    SentencePiece models by their bytes (the same bytes encode alike).

    Raises:
        UserError: one line naming the member and the first difference.
    """
    from seq2seq.core import sha256_file

    def target(tok) -> list[str]:
        return tok.tgt_pieces(range(tok.tgt_vocab_size))

    tgt0, src0 = target(tokenizers[0]), sha256_file(tokenizers[0].files[0])
    for name, tok in zip(names[1:], tokenizers[1:]):
        tgt = target(tok)
        if tgt != tgt0:
            if len(tgt) != len(tgt0):
                what = f"{len(tgt)} target pieces, not {len(tgt0)}"
            else:
                i = next(i for i, (a, b) in enumerate(zip(tgt, tgt0)) if a != b)
                what = f"target piece {i} is {tgt[i]!r}, not {tgt0[i]!r}"
            raise UserError(
                f"ensemble members must share the target vocabulary, but {name} does not "
                f"match {names[0]} ({what}); train them with data.spm_model={names[0]}"
            )
        if sha256_file(tok.files[0]) != src0:
            raise UserError(
                f"ensemble members must read the same source pieces, but {name}'s source "
                f"SentencePiece model differs from {names[0]}'s; train them with "
                f"data.spm_model={names[0]}"
            )


def load_ensemble(
    model_dirs: list[str | Path], *, device: str = "cpu", engine: str = "torch"
) -> LoadedEngine:
    """Load each directory with the named engine and combine them (``engine`` as in ENGINES).

    The ensemble's config (decoding defaults) and tokenizer are the first model's; its max
    source positions the smallest of the members'.

    Raises:
        UserError: fewer than one directory, an engine that runs its own search
            (ctranslate2), members with different vocabularies.
    """
    from seq2seq.decode.engines import ENGINES

    if not model_dirs:
        raise UserError("give at least one model directory")
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}; available: {', '.join(sorted(ENGINES))}")
    if engine == "ctranslate2":
        raise UserError(
            "an ensemble cannot use the ctranslate2 engine (it runs its own search); use "
            "--engine torch (or onnx)"
        )
    names = [str(d) for d in model_dirs]
    loaded = [ENGINES[engine](Path(d), device=device) for d in model_dirs]
    check_same_vocabularies(names, [x.tokenizer for x in loaded])
    first = loaded[0]
    return LoadedEngine(
        engine=EnsembleEngine([x.engine for x in loaded], device=device),
        tokenizer=first.tokenizer,
        cfg=first.cfg,
        max_src_positions=min(x.max_src_positions for x in loaded),
    )

"""``training.precision: auto``: bf16 mixed precision only where it is supported and faster.

On the CPU, bf16 pays only with bf16 instructions (AVX512_BF16, or AMX's tiles): without them
a bf16 multiply is emulated and slower than float32. :func:`resolve_precision` picks
``bf16-mixed`` when the CPU's flags (``/proc/cpuinfo``) name ``avx512_bf16`` or ``amx_bf16``
*and* a short probe (the model's own training step, forward and backward, on synthetic
batches of its configured size in four shapes) measures bf16-mixed at least
``min_speedup`` times as fast as float32 on this machine, with these threads; otherwise
``32``. The large multiplies alone are no guide: they can gain in bf16 where a small model's
whole step, bound by its many small ops, loses. On a GPU it picks ``bf16-mixed`` where the
GPU supports bf16.

The choice depends on the machine and, through the probe, on how busy it is. ``bf16-native``
decides by the flags alone: ``bf16-mixed`` wherever the CPU has bf16 instructions (or the GPU
supports bf16), ``32`` elsewhere, never by a timing, so a machine of one kind always trains the
same model, busy or not (``make demo``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "BF16_FLAGS",
    "PROBE_SHAPES",
    "PrecisionChoice",
    "bf16_speedup",
    "cpu_flags",
    "resolve_precision",
]

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` became, and why (one line, printed at the start of training)."""

    precision: str
    reason: str


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (the first ``flags`` line of /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


PROBE_SHAPES = 4
"""How many batch shapes a probe's ``forward`` cycles through (seq2seq.train.trainer's probe does)."""


def bf16_speedup(
    forward: Callable[[], torch.Tensor], *, rounds: int = 2, reps: int = PROBE_SHAPES
) -> float:
    """Measured float32 / bf16-mixed time of a training step's forward and backward.

    ``forward()`` returns the step's loss (a scalar): the model's own forward on a batch of
    its own size, so what is timed is what training runs (a small model's many small ops, its
    layer norms and its loss included, not only the large multiplies), and a batch of another
    shape at each call, cycling through ``reps`` shapes, since training's batches vary in
    shape and bf16's kernels are fast on some shapes only (a probe of one shape overstates
    the gain; :mod:`seq2seq.model.shape_buckets` keeps the shapes few). Each precision
    runs one untimed round to warm up (oneDNN builds its kernels per shape on first use),
    then ``rounds`` rounds of ``reps`` steps, alternating; the best round counts. bf16-mixed
    is the forward under CPU autocast to bf16 and the backward outside it, as Lightning runs
    it.

    Args:
        forward: one training step's forward on the next probe batch; returns its loss.
        rounds: timed rounds per precision (the best one counts).
        reps: steps per round (one cycle of the probe's shapes).

    Returns:
        float32 time / bf16-mixed time; above 1, bf16-mixed is faster.
    """

    def step(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = forward()
        loss.float().backward()

    best = {False: float("inf"), True: float("inf")}
    for bf16 in best:
        for _ in range(reps):
            step(bf16)
    for _ in range(rounds):
        for bf16 in best:
            t0 = time.perf_counter()
            for _ in range(reps):
                step(bf16)
            best[bf16] = min(best[bf16], time.perf_counter() - t0)
    return best[False] / best[True]


def resolve_precision(
    precision: str,
    *,
    accelerator: str,
    forward: Callable[[], torch.Tensor] | None = None,
    min_speedup: float = 1.1,
    probe: bool = True,
    flags: Callable[[], set[str]] | None = None,
    speedup: Callable[[Callable[[], torch.Tensor]], float] | None = None,
) -> PrecisionChoice:
    """The Lightning precision for ``training.precision`` (``auto`` and ``bf16-native``
    resolved; others as given).

    Args:
        precision: ``training.precision``.
        accelerator: ``training.accelerator`` (``auto``: a GPU when torch sees one).
        forward: the probe's training-step forward (see :func:`bf16_speedup`); needed when
            ``auto`` measures.
        min_speedup: the measured bf16-mixed/float32 speed below which float32 is kept.
        probe: measure; False decides by the CPU flags alone (multi-process runs, where
            every rank must make the same choice and a timing could differ between them).
        flags: the CPU flag reader (default :func:`cpu_flags`; tests pass fakes).
        speedup: the probe (default :func:`bf16_speedup`, called with ``forward``; tests pass
            fakes).
    """
    if precision not in ("auto", "bf16-native"):
        return PrecisionChoice(precision, "as configured")
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if gpu:
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return PrecisionChoice("bf16-mixed", "the GPU supports bf16")
        return PrecisionChoice("32", "the GPU has no bf16")
    have = sorted(set(BF16_FLAGS) & (flags or cpu_flags)())
    if not have:
        return PrecisionChoice(
            "32", f"the CPU has no bf16 instructions ({' or '.join(BF16_FLAGS)} not in its flags)"
        )
    if precision == "bf16-native":
        return PrecisionChoice("bf16-mixed", f"the CPU has {', '.join(have)}")
    if not probe:
        return PrecisionChoice(
            "bf16-mixed", f"the CPU has {', '.join(have)} (not measured: several processes)"
        )
    if forward is None:
        raise ValueError("resolve_precision('auto') measures: give forward")
    ratio = (speedup or bf16_speedup)(forward)
    measured = f"this model's training step measured {ratio:.2f}x as fast in bf16"
    if ratio < min_speedup:
        return PrecisionChoice("32", f"the CPU has {', '.join(have)}, but {measured}")
    return PrecisionChoice("bf16-mixed", f"the CPU has {', '.join(have)} and {measured}")

"""The learning-rate schedules: the factor of ``training.lr`` at each optimizer update.

Schedules (``training.schedule``; ``n`` = optimizer updates so far, 1 for the first,
``w`` = ``training.warmup_steps``, ``lr`` = ``training.lr``):

- ``inverse_sqrt`` (fairseq): ``lr * n / w`` while ``n <= w``, then ``lr * sqrt(w / n)``;
- ``noam`` (Vaswani et al. 2017): ``lr * d_model**-0.5 * min(n**-0.5, n * w**-1.5)``, so
  ``lr`` is Noam's scale factor (1-2), not the peak rate;
- ``constant``: ``lr * min(1, n / w)`` (linear warmup, then constant);
- ``linear``: linear warmup, then a straight line from ``lr`` down to ``training.min_lr`` at
  update ``T = training.max_steps``: ``min_lr + (lr - min_lr) * (1 - p)`` with
  ``p = (n - w) / (T - w)``;
- ``cosine``: linear warmup, then half a cosine from ``lr`` to ``min_lr`` at ``T``:
  ``min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2``.

The two decaying schedules end at ``max_steps``: a run they fit is bounded by updates (a
``max_time`` that stops it earlier leaves the rate above ``min_lr``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from seq2seq.config import ConfigError

__all__ = ["DECAYING", "SCHEDULES", "lr_factor"]

SCHEDULES = ("inverse_sqrt", "noam", "constant", "linear", "cosine")
DECAYING = ("linear", "cosine")  # schedules that end at training.max_steps


def lr_factor(
    schedule: str,
    *,
    warmup_steps: int,
    d_model: int,
    max_steps: int = 0,
    min_ratio: float = 0.0,
) -> Callable[[int], float]:
    """The schedule as ``f(k) -> factor of training.lr`` for LambdaLR.

    LambdaLR calls ``f(k)`` with ``k`` = scheduler steps taken so far (0 before the first
    update); the update that follows is the ``n = k + 1``-th (see the module docstring).
    ``max_steps`` and ``min_ratio`` (``min_lr / lr``) shape ``linear`` and ``cosine``.
    """
    w = max(warmup_steps, 1)
    if schedule in DECAYING:
        if max_steps <= warmup_steps:
            raise ConfigError(
                f"training.schedule {schedule} needs training.max_steps ({max_steps}) above "
                f"training.warmup_steps ({warmup_steps})"
            )
        span = max_steps - warmup_steps
        shape = (lambda p: 1.0 - p) if schedule == "linear" else (
            lambda p: 0.5 * (1.0 + math.cos(math.pi * p))
        )  # fmt: skip

        def f(k: int) -> float:
            n = k + 1
            if n <= warmup_steps:
                return n / w
            p = min(1.0, (n - warmup_steps) / span)
            return min_ratio + (1.0 - min_ratio) * shape(p)

        return f
    if schedule == "inverse_sqrt":

        def f(k: int) -> float:
            n = k + 1
            return n / w if n <= w else math.sqrt(w / n)

    elif schedule == "noam":

        def f(k: int) -> float:
            n = k + 1
            return d_model**-0.5 * min(n**-0.5, n * w**-1.5)

    elif schedule == "constant":

        def f(k: int) -> float:
            return min(1.0, (k + 1) / w)

    else:
        raise ConfigError(
            f"training.schedule is {schedule!r}; expected one of {', '.join(SCHEDULES)}"
        )
    return f

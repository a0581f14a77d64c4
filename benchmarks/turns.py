"""Timing two or more ways of doing one thing in one process, taking turns.

On a noisy machine (other tenants, frequency changes) a slow stretch lasts seconds to
minutes; timing one way after the other puts it on one of them. Taking turns on every call,
the order alternating from one round to the next, puts it on all of them alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

__all__ = ["in_turns"]


def in_turns(
    ways: Sequence[str], rounds: int, warmup: int, run: Callable[[str, int], object]
) -> dict[str, list[float]]:
    """Seconds of ``run(way, i)`` for every way in each round ``i`` after the first ``warmup``.

    Round ``i`` runs the ways in their order when ``i`` is even and in reverse when it is odd.
    """
    times: dict[str, list[float]] = {way: [] for way in ways}
    for i in range(warmup + rounds):
        for way in ways if i % 2 == 0 else list(reversed(ways)):
            start = time.perf_counter()
            run(way, i)
            if i >= warmup:
                times[way].append(time.perf_counter() - start)
    return times

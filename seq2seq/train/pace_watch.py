"""The expected duration of a run bounded by updates, and one warning when it runs slow.

A config sized for a machine (``make demo``'s) says so in ``training.expected_step_s``,
seconds per update there (and ``training.expected_machine``); the estimate is that times the
updates to run, so it follows a ``max_steps`` override or a resume. :class:`PaceWatch` prints it when training starts and, once enough updates have run
to tell, warns a single time when the run is on course to take much longer (``slow_factor``
times the estimate): another job sharing the cores, fewer threads, a slower CPU. The warning
changes nothing else: a run bounded by updates gives the same model, only later (unless a
``training.max_time`` guard stops it first, which the messages then say).

A run that has both ``max_steps`` and a ``max_time`` guard is also judged against the guard,
with or without an expected pace: after ``deadline_after`` updates (100 at most, fewer in a
short run) the measured pace projects the end, and when the guard would stop the run before
its last update PaceWatch says so once, with the update it would reach. A schedule that decays
to its end at ``max_steps`` (``linear``, ``cosine``) then never reaches that end, so the line
names the ``max_steps`` that fits. A run whose update cost changes partway
(``training.rdrop_start``: one pass, then two) counts its two-pass updates at
:data:`TWO_PASS_COST` cheap ones in the first judgement (:func:`update_cost`), and is judged a
second time, ``deadline_after`` updates into its dearer part, from that part's own pace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Timer

from seq2seq.core import say

__all__ = ["TWO_PASS_COST", "PaceWatch", "format_minutes", "update_cost", "update_reached"]

TWO_PASS_COST = 2.0
"""What a two-pass update (R-Drop, SimCut) costs at the least, in one-pass updates: it runs the
forward and backward work of its batch twice. Measured costs: docs/results.md."""


def update_cost(step: int, end: int, pace_changes_at: int = 0) -> float:
    """The updates after ``step`` up to ``end``, in units of the pace measured up to ``step``.

    Up to ``pace_changes_at`` (0: no change) the pace is the cheap one, and each update after
    it counts :data:`TWO_PASS_COST`; past it, the pace is the dearer one and every update
    counts one.
    """
    if not (0 < pace_changes_at < end and step <= pace_changes_at):
        return float(max(0, end - step))
    return (pace_changes_at - step) + TWO_PASS_COST * (end - pace_changes_at)


def update_reached(step: int, units: float, pace_changes_at: int = 0) -> int:
    """The update that ``units`` (counted as :func:`update_cost` counts them) after ``step``
    reach: its inverse, rounded down."""
    cheap = pace_changes_at - step
    if pace_changes_at <= 0 or cheap < 0 or units <= cheap:
        return step + max(0, math.floor(units))
    return pace_changes_at + math.floor((units - cheap) / TWO_PASS_COST)


def format_minutes(seconds: float) -> str:
    """``"about 10 min"``, ``"about 1 h 25 min"``, ``"under a minute"``."""
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"about {minutes} min"
    return f"about {minutes // 60} h {minutes % 60} min"


def time_guard_left(trainer: pl.Trainer) -> float | None:
    """Seconds the ``training.max_time`` Timer leaves this run (None: no guard)."""
    for cb in getattr(trainer, "callbacks", ()):
        if isinstance(cb, Timer):
            return cb.time_remaining("train")
    return None


class PaceWatch(pl.Callback):
    """Print the expected training time at start; warn once when the run is much slower, and
    once (once per pace, in a run whose updates turn dearer) when ``training.max_time`` would
    stop it before its last update.

    Args:
        expected_step_s: seconds per update (validation included) on the machine the config
            was sized on; 0 when the config states none (then only the time guard is judged).
        machine: that machine, in words (printed with the estimate), or "".
        slow_factor: warn when the projected time exceeds the estimate by this factor.
        min_updates: updates (of this launch) before the pace is judged; at least 5% of the
            run is always waited for, so that the first, slower updates do not count alone.
        deadline_after: updates (of this launch) after which the end is projected against
            the ``max_time`` guard; a run shorter than twice this is judged at its middle.
        log: where the lines go (stderr).
        clock: seconds, monotonic (tests pass a fake one).
        time_left: the guard's seconds left for a trainer, or None (reads the Timer).
        pace_changes_at: the update from which each update costs more (0 = none): the
            deadline is judged again, from the pace measured after it.
    """

    def __init__(
        self,
        *,
        expected_step_s: float,
        machine: str = "",
        slow_factor: float = 1.5,
        min_updates: int = 20,
        deadline_after: int = 100,
        log: Callable[[str], None] = say,
        clock: Callable[[], float] = time.monotonic,
        time_left: Callable[[pl.Trainer], float | None] = time_guard_left,
        pace_changes_at: int = 0,
    ) -> None:
        if expected_step_s < 0:
            raise ValueError("expected_step_s must be >= 0")
        self._per_update = expected_step_s
        self.machine = machine
        self.slow_factor = slow_factor
        self.min_updates = min_updates
        self.write = log
        self.clock = clock
        self.deadline_after = deadline_after
        self.time_left = time_left
        self.warned = False
        self.deadline_judged = False
        self.deadline_missed = False
        self.pace_changes_at = pace_changes_at
        self._start: tuple[float, int] | None = None
        self._judge_from: tuple[float, int] | None = None  # where the deadline's pace starts
        self._timed = False  # a max_time Timer may end the run first

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        max_steps = trainer.max_steps
        if max_steps is None or max_steps < 1:
            return  # only a run bounded by updates has an expected duration
        step = trainer.global_step
        self._start = self._judge_from = (self.clock(), step)
        if not trainer.is_global_zero or not self._per_update:
            return
        left = max_steps - step
        where = f" on {self.machine}" if self.machine else ""
        what = f"{left:,} updates" + (f" (of {max_steps:,})" if step else "")
        self._timed = any(isinstance(cb, Timer) for cb in getattr(trainer, "callbacks", ()))
        same = (
            "; training.max_time may stop a slower run sooner"
            if self._timed
            else "; a slower or busier machine takes longer and trains the same model"
        )
        self.write(
            f"expected training time: {format_minutes(left * self._per_update)} for {what}"
            f"{where}{same}"
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is None or not trainer.is_global_zero:
            return
        t0, step0 = self._start
        done = trainer.global_step - step0
        left = trainer.max_steps - step0
        if done <= 0:
            return
        if trainer.global_step == self.pace_changes_at > self._judge_from[1]:
            # dearer updates from here: judge the deadline again, from their own pace alone
            self._judge_from, self.deadline_judged = (self.clock(), trainer.global_step), False
        self._maybe_judge_deadline(trainer)
        if self.warned or not self._per_update or done < max(self.min_updates, 0.05 * left):
            return
        rate = (self.clock() - t0) / done  # seconds per update, validation included
        if rate <= self.slow_factor * self._per_update:
            return
        self.warned = True
        projected = rate * left
        self.write(
            f"warning: training runs {rate / self._per_update:.1f}x slower than expected "
            f"({rate:.2f} s per update, not {self._per_update:.2f}): "
            f"{format_minutes(projected)} in all instead of {format_minutes(left * self._per_update)}. "
            "Another job may be sharing the CPU cores (or training.threads is lower than the "
            "config's); "
            + (
                "training.max_time may stop the run before its last update"
                if self._timed
                else "the run still stops after the same updates, with the same model"
            )
        )

    def _maybe_judge_deadline(self, trainer: pl.Trainer) -> None:
        """Judge the deadline once enough updates have run since ``_judge_from``."""
        t0, step0 = self._judge_from
        done, left = trainer.global_step - step0, trainer.max_steps - step0
        enough = min(self.deadline_after, max(1, left // 2))
        if done > 0 and not self.deadline_judged and done >= enough:
            self.deadline_judged = True
            self._judge_deadline(trainer, (self.clock() - t0) / done)

    def _judge_deadline(self, trainer: pl.Trainer, rate: float) -> None:
        """Say whether ``max_time`` stops the run before its last update (once per pace).

        Args:
            rate: seconds per update measured since ``_judge_from``.
        """
        guard = self.time_left(trainer)
        step, end, change = trainer.global_step, trainer.max_steps, self.pace_changes_at
        need = rate * update_cost(step, end, change)
        if guard is None or need <= guard:
            return
        self.deadline_missed = True
        reach = update_reached(step, guard / rate, change)
        dearer = (
            f" (the two-pass updates from update {change:,} on at "
            f"{TWO_PASS_COST * rate:.2f} s at least)"
            if step < change
            else ""
        )
        self.write(
            f"warning: training.max_time stops this run near update {reach:,} of {end:,}: at "
            f"{rate:.2f} s per update{dearer} the remaining {end - step:,} updates need "
            f"{format_minutes(need)}, and the time guard leaves {format_minutes(guard)}. A "
            "schedule that decays to its end at max_steps never gets there: set "
            f"training.max_steps={reach} to keep the whole schedule on this machine"
        )

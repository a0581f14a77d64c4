"""How a training run shows its progress: a TQDM bar on a terminal, text lines elsewhere.

A run prints our lines only. Lightning's own info lines (its banner, ``GPU available: ...``;
an advertisement for its cloud logger; its model table; ``Trainer.fit stopped: ...``) are
off while it trains (:func:`quiet_lightning`); :class:`RunLines` says instead, in one line
each, how large the model is and why the run ended. Warnings still show.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

import lightning_fabric  # noqa: F401 (imported before quiet_lightning: its import sets a level)
import pytorch_lightning as pl
from pytorch_lightning.callbacks import EarlyStopping, TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import _update_n

from seq2seq.core import say
from seq2seq.train.pace_watch import time_guard_left, update_cost

__all__ = ["LIGHTNING_LOGGERS", "RunLines", "StepProgressBar", "TextProgress", "quiet_lightning"]

LIGHTNING_LOGGERS = ("lightning", "lightning_fabric", "lightning_utilities", "pytorch_lightning")
"""The loggers Lightning's info lines go to (``rank_zero_info``, its callbacks' ``log.info``)."""


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """While inside, Lightning's info lines are not printed; its warnings still are.

    Every one of them is a ``logging`` record at INFO level of a logger under one of
    :data:`LIGHTNING_LOGGERS`: raising those loggers to WARNING silences them all, on every
    rank, whatever handler Lightning or the user installed, and whatever the message says.
    The levels are restored on the way out.
    """
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


class RunLines(pl.Callback):
    """Our lines in place of Lightning's: the model's size when training starts, and why the
    run ended (``training ended at step 2000: training.max_steps reached``). Rank 0 only."""

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            n = sum(p.numel() for p in pl_module.parameters())  # each tied parameter once
            say(f"model: {n:,} parameters")

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            reason = _end_reason(trainer)
            say(f"training ended at step {trainer.global_step}" + (f": {reason}" if reason else ""))


def _end_reason(trainer: pl.Trainer) -> str:
    """Why ``fit`` ended normally: the limit it reached or the early stop ("" if unknown)."""
    if 0 < trainer.max_steps <= trainer.global_step:
        return f"training.max_steps ({trainer.max_steps}) reached"
    for cb in trainer.callbacks:
        if isinstance(cb, EarlyStopping) and cb.stopping_reason_message:
            return "early stopping: " + cb.stopping_reason_message.split(" Signaling")[0]
    remaining = time_guard_left(trainer)
    if remaining is not None and remaining <= 0:
        return "training.max_time reached"
    max_epochs = trainer.max_epochs or 0
    if 0 < max_epochs <= trainer.current_epoch:
        return f"training.max_epochs ({max_epochs}) reached"
    return ""


def _short_metrics(metrics: dict) -> dict:
    out = {}
    for key, value in metrics.items():
        if key == "v_num":
            continue
        out[key.removeprefix("train/")] = value
    return out


class StepProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar counting updates towards ``max_steps`` (hence a run-wide ETA).

    The postfix shows the step's loss, perplexity, learning rate and target tokens per
    second. Without a step limit it is Lightning's per-epoch bar.
    """

    def on_train_epoch_start(self, trainer, *args) -> None:
        if trainer.max_steps is None or trainer.max_steps < 1:
            return super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:
            bar.reset(total=trainer.max_steps)
            bar.initial = trainer.global_step  # rate and ETA from this launch's progress
        _update_n(bar, trainer.global_step)
        bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.max_steps is None or trainer.max_steps < 1:
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        n = trainer.global_step
        bar = self.train_progress_bar
        if bar is not None and self._should_update(n, bar.total):
            _update_n(bar, n)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer, pl_module) -> dict:
        return _short_metrics(super().get_metrics(trainer, pl_module))


class TextProgress(pl.Callback):
    """One line every ``every`` updates, for logs that are not a terminal (SLURM, CI).

    ``step 1200/10000 loss 3.214 ppl 21.5 lr 4.1e-04 tok_s 12345 eta 0:12:34``

    The ETA is the pace of this launch times the updates left; in a run whose updates turn
    dearer at ``pace_changes_at`` (``training.rdrop_start``) the updates after it count as
    :func:`~seq2seq.train.pace_watch.update_cost` counts them, and from it on the pace is
    measured afresh.
    """

    def __init__(
        self, *, every: int, pace_changes_at: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = max(1, every)
        self.pace_changes_at = pace_changes_at
        self.clock = clock
        self._start: tuple[float, int] | None = None
        self._last = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = (self.clock(), trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step != self._last and not step % self.every and trainer.is_global_zero:
            self._last = step
            say(self._line(trainer, step))
        if self._start is not None and step == self.pace_changes_at > self._start[1]:
            self._start = (self.clock(), step)  # dearer updates from here: their own pace

    def _line(self, trainer, step: int) -> str:
        metrics = _short_metrics(trainer.progress_bar_metrics)
        parts = [f"step {step}" + (f"/{trainer.max_steps}" if trainer.max_steps > 0 else "")]
        for key in ("loss", "ppl", "lr", "tok_s"):
            if key in metrics:
                value = float(metrics[key])
                parts.append(f"{key} {value:.2e}" if key == "lr" else f"{key} {value:.4g}")
        if self._start is not None and trainer.max_steps > 0 and step > self._start[1]:
            rate = (self.clock() - self._start[0]) / (step - self._start[1])
            eta = int(rate * update_cost(step, trainer.max_steps, self.pace_changes_at))
            left = time_guard_left(trainer)  # training.max_time may end the run sooner
            if left is not None:
                eta = min(eta, int(left))
            parts.append(f"eta {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}")
        return " ".join(parts)

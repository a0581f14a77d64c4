"""How a training run shows its progress: a TQDM bar on a terminal, text lines elsewhere."""

from __future__ import annotations

import sys
import time

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Timer, TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import _update_n

__all__ = ["StepProgressBar", "TextProgress"]


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
    """

    def __init__(self, *, every: int) -> None:
        self.every = max(1, every)
        self._start: tuple[float, int] | None = None
        self._last = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = (time.monotonic(), trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last or step % self.every or not trainer.is_global_zero:
            return
        self._last = step
        metrics = _short_metrics(trainer.progress_bar_metrics)
        parts = [f"step {step}" + (f"/{trainer.max_steps}" if trainer.max_steps > 0 else "")]
        for key in ("loss", "ppl", "lr", "tok_s"):
            if key in metrics:
                value = float(metrics[key])
                parts.append(f"{key} {value:.2e}" if key == "lr" else f"{key} {value:.4g}")
        if self._start is not None and trainer.max_steps > 0 and step > self._start[1]:
            rate = (time.monotonic() - self._start[0]) / (step - self._start[1])
            eta = int(rate * (trainer.max_steps - step))
            for cb in trainer.callbacks:  # training.max_time may end the run sooner
                if isinstance(cb, Timer) and cb.time_remaining("train") is not None:
                    eta = min(eta, int(cb.time_remaining("train")))
            parts.append(f"eta {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}")
        print(" ".join(parts), file=sys.stderr, flush=True)

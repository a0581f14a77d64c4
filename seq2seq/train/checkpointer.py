"""How a training run writes its checkpoints: atomically, read back safely, and when.

:class:`AtomicCheckpointIO` is Lightning's checkpoint I/O with atomic writes and
``weights_only`` reads; :class:`Checkpointer` is the callback that writes the periodic, last
and best checkpoints of ``DIR/checkpoints`` (the layout: :mod:`seq2seq.train.trainer`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint
from pytorch_lightning.plugins.io import TorchCheckpointIO

from seq2seq.core import atomic_open
from seq2seq.train.checkpoints import BEST, LAST, periodic_checkpoints, read_checkpoint

__all__ = ["AtomicCheckpointIO", "Checkpointer"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that never leaves a half-written file, and loads safely.

    Saving writes a temporary sibling, fsyncs it and renames it over the target, so a crash
    or kill while saving leaves the previous checkpoint intact. Loading always uses
    ``torch.load(weights_only=True)``: a checkpoint that would need unsafe unpickling is a
    :class:`~seq2seq.train.checkpoints.CheckpointError`.
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        with atomic_open(Path(path), "wb") as f:
            torch.save(checkpoint, f)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path)


def _link_or_copy(src: Path, dst: Path) -> None:
    """Make ``dst`` a hard link to ``src`` (a copy where links are impossible), atomically."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class Checkpointer(Checkpoint):
    """Periodic, last and best checkpoints for exact resume and averaging.

    - every ``save_every`` updates: ``stepNNNNNNNN.ckpt`` (written after that step's
      validation, if it has one, so that it holds the validation's early-stopping and
      best-score state), and ``last.ckpt`` linked to it; only the newest ``keep_last``
      periodic checkpoints are kept;
    - after a validation that improves ``monitor``: ``best.ckpt``;
    - at the end of training (max steps, early stop, time limit): a final periodic one.

    Its state (best score and step) is saved in the checkpoints and restored on resume.
    Lightning orders :class:`Checkpoint` callbacks last, so early stopping has updated its
    own state before a checkpoint is written.
    """

    def __init__(
        self, *, dirpath: str | Path, save_every: int, keep_last: int, monitor: str, mode: str
    ) -> None:
        self.dirpath = Path(dirpath)
        self.save_every = save_every
        self.keep_last = keep_last
        self.monitor = monitor
        self.mode = mode
        self.best_score: float | None = None
        self.best_step = -1
        self.last_saved_step = -1

    @property
    def state_key(self) -> str:
        return "Checkpointer"

    def state_dict(self) -> dict:
        return {"best_score": self.best_score, "best_step": self.best_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best_score = state_dict.get("best_score")
        self.best_step = int(state_dict.get("best_step", -1))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            for stale in self.dirpath.glob(".*.tmp"):  # left by a kill while writing
                with contextlib.suppress(OSError):
                    stale.unlink()

    def save_now(self, trainer: pl.Trainer) -> None:
        """A periodic checkpoint of the current step, unless there is one (a SIGTERM stop)."""
        if 0 < trainer.global_step != self.last_saved_step:
            self._save_periodic(trainer)

    def _improved(self, score: float) -> bool:
        if self.best_score is None:
            return True
        return score > self.best_score if self.mode == "max" else score < self.best_score

    def _save_periodic(self, trainer: pl.Trainer) -> Path:
        step = trainer.global_step
        path = self.dirpath / f"step{step:08d}.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # all ranks call; rank 0 writes
        self.last_saved_step = step
        if trainer.is_global_zero:
            _link_or_copy(path, self.dirpath / LAST)
            for old in periodic_checkpoints(self.dirpath)[: -self.keep_last]:
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        trainer.strategy.barrier("Checkpointer")
        return path

    @staticmethod
    def _validation_follows(trainer: pl.Trainer) -> bool:
        """Whether Lightning validates right after this training batch.

        Two rules of Lightning's ``_should_check_val_fx``: every ``val_check_batch`` batches,
        and once more when a callback (the ``max_time`` Timer) has asked the run to stop.
        """
        every = trainer.val_check_batch
        if not trainer.enable_validation or not isinstance(every, int) or every < 1:
            return False
        if trainer.should_stop and trainer.fit_loop._can_stop_early:
            return True
        return (trainer.fit_loop.epoch_loop.total_batch_idx + 1) % every == 0

    def _due(self, trainer: pl.Trainer) -> bool:
        """A periodic step, or the last one (max_steps reached, or a callback stops the run).

        Saving the last step here, while Lightning is still inside the epoch, lets a run
        that is resumed with a larger ``max_steps`` continue exactly.
        """
        step = trainer.global_step
        if step == 0 or step == self.last_saved_step:
            return False
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= step
        return step % self.save_every == 0 or last or trainer.should_stop

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._due(trainer):
            return
        if self._validation_follows(trainer):
            return  # saved in on_validation_end, with the validation's state
        self._save_periodic(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        step = trainer.global_step
        value = trainer.callback_metrics.get(self.monitor)
        new_best = value is not None and self._improved(float(value))
        if new_best:
            self.best_score, self.best_step = float(value), step
        saved = self._save_periodic(trainer) if self._due(trainer) else None
        if new_best:
            if saved is not None:
                if trainer.is_global_zero:
                    _link_or_copy(saved, self.dirpath / BEST)
                trainer.strategy.barrier("Checkpointer best")
            else:
                trainer.save_checkpoint(self.dirpath / BEST, weights_only=False)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step > 0 and trainer.global_step != self.last_saved_step:
            self._save_periodic(trainer)

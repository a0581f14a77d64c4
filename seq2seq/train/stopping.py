"""How a training run stops on a signal: which one it was, a checkpoint, and the line to print.

Lightning handles SIGINT and SIGTERM inside ``trainer.fit`` and ends with an exit of its own
(``sys.exit(1)`` on Ctrl-C; on SIGTERM a ``SystemExit`` whose status is 0, which a scheduler
would read as success). :class:`SignalStop` is the callback that sees both: Lightning calls its
``on_exception`` with the KeyboardInterrupt or the SIGTERMException before exiting, and on
SIGTERM it first saves a checkpoint of the last finished batch (single-process runs; in a DDP
run every rank would have to join the save, and in the middle of a validation there is no
state to resume from: the last periodic checkpoint stands then).
:func:`stopped` then builds the :class:`seq2seq.core.signals.Stopped` that ``seq2seq train``
raises: exit status 130 or 143 and one line saying how to continue.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.utilities.exceptions import SIGTERMException

from seq2seq.core import Stopped, defer_sigterm, signal_name

__all__ = ["SignalStop", "stopped"]


class SignalStop(pl.Callback):
    """Records the signal that stopped ``fit``; on SIGTERM saves a checkpoint first.

    Args:
        save: called with the trainer at the end of the batch during which SIGTERM arrived
            (single-process runs only); it writes the checkpoint ``--resume`` continues from.
    """

    def __init__(self, *, save: Callable[[pl.Trainer], object] | None = None) -> None:
        self.save = save
        self.signum: int | None = None
        self.step = 0
        self.saved_step: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        defer_sigterm(True)  # Lightning's handler stops the run at the end of the batch

    def teardown(self, trainer, pl_module, stage: str) -> None:
        defer_sigterm(False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.received_sigterm:  # the signal came during this batch
            self._save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        defer_sigterm(False)
        if isinstance(exception, Stopped):
            self.signum = exception.signum
        elif isinstance(exception, KeyboardInterrupt):
            self.signum = signal.SIGINT
        elif isinstance(exception, SIGTERMException) or trainer.received_sigterm:
            self.signum = signal.SIGTERM
            # Lightning raises at the end of a training batch, or inside a validation (not a
            # state to resume from: the last periodic checkpoint stands then)
            if trainer.training and not trainer.validating:
                self._save(trainer)
        self.step = trainer.global_step

    def _save(self, trainer: pl.Trainer) -> None:
        if self.save is not None and trainer.world_size == 1 and self.saved_step is None:
            self.save(trainer)
            self.saved_step = trainer.global_step


def stopped(callback: SignalStop, last_checkpoint: Path, out_dir: Path) -> Stopped | None:
    """The :class:`Stopped` for a ``fit`` that a signal ended (None if none did)."""
    if callback.signum is None:
        return None
    from seq2seq.train.checkpoints import periodic_checkpoints

    what = f"training stopped by {signal_name(callback.signum)} at step {callback.step}"
    if not last_checkpoint.is_file():
        return Stopped(
            callback.signum,
            f"{what}, before its first checkpoint; run the same command again to start over",
        )
    newest = periodic_checkpoints(last_checkpoint.parent)
    where = f" from its checkpoint of step {int(newest[-1].stem[4:])}" if newest else ""
    return Stopped(
        callback.signum, f"{what}; continue{where} with `seq2seq train --resume {out_dir}`"
    )

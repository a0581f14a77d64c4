"""Signals that tell the truth: SIGINT exits 130, SIGTERM 143, each with one line saying how to
continue.

A scheduler (SLURM, Kubernetes) sends SIGTERM to stop a job and reads the exit status: 0 would
say the job succeeded. So a command stopped by a signal exits with ``128 + signal`` (130 for
SIGINT / Ctrl-C, 143 for SIGTERM), the shell's convention for a process killed by it, and
prints one line: what was stopped and how to continue (``--resume``).

- :func:`raise_on_sigterm` makes SIGTERM raise :class:`Stopped` in the main thread, the way
  SIGINT raises KeyboardInterrupt, so ``finally`` blocks run (a ``translate -o FILE`` keeps its
  ``FILE.partial``) and the CLI prints its line.
- :class:`Stopped` is a ``BaseException``, as KeyboardInterrupt is, not an ``Exception``: the
  signal lands wherever the main thread happens to be, and code that catches ``Exception`` to
  report a failure of its own (torch's ``load_state_dict`` turns any ``Exception`` raised while
  it copies a tensor into a "size mismatch" error; a checkpoint reader turns it into "not a
  readable checkpoint") must let a stop through, so that it is reported as the signal.
- Once Lightning trains, it owns both signals (:func:`defer_sigterm` silences ours): it
  finishes the current batch on SIGTERM and raises its ``SIGTERMException`` (a ``SystemExit``
  with status 0), and on Ctrl-C calls ``sys.exit(1)``. Before that (preparing the data,
  the sanity validation) SIGTERM raises :class:`Stopped` like anywhere else.
  :class:`seq2seq.train.stopping.SignalStop` records which signal it was (and, on SIGTERM, saves a
  checkpoint), and ``seq2seq train`` turns Lightning's exit into :class:`Stopped`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["Stopped", "defer_sigterm", "exit_status", "raise_on_sigterm", "signal_name"]


def signal_name(signum: int) -> str:
    """``SIGTERM``, ``SIGINT``, ... (the number when Python does not know it)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def exit_status(signum: int) -> int:
    """The exit status of a command stopped by ``signum``: 128 + its number (130, 143)."""
    return 128 + int(signum)


class Stopped(BaseException):
    """A command stopped by a signal; ``str()`` is the line to print (what, and how to continue).

    A ``BaseException`` (see the module docstring): ``except Exception`` does not catch it.

    Attributes:
        signum: the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
        exit_status: ``128 + signum``.
    """

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = int(signum)
        self.exit_status = exit_status(signum)
        super().__init__(message or f"stopped by {signal_name(signum)}")


_deferred = False


def _raise_stopped(signum, frame) -> None:
    if not _deferred:
        raise Stopped(signum)


@contextlib.contextmanager
def raise_on_sigterm() -> Iterator[None]:
    """While inside: SIGTERM raises :class:`Stopped` (main thread only; elsewhere a no-op).

    A handler someone else installed (not the default) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def defer_sigterm(deferred: bool) -> None:
    """Make :func:`raise_on_sigterm`'s handler do nothing (``True``) or raise again (``False``).

    Lightning keeps the handler it finds when it installs its own for ``fit`` and calls both;
    while Lightning trains, its own handler stops the run gracefully at the end of the batch,
    so ours must not raise in the middle of it.
    """
    global _deferred
    _deferred = deferred

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
- :func:`signals_deferred` holds the stop signals off over a few steps that must not be cut
  in two (the renames that replace a directory): a signal that arrives meanwhile is delivered,
  as it would have been, when they are done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = [
    "Stopped",
    "defer_sigterm",
    "exit_status",
    "raise_on_sigterm",
    "signal_name",
    "signals_deferred",
]

STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)
"""The signals a user, a shell or a scheduler sends to stop a process (SIGKILL cannot be held)."""


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


@contextlib.contextmanager
def signals_deferred(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While inside, the stop signals wait; on leaving, each one that came is delivered as it
    would have been (its handler runs: KeyboardInterrupt, :class:`Stopped`; or its default
    action ends the process), once the steps inside are all done.

    In the main thread each signal's handler is swapped for one that only records it (a
    signal the process ignores stays ignored). Python runs handlers in the main thread only, so
    in another thread no handler can interrupt the steps: there the signals are blocked for
    this thread (``pthread_sigmask``), which holds off their default action if it would land
    here. SIGKILL cannot be deferred: what must survive it needs an atomic step of its own.
    """
    if threading.current_thread() is not threading.main_thread():
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return
    received: list[int] = []
    previous: dict[int, object] = {}
    active = True

    def record(signum, frame) -> None:
        if active:
            received.append(signum)
        else:  # left installed by a signal that interrupted the restoring: act as the original
            _deliver(signum, previous[signum], frame)

    for signum in signums:
        handler = signal.getsignal(signum)
        if handler is None or handler == signal.SIG_IGN:  # installed outside Python, or ignored
            continue
        previous[signum] = handler
        signal.signal(signum, record)
    try:
        yield
    finally:
        active = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def _deliver(signum: int, handler, frame) -> None:
    """Run ``handler`` for ``signum`` as the signal itself would have."""
    if callable(handler):
        handler(signum, frame)
        return
    signal.signal(signum, handler)  # SIG_DFL: the default action, now
    signal.raise_signal(signum)

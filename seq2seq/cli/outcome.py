"""How a command ends: its exit status and the one line it prints when it fails or is stopped.

User mistakes (:class:`seq2seq.core.errors.UserError`) print one line on stderr and exit 2,
made terminal-safe here (:func:`seq2seq.core.printable`): whatever a message quotes (a
language code, a file name, a line of input), no newline splits it and no escape sequence
reaches the terminal;
debugging (``--debug`` or ``SEQ2SEQ_DEBUG=1``) shows the traceback instead. A command stopped
by SIGINT exits 130, by SIGTERM 143, with one line saying how to continue
(:mod:`seq2seq.core.signals`). The ``seq2seq`` command and the recipes' stages both end this way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable

from seq2seq.core import Stopped, UserError, printable, raise_on_sigterm

__all__ = ["run_command"]


def run_command(
    command: str,
    run: Callable[[], int | None],
    *,
    debug: bool = False,
    sigterm: bool = True,
    on_stop: Callable[[], str | None] = lambda: None,
) -> int:
    """Run ``seq2seq COMMAND``'s work and turn its end into an exit status.

    Args:
        command: the subcommand's name, which starts each line printed.
        run: the work; returns the exit status (None: 0).
        debug: let a UserError raise (its traceback) instead of printing one line.
        sigterm: make SIGTERM raise :class:`~seq2seq.core.signals.Stopped` while ``run`` runs
            (False for a command with its own SIGTERM handling, such as ``serve``).
        on_stop: called after a stop: how to continue, added to the line (None: nothing).

    Returns:
        0, 2 after a UserError, 130 after SIGINT, 143 after SIGTERM.
    """
    debug = debug or os.environ.get("SEQ2SEQ_DEBUG") == "1"
    try:
        with raise_on_sigterm() if sigterm else contextlib.nullcontext():
            return int(run() or 0)
    except UserError as e:
        if debug:
            raise
        print(f"seq2seq {command}: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Stopped) as e:
        stop = e if isinstance(e, Stopped) else Stopped(signal.SIGINT)
        hint = on_stop()
        line = f"seq2seq {command}: {stop}" + (f"; {hint}" if hint else "")
        print(printable(line), file=sys.stderr)
        return stop.exit_status
    except BrokenPipeError:
        # The reader went away (`seq2seq translate ... | head`): not an error of ours.
        sys.stderr.close()
        return 0

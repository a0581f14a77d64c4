"""What a benchmark needs before it runs, and how a missing need is reported.

A benchmark stopped by a user mistake (no model directory, no Multi30K mirror, a bad option)
prints one line on stderr and exits with status 2, as the ``seq2seq`` command does
(:class:`seq2seq.core.UserError`); anything else is a bug and keeps its traceback
(``SEQ2SEQ_DEBUG=1`` shows the traceback of a user mistake too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from seq2seq.core import UserError

__all__ = ["UserError", "model_dir", "mirror", "run"]


def model_dir(path: str | Path) -> Path:
    """Return ``path`` once its manifest and files check out (``make demo`` writes one).

    Raises:
        UserError: not a seq2seq model directory, or one whose files were altered.
    """
    from seq2seq.model import verify_model_dir

    verify_model_dir(path)
    return Path(path)


def mirror(value: str | None) -> str:
    """Return the Multi30K mirror root given by ``--mirror`` or ``SEQ2SEQ_MIRROR``.

    Raises:
        UserError: neither names a directory.
    """
    if not value:
        raise UserError("needs the Multi30K mirror: give --mirror DIR or set SEQ2SEQ_MIRROR")
    if not Path(value).is_dir():
        raise UserError(f"the Multi30K mirror {value} is not a directory")
    return value


def run(main: Callable[[], int | None]) -> None:
    """Run a benchmark's ``main`` and exit with its status (2 and one line for a UserError)."""
    try:
        status = main()
    except UserError as e:
        if os.environ.get("SEQ2SEQ_DEBUG") == "1":
            raise
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        status = 2
    sys.exit(int(status or 0))

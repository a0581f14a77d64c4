"""Text shown on a terminal: control characters escaped, so a sentence cannot move the cursor,
clear the screen, ring the bell or break a log line (validation samples, error messages); and
the one way a progress or status line reaches stderr."""

from __future__ import annotations

import sys

__all__ = ["printable", "say"]


def say(line: str) -> None:
    """Print one status line to stderr at once (training progress, data preparation)."""
    print(line, file=sys.stderr, flush=True)


def printable(text: str) -> str:
    """``text`` with every non-printable character (C0/C1 controls, DEL, line and paragraph
    separators, bidi and other format characters) written as a Python escape (``\\x1b``,
    ``\\u202e``); ordinary letters of any script stay as they are. Spaces stay; tabs become
    ``\\t``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)

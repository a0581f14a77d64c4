"""The one exception type for mistakes a user can cause and fix.

The CLI prints a :class:`UserError` as one line on stderr and exits with status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """A user-caused error (missing file, bad input, config typo): one clear message, no traceback."""

"""The server's one logger.

Every module of the server logs under the package's name, ``seq2seq.serve``, which its log
lines show (``INFO:     seq2seq.serve: serving ...``).
"""

from __future__ import annotations

import logging

__all__ = ["log"]

log = logging.getLogger("seq2seq.serve")

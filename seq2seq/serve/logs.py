"""The server's one logger.

Every module of the server logs under the name ``seq2seq.serve.server``, which its log lines
show (``INFO:     seq2seq.serve.server: serving ...``), so one name serves them all.
"""

from __future__ import annotations

import logging

__all__ = ["log"]

log = logging.getLogger("seq2seq.serve.server")

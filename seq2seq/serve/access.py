"""Who may translate, and how often: API keys and per-minute rate limits, in LibreTranslate's
shapes.

- An unknown (or removed) key is 403 ``{"error": "Invalid API key"}``.
- Under ``--require-api-key`` a request without a key is 403 with a one-line error.
- A client over its limit is 429 ``{"error": "Slowdown: N per 1 minute"}``, with
  ``Retry-After``: the seconds until its window lets a request through again. The app answers
  it after ``--slowdown-delay`` (seq2seq.serve.app), so that a client retrying at once on its
  connections costs the server little.

Limits count per key (the key's own ``req_limit``, or the server's ``--req-limit``), so another
key from the same address keeps working; requests without a key count per client address
against ``--req-limit`` (no limit when it is unset). The counting is the ``limits`` library's
moving window in memory (one process serves, so memory is the right store): a request is let
through when fewer than N were let through in the 60 seconds before it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.serve.keys import KeyTable

__all__ = ["Access", "Client"]


class Client:
    """Who a request is: its key (None: keyless, counted by ``address``)."""

    __slots__ = ("address", "key")

    def __init__(self, key: str | None, address: str) -> None:
        self.key = key
        self.address = address


class Access:
    """Checks a request's key and counts it against its limit.

    Args:
        keys: the live key table (None: the server takes no keys; any ``api_key`` is ignored,
            as LibreTranslate ignores it without ``--api-keys``).
        require_key: refuse requests without a key.
        req_limit: requests per minute per client (a key without its own limit, or an address
            without a key); 0: no limit.
    """

    def __init__(self, keys: KeyTable | None, *, require_key: bool, req_limit: int) -> None:
        self.keys = keys
        self.require_key = require_key
        self.req_limit = req_limit
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._items: dict[int, RateLimitItemPerMinute] = {}

    def admit(self, key: str | None, address: str) -> Client:
        """The client a request is, once its key is known and its limit not reached.

        Args:
            key: the request's ``api_key`` (None or empty: none).
            address: the client's address (what keyless requests are counted by).

        Raises:
            RequestError: 403 for an unknown key or a missing required one, 429 over the limit.
        """
        key = key or None
        if self.keys is None:
            key = None
        limit = self.req_limit
        if key is not None:
            assert self.keys is not None
            known, own = self.keys.lookup(key)
            if not known:
                raise RequestError(403, "Invalid API key")
            if own is not None:
                limit = own
        elif self.require_key:
            raise RequestError(
                403, "Please contact the server operator to get an API key (send it as api_key)"
            )
        if limit > 0:
            item = self._items.get(limit)
            if item is None:
                item = self._items[limit] = RateLimitItemPerMinute(limit)
            who = f"key:{key}" if key is not None else f"addr:{address}"
            if not self._limiter.hit(item, who):
                reset = self._limiter.get_window_stats(item, who).reset_time
                raise RequestError(
                    429,
                    f"Slowdown: {limit} per 1 minute",
                    retry_after=max(1, math.ceil(reset - time.time())),
                )
        return Client(key, address)

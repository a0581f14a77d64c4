"""Who may translate, and how often: API keys and per-minute rate limits, in LibreTranslate's
shapes.

- An unknown (or removed) key is 403 ``{"error": "Invalid API key"}``.
- Under ``--require-api-key`` a request without a key is 403 with a one-line error.
- A key file that cannot be read now (:class:`~seq2seq.serve.keys.KeysUnavailable`) is 503
  ``{"error": "API keys cannot be checked right now; retry later"}`` with ``Retry-After``, for
  requests with a key only (the cause is in the server's log, never in the answer).
- A client over its limit is 429 ``{"error": "Slowdown: N per 1 minute"}``, with
  ``Retry-After``: the seconds until its window lets a request through again. The app answers
  it after ``--slowdown-delay`` (seq2seq.serve.app), so that a client retrying at once on its
  connections costs the server little.

Limits count per key (the key's own ``req_limit``, or the server's ``--req-limit``), so another
key from the same address keeps working; requests without a key count per client address
against ``--req-limit`` (no limit when it is unset). The count is a moving window: a request is
let through when fewer than N were let through in the 60 seconds before it. Keys and counts live
in the state backend (:mod:`seq2seq.serve.state`): this process's memory and the SQLite key file,
or Redis (``--redis``), where one Lua script counts with the same window for every worker and
replica.

The in-memory window is :class:`MovingWindow`, not the ``limits`` library's ``MemoryStorage``: that
storage starts a timer thread from the request path whenever its last one has ended (every 10
ms under load), and ``Thread.start`` waits for the new thread to run, which on a busy server
hands the GIL to a batch thread and back, milliseconds each time (benchmarks/serve_overhead.py
and docs/benchmarks.md measure both). A window costs no thread: each client's deque of
admission times is trimmed when the client comes back, and clients not seen for a minute are
dropped every :data:`SWEEP_EVERY` admissions.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.serve.state import State

__all__ = ["Access", "Client", "MovingWindow", "SWEEP_EVERY"]

SWEEP_EVERY = 10_000
"""Admissions between two sweeps of the clients not seen for a window."""


class Client:
    """Who a request is: its key (None: keyless, counted by ``address``)."""

    __slots__ = ("address", "key")

    def __init__(self, key: str | None, address: str) -> None:
        self.key = key
        self.address = address


class MovingWindow:
    """Per-client moving-window counts: at most N admissions in any ``window_s`` seconds.

    Args:
        window_s: the window (60: LibreTranslate's "N per 1 minute").
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._times: dict[str, collections.deque[float]] = {}
        self._since_sweep = 0

    def hit(self, who: str, limit: int) -> float | None:
        """Admit one request of ``who`` if fewer than ``limit`` were admitted in the window
        before now: None; else the seconds until one would be (nothing is counted)."""
        now = self._clock()
        times = self._times.get(who)
        if times is None:
            times = self._times[who] = collections.deque()
        cutoff = now - self.window_s
        while times and times[0] <= cutoff:
            times.popleft()
        if len(times) >= limit:  # (a lowered limit leaves more than limit times)
            return times[len(times) - limit] + self.window_s - now
        times.append(now)
        self._since_sweep += 1
        if self._since_sweep >= SWEEP_EVERY:
            self._sweep(cutoff)
        return None

    def _sweep(self, cutoff: float) -> None:
        self._since_sweep = 0
        for who in [w for w, t in self._times.items() if not t or t[-1] <= cutoff]:
            del self._times[who]

    def __len__(self) -> int:
        """Clients with a count (for tests)."""
        return len(self._times)


class Access:
    """Checks a request's key and counts it against its limit, in the state backend
    (:mod:`seq2seq.serve.state`: the local one, or Redis shared by every worker and replica).

    Args:
        state: the backend (its ``keys_enabled`` False: the server takes no keys; any
            ``api_key`` is ignored, as LibreTranslate ignores it without ``--api-keys``).
        require_key: refuse requests without a key.
        req_limit: requests per minute per client (a key without its own limit, or an address
            without a key); 0: no limit.
    """

    def __init__(self, state: State, *, require_key: bool, req_limit: int) -> None:
        self.state = state
        self.require_key = require_key
        self.req_limit = req_limit

    async def check_request(self, request, fields: dict) -> Client:
        """:meth:`admit` of a request: its key is ``api_key`` in the body's ``fields`` or else
        in the query string.

        Raises:
            RequestError: as :meth:`admit`, and 400 for an ``api_key`` field that is not a
                string (never read as "no key").
        """
        key = fields.get("api_key")
        if key is not None and not isinstance(key, str):
            raise RequestError(400, "invalid request: field 'api_key' must be a string")
        key = key or request.query_params.get("api_key")
        address = request.client.host if request.client else "unknown"
        return await self.admit(key, address)

    async def admit(self, key: str | None, address: str) -> Client:
        """The client a request is, once its key is known and its limit not reached.

        Args:
            key: the request's ``api_key`` (None or empty: none).
            address: the client's address (what keyless requests are counted by).

        Raises:
            RequestError: 403 for an unknown key or a missing required one, 429 over the limit,
                503 when the keys cannot be checked (a key file that cannot be read, Redis
                not answering).
        """
        key = key or None
        if not self.state.keys_enabled:
            key = None
        if key is None:
            if self.require_key:
                raise RequestError(
                    403, "Please contact the server operator to get an API key (send it as api_key)"
                )
            if self.req_limit <= 0:  # nothing to look up or count: the state is not asked
                return Client(None, address)
        verdict = await self.state.admit(key, address, self.req_limit)
        if not verdict.known:
            raise RequestError(403, "Invalid API key")
        if verdict.wait is not None:
            raise RequestError(
                429,
                f"Slowdown: {verdict.limit} per 1 minute",
                retry_after=max(1, math.ceil(verdict.wait)),
            )
        return Client(key, address)

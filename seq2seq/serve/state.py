"""The server's shared state behind one small interface: API keys, rate-limit counts and
translated files.

Two backends implement :class:`State`, one module each:

- :class:`~seq2seq.serve.state_local.LocalState` (no ``--redis``): the SQLite key file
  (:mod:`seq2seq.serve.keys`), counts in this process's memory
  (:class:`~seq2seq.serve.access.MovingWindow`) and files in its memory
  (:class:`~seq2seq.serve.files.FileStore`): right for one process.
- :class:`~seq2seq.serve.state_redis.RedisState` (``--redis URL``): all three in Redis, so
  that every worker process and every replica sees the same keys, counts and files.

:func:`seq2seq.serve.app.open_state` picks one from the server's config.

The policy (which key is required, what a 403 or 429 says) is
:class:`~seq2seq.serve.access.Access`'s; a backend only answers :meth:`State.admit`: is the key
known, what is its limit, and may one more request through. A backend that cannot answer
(Redis down) raises :class:`~seq2seq.serve.bodies.RequestError` 503 with ``Retry-After``
(:func:`unavailable`); the requests that need no state are served as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.serve.files import StoredFile

__all__ = ["Admission", "State", "unavailable", "who_counts"]

RETRY_AFTER_S = 2
"""The ``Retry-After`` of a 503 for a state store that does not answer."""


@dataclass(frozen=True)
class Admission:
    """A backend's answer about one request.

    Attributes:
        known: the key is in the key store (True for a request without a key).
        limit: the requests per minute it was counted against (0: none).
        wait: None: admitted (and counted); else the seconds until the window lets one more
            through (nothing was counted).
    """

    known: bool
    limit: int = 0
    wait: float | None = None


def who_counts(key: str | None, address: str) -> str:
    """The name a request is counted under: its key, or its address without one."""
    return f"key:{key}" if key is not None else f"addr:{address}"


def unavailable(what: str) -> RequestError:
    """The 503 of a state store that does not answer (``what`` names it)."""
    return RequestError(
        503,
        f"the server's shared state ({what}) is not answering; try again shortly",
        retry_after=RETRY_AFTER_S,
    )


class State(Protocol):
    """What the app needs of a state backend.

    Attributes:
        keys_enabled: the server takes API keys (a key store is configured).
        description: what the state is, for logs and ``GET /v1/models``.
    """

    keys_enabled: bool
    description: str

    async def start(self) -> None:
        """Connect (called on the app's event loop, at its startup)."""

    async def close(self) -> None:
        """Disconnect (at the app's shutdown)."""

    async def admit(self, key: str | None, address: str, req_limit: int) -> Admission:
        """Look ``key`` up and count the request against its limit (the key's own, else
        ``req_limit``; without a key, ``address`` against ``req_limit``), atomically: of any
        number of concurrent calls for one client, exactly as many are admitted as the
        moving window allows.

        Raises:
            RequestError: 503, the store does not answer.
        """
        ...

    async def put_file(self, name: str, data: bytes | str) -> str:
        """Keep ``data`` (a str: as UTF-8) as the translated file ``name`` for ``--file-expiry`` seconds; its
        token (the URL's capability: 43 URL-safe characters).

        Raises:
            RequestError: 503, the store does not answer.
        """
        ...

    async def get_file(self, token: str) -> StoredFile | None:
        """The file under ``token``; None: unknown or expired.

        Raises:
            RequestError: 503, the store does not answer.
        """
        ...

    async def ping(self) -> bool:
        """Whether the store answers now (``GET /ready``)."""
        ...

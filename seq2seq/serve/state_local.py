"""The state of one server process (no ``--redis``): the SQLite key file, rate-limit counts
and translated files in this process's memory (:class:`~seq2seq.serve.state.State`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from seq2seq.serve.access import MovingWindow
from seq2seq.serve.bodies import RequestError
from seq2seq.serve.files import FileStore
from seq2seq.serve.keys import KeysUnavailable, KeyTable
from seq2seq.serve.state import Admission, who_counts

if TYPE_CHECKING:
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.files import StoredFile

__all__ = ["LocalState"]


class LocalState:
    """Keys from ``config.api_keys`` (None: the server takes no keys), counts and files in
    memory.

    Raises:
        UserError: the key file is missing or not a key database.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.keys = KeyTable(config.api_keys) if config.api_keys else None
        self.keys_enabled = self.keys is not None
        self.description = f"key file {config.api_keys}" if config.api_keys else "in memory"
        self.window = MovingWindow()
        self.files = FileStore(config.file_expiry_s, max_bytes=64 * config.max_file_bytes)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def check(
        self, key: str | None, address: str, req_limit: int, *, refresh: bool = True
    ) -> Admission:
        """:meth:`admit` without its wait for the key file (``refresh``: check the file first
        when due, on this thread).

        Raises:
            RequestError: 503 while the key file cannot be read (the cause is in the log).
        """
        limit = req_limit
        if key is not None:
            assert self.keys is not None
            try:
                known, own = self.keys.lookup(key, refresh=refresh)
            except KeysUnavailable:
                raise RequestError(
                    503,
                    "API keys cannot be checked right now; retry later",
                    retry_after=max(1, math.ceil(self.keys.max_age_s)),
                ) from None
            if not known:
                return Admission(known=False)
            if own is not None:
                limit = own
        if limit <= 0:
            return Admission(known=True)
        return Admission(True, limit, self.window.hit(who_counts(key, address), limit))

    async def admit(self, key: str | None, address: str, req_limit: int) -> Admission:
        # the key file is checked on a worker thread when due (SQLite may wait for a lock:
        # never on the event loop)
        if key is not None and self.keys is not None and self.keys.due:
            await run_in_threadpool(self.keys.refresh)
        return self.check(key, address, req_limit, refresh=False)

    async def put_file(self, name: str, data: bytes | str) -> str:
        return self.files.put(name, data)

    async def get_file(self, token: str) -> StoredFile | None:
        return self.files.get(token)

    async def ping(self) -> bool:
        return True

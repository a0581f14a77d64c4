"""The state of one server process (no ``--redis``): the SQLite key file, rate-limit counts
and translated files in this process's memory (:class:`~seq2seq.serve.state.State`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from seq2seq.serve.access import MovingWindow
from seq2seq.serve.files import FileStore
from seq2seq.serve.keys import KeyTable
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

    def check(self, key: str | None, address: str, req_limit: int) -> Admission:
        """:meth:`admit`, called from any thread (the event loop's, in the server)."""
        limit = req_limit
        if key is not None:
            assert self.keys is not None
            known, own = self.keys.lookup(key)
            if not known:
                return Admission(known=False)
            if own is not None:
                limit = own
        if limit <= 0:
            return Admission(known=True)
        return Admission(True, limit, self.window.hit(who_counts(key, address), limit))

    async def admit(self, key: str | None, address: str, req_limit: int) -> Admission:
        return self.check(key, address, req_limit)

    async def put_file(self, name: str, text: str) -> str:
        return self.files.put(name, text)

    async def get_file(self, token: str) -> StoredFile | None:
        return self.files.get(token)

    async def ping(self) -> bool:
        return True

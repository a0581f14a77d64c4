"""API keys: the SQLite file that ``seq2seq keys`` manages and ``seq2seq serve --api-keys`` reads.

The file holds one table, as LibreTranslate's ``api_keys.db`` does: ``api_keys(api_key TEXT
PRIMARY KEY, req_limit INTEGER)``, where ``req_limit`` is the key's requests per minute (NULL:
the server's ``--req-limit``). It is created with mode 0600: a key is a secret.

A running server sees keys added and removed within a second, without a restart:
:class:`KeyTable` keeps the keys in a dict and, at a lookup at least ``max_age_s`` (1 s) after its
last check, asks SQLite's ``PRAGMA data_version`` (one query on an open connection, which changes
whenever another connection commits) and the file's inode (a file replaced under the same name),
and re-reads the table only when either changed. It does not check at every lookup: the query
and the ``stat`` release the GIL, and on a busy server the event loop then waits for another
thread's switch interval (5 ms) to get it back (benchmarks/serve_overhead.py measures both).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
from pathlib import Path

from seq2seq.core import UserError

__all__ = ["KEY_ALPHABET", "KeyStore", "KeyTable", "check_req_limit", "new_key"]

KEY_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-")
"""The characters of a key (URL-safe: a key may travel in a query string)."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS api_keys (api_key TEXT NOT NULL PRIMARY KEY, req_limit INTEGER)"
)


def new_key() -> str:
    """A new random key: 32 characters of :data:`KEY_ALPHABET` (192 random bits), never
    starting with '-' (``seq2seq keys remove KEY`` would read it as an option)."""
    key = secrets.token_urlsafe(24)
    while key.startswith("-"):
        key = secrets.token_urlsafe(24)
    return key


def check_req_limit(req_limit: int | None) -> None:
    """A key's own requests per minute: None (the server's) or at least 1.

    Raises:
        UserError: below 1.
    """
    if req_limit is not None and req_limit < 1:
        raise UserError(f"--req-limit must be >= 1, got {req_limit}")


def _connect(path: Path) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(path, timeout=10, check_same_thread=False)
        con.execute(_SCHEMA)
        con.commit()
    except sqlite3.DatabaseError as e:
        raise UserError(f"{path}: not a usable API key database ({e})") from None
    return con


class KeyStore:
    """The key file, opened for changes (``seq2seq keys``).

    Args:
        path: the SQLite file.
        create: make the file (mode 0600) if it is missing; False: a missing file is an error.

    Raises:
        UserError: the file is missing (without ``create``), or not an SQLite key database.
    """

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        if not self.path.is_file():
            if not create:
                raise UserError(
                    f"API key database not found: {self.path} (create it with "
                    f"`seq2seq keys add --db {self.path}`)"
                )
            if not self.path.parent.is_dir():
                raise UserError(f"folder not found for the API key database: {self.path.parent}")
            # O_EXCL: created here with 0600 before SQLite opens it, never world-readable.
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._con = _connect(self.path)

    def close(self) -> None:
        self._con.close()

    def add(self, req_limit: int | None = None) -> str:
        """A new random key (32 characters of :data:`KEY_ALPHABET`), stored with ``req_limit``
        requests per minute (None: the server's ``--req-limit``).

        Raises:
            UserError: ``req_limit`` below 1.
        """
        check_req_limit(req_limit)
        key = new_key()
        with self._con:
            self._con.execute("INSERT INTO api_keys VALUES (?, ?)", (key, req_limit))
        return key

    def remove(self, key: str) -> None:
        """Remove ``key``.

        Raises:
            UserError: no such key.
        """
        with self._con:
            gone = self._con.execute("DELETE FROM api_keys WHERE api_key = ?", (key,)).rowcount
        if not gone:
            raise UserError(f"no such API key in {self.path}: {key}")

    def list(self) -> list[tuple[str, int | None]]:
        """Every ``(key, req_limit)``, in the order they were added."""
        return self._con.execute(
            "SELECT api_key, req_limit FROM api_keys ORDER BY rowid"
        ).fetchall()


class KeyTable:
    """The keys as a running server sees them: a dict re-read when the file changes.

    Args:
        path: the SQLite file (it must exist: ``seq2seq keys add`` creates it).
        max_age_s: the longest a lookup trusts the dict before checking the file again.

    Raises:
        UserError: the file is missing or not a key database.
    """

    def __init__(self, path: str | Path, *, max_age_s: float = 1.0) -> None:
        self.path = Path(path)
        self.max_age_s = max_age_s
        self._checked = -float("inf")
        if not self.path.is_file():
            raise UserError(
                f"--api-keys: {self.path} not found (create it with "
                f"`seq2seq keys add --db {self.path}`)"
            )
        self._con: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._version: int | None = None
        self._keys: dict[str, int | None] = {}
        self._refresh()

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.max_age_s:
            return
        self._checked = now
        try:
            inode = os.stat(self.path).st_ino
        except OSError:  # removed: no key is valid until it is back
            self._keys, self._inode, self._version = {}, None, None
            return
        if inode != self._inode or self._con is None:
            if self._con is not None:
                self._con.close()
            self._con = _connect(self.path)
            self._inode, self._version = inode, None
        version = self._con.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            rows = self._con.execute("SELECT api_key, req_limit FROM api_keys").fetchall()
            self._keys = dict(rows)
            self._version = version

    def lookup(self, key: str) -> tuple[bool, int | None]:
        """``(known, req_limit)`` of ``key``, from the file as it was at most ``max_age_s``
        ago."""
        self._refresh()
        if key in self._keys:
            return True, self._keys[key]
        return False, None

    def __len__(self) -> int:
        self._refresh()
        return len(self._keys)

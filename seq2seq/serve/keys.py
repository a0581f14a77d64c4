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
The check is blocking work (a locked file waits up to :data:`BUSY_TIMEOUT_S`):
:meth:`KeyTable.refresh` is what the server runs on a worker thread, never on the event loop.

A key file that cannot be read while the server runs (corrupt, replaced by something that is
no key database, locked by another process, readable by other users) makes every keyed lookup
raise :class:`KeysUnavailable` until it can be read again: the server answers those requests
503 and keeps serving the ones that need no key. The cause is logged once when it starts and
once when it ends, not once a request.

The file holds secrets, so it must be private: :class:`KeyStore` creates it with mode 0600 from
its first byte (through a symlink too: the link's target is created), and both classes refuse a
file that its group or other users may read or write, saying ``chmod 600``.
"""

from __future__ import annotations

import os
import secrets
import shlex
import sqlite3
import stat
import threading
import time
from pathlib import Path

from seq2seq.core import UserError, printable
from seq2seq.serve.logs import log

__all__ = [
    "BUSY_TIMEOUT_S",
    "KEY_ALPHABET",
    "KeyStore",
    "KeyTable",
    "KeysUnavailable",
    "check_req_limit",
    "new_key",
]

BUSY_TIMEOUT_S = 1.0
"""How long the server waits for a key file another process holds locked before the keyed
request gets its 503 (``seq2seq keys`` itself waits 10 s)."""

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


class KeysUnavailable(Exception):
    """The key file cannot be read now (its cause is in the server's log): keyed requests
    cannot be checked."""


def check_private(path: Path) -> None:
    """Refuse a key file that its group or other users may read or write.

    Raises:
        UserError: the file's mode lets others in (says how to fix it).
    """
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        shown = printable(str(path))
        raise UserError(
            f"API key database {shown} is readable or writable by other users (mode "
            f"{mode:04o}); make it private: chmod 600 {shlex.quote(shown)}"
        )


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 from its first byte: a dangling symlink's target is
    created (0600, not the umask's mode SQLite would give it); an existing file is left."""
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise UserError(f"folder not found for the API key database: {target.parent}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        os.close(os.open(target, flags, 0o600))
    except FileExistsError:
        pass  # made meanwhile by another process: its mode is checked like any file's
    except OSError as e:
        raise UserError(f"cannot create the API key database {path}: {e.strerror or e}") from None


def _connect(path: Path, timeout: float = 10.0) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(path, timeout=timeout, check_same_thread=False)
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
            # created here with 0600 before SQLite opens it, never readable by others
            _create_private(self.path)
        check_private(self.path)
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
        UserError: the file is missing, not a key database or not private (at start; later
            failures are :class:`KeysUnavailable` at lookup).
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
        check_private(self.path)
        self._con: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._version: int | None = None
        self._keys: dict[str, int | None] = {}
        self._failure: str | None = None  # why the file cannot be read now (None: it can)
        self._lock = threading.Lock()
        self._read()  # at start a failure is the UserError it raises
        self._checked = time.monotonic()

    @property
    def due(self) -> bool:
        """Whether the next lookup checks the file (:meth:`refresh` would read it)."""
        return time.monotonic() - self._checked >= self.max_age_s

    def refresh(self) -> None:
        """Check the file if the dict is older than ``max_age_s`` (blocking: the server runs
        it on a worker thread). One thread checks at a time; another one meanwhile goes on
        with the dict as it is."""
        if not self.due or not self._lock.acquire(blocking=False):
            return
        try:
            if not self.due:
                return
            self._checked = time.monotonic()
            try:
                self._read()
            except (UserError, sqlite3.Error, OSError) as e:
                self._fail(e)
            else:
                if self._failure is not None:
                    log.warning("the API key file can be read again: keys are checked again")
                    self._failure = None
        finally:
            self._lock.release()

    def _fail(self, error: BaseException) -> None:
        """Keep keyed requests out until the file can be read; log the cause once."""
        reason = str(error) if isinstance(error, UserError) else f"{self.path}: {error}"
        if self._failure is None:
            log.warning(
                "the API key file cannot be read (%s); requests with a key get 503 until it "
                "can (the server looks again every %g s)",
                reason, self.max_age_s,
            )  # fmt: skip
        self._failure = reason
        if self._con is not None:  # a fresh connection next time (the file may be replaced)
            self._con.close()
        self._con, self._inode, self._version = None, None, None

    def _read(self) -> None:
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:  # removed: no key is valid until it is back
            self._keys, self._inode, self._version = {}, None, None
            return
        if inode != self._inode or self._con is None:
            check_private(self.path)
            if self._con is not None:
                self._con.close()
                self._con = None
            self._con = _connect(self.path, timeout=BUSY_TIMEOUT_S)
            self._inode, self._version = inode, None
        version = self._con.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            rows = self._con.execute("SELECT api_key, req_limit FROM api_keys").fetchall()
            self._keys = dict(rows)
            self._version = version

    def lookup(self, key: str, *, refresh: bool = True) -> tuple[bool, int | None]:
        """``(known, req_limit)`` of ``key``, from the file as it was at most ``max_age_s``
        ago.

        Args:
            key: the key.
            refresh: check the file first if due (False: the caller ran :meth:`refresh` off
                the event loop).

        Raises:
            KeysUnavailable: the file cannot be read now.
        """
        if refresh:
            self.refresh()
        if self._failure is not None:
            raise KeysUnavailable(self._failure)
        if key in self._keys:
            return True, self._keys[key]
        return False, None

    def __len__(self) -> int:
        self.refresh()
        return len(self._keys)

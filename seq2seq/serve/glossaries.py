"""Glossaries on the server: a request's own, and named ones stored per API key.

A request gives ``"glossary"`` (a list of ``{"source", "target"}`` entries, or the name of a
stored glossary) and ``"do_not_translate"`` (a list of terms); :func:`request_glossary` turns
them into one :class:`~seq2seq.decode.glossary.Glossary` (the matching rules and how it is
applied are that module's).

Named glossaries are stored per API key (``seq2seq glossary add --db KEYS.db --key KEY --name
NAME --file terms.tsv``) behind a small interface, :class:`GlossaryStore`; the one backend
here, :class:`SqliteGlossaries`, is a table ``glossaries(api_key, name, entries)`` in the key
database itself, next to the key table (seq2seq.serve.keys) but not part of it. A request
names a glossary of its own key only: a name another key stored is "no glossary named ..." to
it, exactly as a name nobody stored.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from seq2seq.core import UserError
from seq2seq.decode import Glossary
from seq2seq.serve.bodies import RequestError

__all__ = ["GlossaryStore", "NAME_RE", "SqliteGlossaries", "request_glossary"]

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""What a glossary's name may be."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS glossaries (api_key TEXT NOT NULL, name TEXT NOT NULL, "
    "entries TEXT NOT NULL, PRIMARY KEY (api_key, name))"
)

Entries = list[tuple[str, str]]


class GlossaryStore(Protocol):
    """Named glossaries per API key: what the server and ``seq2seq glossary`` need."""

    def put(self, key: str, name: str, entries: Entries) -> None:
        """Store (or replace) ``key``'s glossary ``name``."""
        ...

    def get(self, key: str, name: str) -> Entries | None:
        """``key``'s glossary ``name``, or None."""
        ...

    def names(self, key: str | None = None) -> list[tuple[str, str, int]]:
        """``(key, name, entries)`` of each glossary (of ``key`` only, when given)."""
        ...

    def remove(self, key: str, name: str) -> bool:
        """Remove ``key``'s glossary ``name``; False when there was none."""
        ...


def _encode(entries: Entries) -> str:
    return "".join(f"{s}\t{t}\n" for s, t in entries)


def _decode(text: str) -> Entries:
    return [tuple(line.split("\t", 1)) for line in text.splitlines()]  # type: ignore[misc]


class SqliteGlossaries:
    """Named glossaries in the SQLite key database (one row per glossary, its entries as
    ``SOURCE<TAB>TARGET`` lines).

    Args:
        path: the key database (it must exist: ``seq2seq keys add`` creates it).

    Raises:
        UserError: the file is missing or not an SQLite database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"API key database not found: {self.path}")
        try:
            self._con = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
            self._con.execute(_SCHEMA)
            self._con.commit()
        except sqlite3.DatabaseError as e:
            raise UserError(f"{self.path}: not a usable API key database ({e})") from None
        self._parsed: dict[tuple[str, str], tuple[str, Glossary]] = {}

    def close(self) -> None:
        self._con.close()

    def put(self, key: str, name: str, entries: Entries) -> None:
        if not NAME_RE.fullmatch(name):
            raise UserError(f"a glossary name is 1 to 64 of A-Z a-z 0-9 . _ -, got {name!r}")
        with self._con:
            self._con.execute(
                "INSERT OR REPLACE INTO glossaries VALUES (?, ?, ?)", (key, name, _encode(entries))
            )

    def _text(self, key: str, name: str) -> str | None:
        row = self._con.execute(
            "SELECT entries FROM glossaries WHERE api_key = ? AND name = ?", (key, name)
        ).fetchone()
        return row[0] if row else None

    def get(self, key: str, name: str) -> Entries | None:
        text = self._text(key, name)
        return None if text is None else _decode(text)

    def glossary(self, key: str, name: str) -> Glossary | None:
        """``key``'s glossary ``name`` as a :class:`Glossary` (parsed once per version)."""
        text = self._text(key, name)
        if text is None:
            self._parsed.pop((key, name), None)
            return None
        cached = self._parsed.get((key, name))
        if cached is None or cached[0] != text:
            cached = (text, Glossary(_decode(text)))
            self._parsed[(key, name)] = cached
        return cached[1]

    def names(self, key: str | None = None) -> list[tuple[str, str, int]]:
        query = "SELECT api_key, name, entries FROM glossaries"
        rows = (
            self._con.execute(query + " WHERE api_key = ? ORDER BY name", (key,))
            if key is not None
            else self._con.execute(query + " ORDER BY api_key, name")
        )
        return [(k, n, text.count("\n")) for k, n, text in rows]

    def remove(self, key: str, name: str) -> bool:
        with self._con:
            cur = self._con.execute(
                "DELETE FROM glossaries WHERE api_key = ? AND name = ?", (key, name)
            )
        self._parsed.pop((key, name), None)
        return cur.rowcount > 0


def request_glossary(
    glossary: str | Sequence | None,
    do_not_translate: Sequence[str] | None,
    *,
    key: str | None,
    store: SqliteGlossaries | None,
) -> Glossary | None:
    """The glossary a request asks for (None: none), its shapes already checked by the schema.

    Args:
        glossary: a stored glossary's name, or entries (objects with ``source`` and
            ``target``, or pairs).
        do_not_translate: terms to keep as they are.
        key: the request's API key (a named glossary is looked up among its own).
        store: the named glossaries (None: the server has no key database).

    Raises:
        RequestError: 400 naming the field: an unknown name, no key, a bad entry.
    """
    if glossary is None and not do_not_translate:
        return None
    base: Glossary | None = None
    entries: list[tuple[str, str]] = []
    if isinstance(glossary, str):
        if store is None:
            raise RequestError(
                400, "glossary: named glossaries need a server with --api-keys (send entries)"
            )
        if key is None:
            raise RequestError(400, f"glossary: {glossary!r} is a named glossary; send api_key")
        base = store.glossary(key, glossary)
        if base is None:
            raise RequestError(400, f"glossary: no glossary named {glossary!r} for this API key")
    elif glossary is not None:
        entries = [(e.source, e.target) if hasattr(e, "source") else tuple(e) for e in glossary]
    try:
        if base is not None and not do_not_translate:
            return base
        return Glossary(base.terms if base is not None else entries, do_not_translate or ())
    except UserError as e:
        field = "do_not_translate" if str(e).startswith("do-not-translate") else "glossary"
        raise RequestError(400, f"{field}: {e}") from None

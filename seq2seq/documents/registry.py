"""Formats by suffix, and the entry points: :func:`open_document` and
:func:`translate_document`.

A new format is one module with ``read`` (:mod:`seq2seq.documents.base`) and one line in
:data:`FORMATS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import PurePath

from lxml.etree import LxmlError

from seq2seq.core import UserError
from seq2seq.documents.base import Document, Limits
from seq2seq.documents.html import RunTranslation

__all__ = ["FORMATS", "format_for", "open_document", "translate_document"]

FORMATS: dict[str, tuple[str, str]] = {
    ".txt": ("text", "text/plain; charset=utf-8"),
    ".html": ("htmlfile", "text/html; charset=utf-8"),
    ".htm": ("htmlfile", "text/html; charset=utf-8"),
    ".docx": (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    ".pptx": (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
    ".xlsx": ("xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ".odt": ("odf", "application/vnd.oasis.opendocument.text"),
    ".odp": ("odf", "application/vnd.oasis.opendocument.presentation"),
    ".epub": ("epub", "application/epub+zip"),
    ".srt": ("subtitles", "application/x-subrip; charset=utf-8"),
    ".vtt": ("subtitles", "text/vtt; charset=utf-8"),
    ".md": ("markdown", "text/markdown; charset=utf-8"),
    ".po": ("po", "text/x-gettext-translation; charset=utf-8"),
    ".xlf": ("xliff", "application/xliff+xml"),
    ".xliff": ("xliff", "application/xliff+xml"),
}
"""Suffix -> (the module of :mod:`seq2seq.documents` that reads it, the media type it is
served as)."""


def format_for(name: str) -> tuple[str, str]:
    """(module, media type) of the file ``name``, by its suffix; UserError for another one."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in FORMATS:
        known = " ".join(sorted(FORMATS))
        raise UserError(f"{name}: file type {suffix or '(none)'!r} is not supported ({known})")
    return FORMATS[suffix]


def open_document(
    name: str, data: bytes, *, inline: bool = True, limits: Limits | None = None
) -> Document:
    """The file ``data`` (named ``name``: its suffix picks the format), cut into runs.

    Args:
        inline: keep runs with formatting inside them whole (their translation then needs
            word alignments); False: every piece of differently formatted text on its own.
        limits: what an archive may unpack to (None: :class:`Limits`' defaults).

    Raises:
        UserError: an unknown suffix, or a file that is corrupt, encrypted, not of its
            suffix's format, over the limits or unsafe (one line naming the problem).
    """
    module, _ = format_for(name)
    reader = importlib.import_module(f"seq2seq.documents.{module}")
    try:
        return reader.read(data, name=name, inline=inline, limits=limits or Limits())
    except UserError:
        raise
    except (
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        OSError,
        RecursionError,
        LxmlError,
    ) as e:
        # a library's complaint about a malformed file (never a traceback)
        raise UserError(f"{name}: not a valid {PurePath(name).suffix} file ({e})") from None


def translate_document(
    name: str,
    data: bytes,
    translate_runs: Callable[[list[str], list[tuple[int, ...]]], list[RunTranslation]],
    *,
    inline: bool = True,
    limits: Limits | None = None,
) -> bytes:
    """``data`` translated: ``translate_runs(texts, boundaries)`` gives one RunTranslation per
    text (:mod:`seq2seq.documents.boundaries` says which sentences need word alignments)."""
    doc = open_document(name, data, inline=inline, limits=limits)
    texts = doc.texts
    return doc.write(translate_runs(texts, doc.boundaries) if texts else [])

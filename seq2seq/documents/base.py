"""The one interface of a file format: bytes in, the runs of text to translate, bytes out.

A format is a module with a ``read(data, *, name, inline, limits) -> Document`` function (and
the suffixes and media type it is registered with, :mod:`seq2seq.documents.registry`). A
:class:`Document` says which texts to translate (:attr:`Document.texts`, one per run: a
paragraph, a cell, a cue, an entry) and writes the file back from their translations. It knows
nothing of models, sentences or glossaries: whoever translates (the server's service, the CLI)
cuts each run into sentences, translates them and hands back one
:class:`~seq2seq.documents.html.RunTranslation` per run, with word alignments when
:attr:`Document.boundaries` names word positions of that run (formatting inside it goes
back around the words it covered; :mod:`seq2seq.documents.boundaries` says which sentences need
alignments for that).

Two phases rather than a callback, so that the server can await its batcher between them;
:func:`~seq2seq.documents.registry.translate_document` joins them for a synchronous caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from seq2seq.documents.html import RunTranslation

__all__ = ["Document", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Bounds on what a file may unpack to (a zip bomb is refused before it is inflated).

    Attributes:
        max_unpacked: the most bytes all entries of an archive may hold, uncompressed.
        max_entries: the most entries an archive may have.
    """

    max_unpacked: int = 256 << 20
    max_entries: int = 10_000


class Document(Protocol):
    """A file cut into runs of text to translate."""

    @property
    def texts(self) -> list[str]:
        """Per run, its text (words joined by single spaces; never empty)."""
        ...

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        """Per run, the word positions where formatting begins or ends inside it (position k:
        before the run's word k; empty: no formatting). A sentence with one of them between
        two of its words needs word alignments (the slower decoding that returns attention)."""
        ...

    def write(self, translations: list[RunTranslation]) -> bytes:
        """The translated file: ``translations`` has one entry per run of :attr:`texts`."""
        ...

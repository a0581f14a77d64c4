"""Several XML trees of one file, each cut into runs by the projection of ``format: "html"``
(:class:`~seq2seq.documents.html.HtmlDocument` with the markup's own ``kind``), as one list of
runs: what ODF, EPUB and XLIFF share."""

from __future__ import annotations

from seq2seq.documents.html import HtmlDocument, RunTranslation

__all__ = ["Projections"]


class Projections:
    """The runs of many :class:`HtmlDocument` s, in order."""

    def __init__(self) -> None:
        self.docs: list[HtmlDocument] = []

    def add(self, root, *, inline: bool, kind) -> None:
        """Cut the element ``root`` (changed in place by :meth:`apply`) into runs."""
        doc = HtmlDocument(root, inline=inline, kind=kind, letters=True)
        if doc.runs:
            self.docs.append(doc)

    @property
    def texts(self) -> list[str]:
        return [t for d in self.docs for t in d.texts]

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return [a for d in self.docs for a in d.boundaries]

    def apply(self, translations: list[RunTranslation]) -> None:
        at = 0
        for d in self.docs:
            d.rebuild(translations[at : at + len(d.runs)])
            at += len(d.runs)

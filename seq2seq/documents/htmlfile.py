"""``.html`` / ``.htm``: the document through the projection of ``format: "html"``
(:mod:`seq2seq.documents.html`), markup, comments, scripts and styles kept."""

from __future__ import annotations

from dataclasses import dataclass

from lxml.etree import LxmlError

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import HtmlDocument, RunTranslation
from seq2seq.documents.text import decode

__all__ = ["read"]


@dataclass
class HtmlFile:
    doc: HtmlDocument

    @property
    def texts(self) -> list[str]:
        return self.doc.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.doc.boundaries

    def write(self, translations: list[RunTranslation]) -> bytes:
        return self.doc.apply(translations).encode("utf-8")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> HtmlFile:
    text = decode(data, name)
    if not text.strip():
        raise UserError(f"{name}: the file is empty")
    try:
        return HtmlFile(HtmlDocument(text, inline=inline, letters=True))
    except (ValueError, LxmlError) as e:
        raise UserError(f"{name}: not HTML that can be parsed ({e})") from None

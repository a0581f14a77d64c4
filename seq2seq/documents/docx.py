"""``.docx`` (Word): the body, headers, footers, footnotes, endnotes and comments; runs inside
hyperlinks, smart tags, tracked insertions, content controls and simple fields move with their
words (:mod:`seq2seq.documents.ooxml`). Deleted text, fields' codes, images and everything else
stay as they were."""

from __future__ import annotations

from seq2seq.documents.base import Limits
from seq2seq.documents.ooxml import OoxmlDocument, Tags

__all__ = ["read"]

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
TAGS = Tags(
    paragraphs=(f"{_W}p",),
    run=f"{_W}r",
    text=f"{_W}t",
    groups=frozenset(
        f"{_W}{n}" for n in "hyperlink smartTag ins sdt sdtContent fldSimple customXml".split()
    ),
)


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> OoxmlDocument:
    return OoxmlDocument(
        data,
        name=name,
        kind="Word document (.docx)",
        required="word/document.xml",
        parts=r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml",
        tags=TAGS,
        inline=inline,
        limits=limits,
    )

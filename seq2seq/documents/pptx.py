"""``.pptx`` (PowerPoint): the text of every slide (shapes, tables) and of its speaker notes
(:mod:`seq2seq.documents.ooxml`). Layouts, masters, images and fields (slide numbers, dates)
stay as they were; a run's hyperlink is part of its formatting and moves with its words."""

from __future__ import annotations

from seq2seq.documents.base import Limits
from seq2seq.documents.ooxml import OoxmlDocument, Tags

__all__ = ["read"]

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TAGS = Tags(paragraphs=(f"{_A}p",), run=f"{_A}r", text=f"{_A}t")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> OoxmlDocument:
    return OoxmlDocument(
        data,
        name=name,
        kind="PowerPoint presentation (.pptx)",
        required="ppt/presentation.xml",
        parts=r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml",
        tags=TAGS,
        inline=inline,
        limits=limits,
    )

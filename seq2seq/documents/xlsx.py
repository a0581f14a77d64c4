"""``.xlsx`` (Excel): the text cells, which Excel keeps in the shared strings
(``xl/sharedStrings.xml``: a plain string or rich-text runs) and some writers (openpyxl) as
inline strings in the sheets (``<is>``; :mod:`seq2seq.documents.ooxml`).
Numbers, dates, formulas and their cached values, sheet names, charts and styles stay as they
were; a string without a letter (a code, a number typed as text) is left as it is."""

from __future__ import annotations

from seq2seq.documents.base import Limits
from seq2seq.documents.ooxml import OoxmlDocument, Tags

__all__ = ["read"]

_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
TAGS = Tags(
    paragraphs=(f"{_S}si", f"{_S}is"),
    run=f"{_S}r",
    text=f"{_S}t",
    bare=f"{_S}t",
    markers=(b"<si>", b"<si ", b":si>", b"inlineStr"),
)


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> OoxmlDocument:
    return OoxmlDocument(
        data,
        name=name,
        kind="Excel workbook (.xlsx)",
        required="xl/workbook.xml",
        parts=r"xl/(sharedStrings|worksheets/sheet\d+)\.xml",
        tags=TAGS,
        inline=inline,
        limits=limits,
    )

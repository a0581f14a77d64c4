"""``.odt`` and ``.odp`` (OpenDocument text and presentation): the paragraphs and headings of
``content.xml`` (body text, tables, frames, slides, speaker notes). ODF keeps text as mixed
content, as HTML does, so the projection of ``format: "html"`` reads it directly: ``text:span``
and ``text:a`` are inline elements around their words; spaces, tabs, line breaks, bookmarks,
fields, annotations and frames anchored in a paragraph are kept as points; a footnote's text is
translated on its own (its number kept). A text of no letters (a number, a date) is left as
it is. Styles,
metadata, images and settings keep their bytes (the zip + XML route, as
:mod:`seq2seq.documents.ooxml` says why; the tests read the output with odfpy). An encrypted
document (a password) is refused."""

from __future__ import annotations

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.projected import Projections
from seq2seq.documents.zipped import Archive, ZippedXml, parse_xml

__all__ = ["read"]

_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_NOTE, _CITATION = f"{_TEXT}note", f"{_TEXT}note-citation"
_PARAGRAPHS = frozenset({f"{_TEXT}p", f"{_TEXT}h"})
_INLINE = frozenset({f"{_TEXT}span", f"{_TEXT}a", f"{_TEXT}meta"})
_SPACE = frozenset({f"{_TEXT}s", f"{_TEXT}tab", f"{_TEXT}line-break"})
_SKIP = frozenset(
    f"{_OFFICE}{n}"
    for n in "font-face-decls automatic-styles scripts forms annotation meta settings".split()
) | frozenset(
    f"{_TEXT}{n}" for n in "tracked-changes sequence-decls variable-decls user-field-decls".split()
)
_MIMETYPES = {
    ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
}


def _kind(el) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return "other"
    if tag in _INLINE:
        return "inline"
    if tag == _NOTE:
        return "block"  # a footnote: its body's paragraphs are translated, the sentence cut there
    if tag == _CITATION:
        return "skip"  # the footnote's number
    if tag in _SPACE:
        return "space"
    parent = el.getparent()
    if parent is not None and (parent.tag in _PARAGRAPHS or parent.tag in _INLINE):
        return "whole"  # anything else inside a paragraph: a field, a note, a frame
    if tag in _SKIP:
        return "skip"
    return "block"


class OdfDocument(ZippedXml):
    def __init__(self, data: bytes, *, name: str, inline: bool, limits: Limits) -> None:
        suffix = name[name.rfind(".") :].lower()
        kind = "OpenDocument " + ("text (.odt)" if suffix == ".odt" else "presentation (.odp)")
        self.archive = Archive.read(data, name=name, limits=limits, kind=kind)
        manifest = self.archive.data.get("META-INF/manifest.xml", b"")
        if b"encryption-data" in manifest:
            raise UserError(f"{name}: the document is encrypted or password-protected")
        mimetype = self.archive.data.get("mimetype", b"").decode("ascii", "replace").strip()
        if mimetype != _MIMETYPES[suffix]:
            raise UserError(f"{name}: not an {kind} (its mimetype is {mimetype or 'missing'!r})")
        self.tree = parse_xml(
            self.archive.require("content.xml", kind), where=f"{name}:content.xml"
        )
        self.trees = {"content.xml": self.tree}
        self.runs = Projections()
        body = self.tree.getroot().find(f"{_OFFICE}body")
        if body is None:
            raise UserError(f"{name}: not an {kind} (content.xml has no office:body)")
        self.runs.add(body, inline=inline, kind=_kind)


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> OdfDocument:
    return OdfDocument(data, name=name, inline=inline, limits=limits)

"""``.epub``: every XHTML content document of the package (chapters, the navigation document)
and the NCX table of contents, through the projection of ``format: "html"``
(:mod:`seq2seq.documents.html`: the same elements are inline, kept whole or left untranslated).
The package document, images, fonts and style sheets keep their bytes, and ``mimetype`` stays
the first entry, stored (the zip + XML route; the tests read the output with ebooklib). The
content documents are found through ``META-INF/container.xml`` and the package's manifest."""

from __future__ import annotations

import posixpath

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import html_kind
from seq2seq.documents.projected import Projections
from seq2seq.documents.zipped import Archive, ZippedXml, parse_xml

__all__ = ["read"]

_KIND = "EPUB book (.epub)"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_TEXT_TYPES = {"application/xhtml+xml", "application/x-dtbncx+xml"}


class EpubDocument(ZippedXml):
    def __init__(self, data: bytes, *, name: str, inline: bool, limits: Limits) -> None:
        self.archive = Archive.read(data, name=name, limits=limits, kind=_KIND)
        if self.archive.data.get("mimetype", b"").strip() != b"application/epub+zip":
            raise UserError(f"{name}: not an {_KIND} (no 'application/epub+zip' mimetype)")
        if "META-INF/encryption.xml" in self.archive.data:
            raise UserError(f"{name}: the book is encrypted (DRM); it cannot be translated")
        container = parse_xml(
            self.archive.require("META-INF/container.xml", _KIND), where=f"{name}:container.xml"
        )
        rootfile = container.getroot().find(f".//{_CONTAINER}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            raise UserError(f"{name}: META-INF/container.xml names no package document")
        opf_path = rootfile.get("full-path")
        opf = parse_xml(self.archive.require(opf_path, _KIND), where=f"{name}:{opf_path}")
        base = posixpath.dirname(opf_path)
        self.trees = {}
        self.runs = Projections()
        for item in opf.getroot().iter(f"{_OPF}item"):
            if item.get("media-type") not in _TEXT_TYPES:
                continue
            part = posixpath.normpath(posixpath.join(base, item.get("href", "")))
            if part not in self.archive.data or part in self.trees:
                continue
            tree = parse_xml(self.archive.data[part], where=f"{name}:{part}", doctype=True)
            self.trees[part] = tree
            self.runs.add(tree.getroot(), inline=inline, kind=html_kind)


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> EpubDocument:
    return EpubDocument(data, name=name, inline=inline, limits=limits)

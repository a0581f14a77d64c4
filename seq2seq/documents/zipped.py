"""Zip archives of XML parts (docx, pptx, xlsx, odt, odp, epub), read with bounds and written
back with every other entry unchanged.

Reading refuses, with a :class:`~seq2seq.core.UserError` naming the problem:

- bytes that are no zip archive, among them an OLE compound file (how Office stores a
  password-protected document) and a zip whose entries are encrypted;
- a zip bomb: more entries than :attr:`Limits.max_entries` or more bytes unpacked than
  :attr:`Limits.max_unpacked` (checked as the archive declares its sizes, and again as the
  entries are read: an entry that unpacks past its declared size is refused);
- an XML part with a DTD (entity expansion, external entities): parsed by :func:`parse_xml`,
  which checks it with defusedxml first and then builds the tree with lxml (no entities, no
  network, no huge trees).

Writing keeps the order, names, dates, compression and bytes of every entry it does not
replace, and the ``mimetype`` entry of ODF and EPUB stored first and uncompressed as it was.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from typing import Any

import defusedxml.ElementTree
from lxml import etree

from seq2seq.core import UserError
from seq2seq.documents.base import Limits

__all__ = ["Archive", "parse_xml", "serialize_xml"]

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    huge_tree=False,
    remove_blank_text=False,
)


@dataclass
class Archive:
    """The entries of a zip archive, in order, with their bytes."""

    name: str
    infos: list[zipfile.ZipInfo]
    data: dict[str, bytes]

    @classmethod
    def read(cls, data: bytes, *, name: str, limits: Limits, kind: str) -> Archive:
        """The archive ``data`` (a ``kind`` file, for the messages), all entries read."""
        if data.startswith(_OLE):
            raise UserError(
                f"{name}: the {kind} is encrypted or password-protected (remove "
                "the password and send it again)"
            )
        try:
            z = zipfile.ZipFile(io.BytesIO(data))
            infos = z.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError):
            raise UserError(f"{name}: not a {kind} (not a zip archive, or a corrupt one)") from None
        if len(infos) > limits.max_entries:
            raise UserError(
                f"{name}: the archive has {len(infos):,} entries; the limit is "
                f"{limits.max_entries:,}"
            )
        declared = sum(i.file_size for i in infos)
        if declared > limits.max_unpacked:
            raise UserError(
                f"{name}: the archive unpacks to {declared:,} bytes; the limit is "
                f"{limits.max_unpacked:,}"
            )
        out: dict[str, bytes] = {}
        total = 0
        for info in infos:
            if info.flag_bits & 0x1:
                raise UserError(f"{name}: the {kind} is encrypted ({info.filename})")
            if info.filename in out:
                raise UserError(f"{name}: the archive holds {info.filename} twice")
            bound = min(info.file_size, limits.max_unpacked - total)
            try:
                with z.open(info) as f:
                    blob = f.read(bound + 1)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
                raise UserError(f"{name}: {info.filename} cannot be read ({e})") from None
            if len(blob) > bound:
                raise UserError(f"{name}: {info.filename} unpacks past its declared size")
            total += len(blob)
            out[info.filename] = blob
        return cls(name, infos, out)

    def require(self, part: str, kind: str) -> bytes:
        """The bytes of ``part``; UserError when the archive has none (not a ``kind``)."""
        if part not in self.data:
            raise UserError(f"{self.name}: not a {kind} (no {part} in the archive)")
        return self.data[part]

    def write(self, replaced: dict[str, bytes]) -> bytes:
        """The archive with the entries of ``replaced`` swapped for their new bytes."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for info in self.infos:
                blob = replaced.get(info.filename, self.data[info.filename])
                z.writestr(info, blob, compress_type=info.compress_type)
        return buf.getvalue()


def parse_xml(data: bytes, *, where: str, doctype: bool = False):
    """The XML part ``data`` as an lxml tree, refused when it holds a DTD (entities).

    Args:
        doctype: allow a document type declaration without entities (XHTML's
            ``<!DOCTYPE html ...>``); its external DTD is never loaded.
    """
    try:
        defusedxml.ElementTree.fromstring(data, forbid_dtd=not doctype)
    except defusedxml.DefusedXmlException as e:
        raise UserError(
            f"{where}: XML with a DTD or entities is refused ({type(e).__name__})"
        ) from None
    except defusedxml.ElementTree.ParseError as e:
        raise UserError(f"{where}: not well-formed XML ({e})") from None
    try:
        return etree.fromstring(data, _PARSER).getroottree()
    except etree.XMLSyntaxError as e:
        raise UserError(f"{where}: not well-formed XML ({e})") from None


def serialize_xml(tree, original: bytes) -> bytes:
    """``tree`` as bytes, after the XML declaration of ``original`` (the part it was parsed
    from) byte for byte."""
    head = re.match(rb"\s*<\?xml[^>]*\?>\s*", original)
    encoding = tree.docinfo.encoding or "UTF-8"
    body = etree.tostring(tree, encoding=encoding, xml_declaration=False)
    if body.startswith(b"<?xml"):  # lxml declares an encoding other than UTF-8 itself
        return body
    return (head.group() if head else b"") + body


class ZippedXml:
    """What the zipped XML formats (docx, pptx, xlsx, odt, odp, epub) share: their ``archive``,
    the XML parts they rewrite (``trees``, by part name) and their ``runs`` (the texts to
    translate, their formatting boundaries, and ``apply``). :meth:`write` puts the translations
    in and serializes each rewritten part over its original bytes; every other entry of the
    archive keeps its bytes."""

    archive: Archive
    trees: dict
    runs: Any

    @property
    def texts(self) -> list[str]:
        return self.runs.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.runs.boundaries

    def write(self, translations: list) -> bytes:
        self.runs.apply(translations)
        return self.archive.write(
            {p: serialize_xml(t, self.archive.data[p]) for p, t in self.trees.items()}
        )

"""Bad files (issue: corrupt, encrypted, not of their suffix, zip bombs, XML entities, broken
subtitle timings, unknown suffixes): a one-line UserError from seq2seq.documents, a JSON 400
from POST /translate_file, exit 2 and no file from the CLI."""

from __future__ import annotations

import io
import zipfile

import pytest
from document_fixtures import fake_translate, make_docx, make_epub, make_odt, make_pptx

from seq2seq.core import UserError
from seq2seq.documents import Limits, open_document, translate_document

LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
)
EXTERNAL = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY ext SYSTEM "file:///etc/passwd">]>'
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _replace(data: bytes, part: str, blob: bytes) -> bytes:
    """The zip ``data`` with ``part`` replaced by ``blob``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, blob if info.filename == part else src.read(info))
    return out.getvalue()


def _docx_body(prolog: bytes, text: str) -> bytes:
    xml = (
        prolog
        + (
            f"<w:document {W}><w:body><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:body></w:document>"
        ).encode()
    )
    return _replace(make_docx(), "word/document.xml", xml)


def _zip(entries: dict[str, bytes], encrypted: bool = False) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, blob in entries.items():
            z.writestr(name, blob)
    data = bytearray(out.getvalue())
    if encrypted:  # zipfile writes no encryption: set the flag bit in both headers
        for sig, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            at = data.find(sig)
            data[at + offset] |= 0x1
    return bytes(data)


def _bad_files() -> dict[str, tuple[str, bytes, str]]:
    """Case -> (file name, bytes, a word of the error)."""
    docx = make_docx()
    return {
        "corrupt zip": ("report.docx", b"PK\x03\x04 not really a zip", "not a Word"),
        "truncated zip": ("report.docx", docx[: len(docx) // 2], "not a Word"),
        "password (OLE)": (
            "report.docx",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600,
            "password",
        ),
        "encrypted entries": (
            "report.docx",
            _zip({"word/document.xml": b"<a/>"}, True),
            "encrypted",
        ),
        "pptx named docx": ("report.docx", make_pptx(), "no word/document.xml"),
        "docx named pptx": ("talk.pptx", docx, "no ppt/presentation.xml"),
        "docx named epub": ("book.epub", docx, "mimetype"),
        "docx named odt": ("letter.odt", docx, "mimetype"),
        "text named xlsx": ("book.xlsx", b"A man walks.\n", "not a zip"),
        "png named srt": ("film.srt", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "NUL"),
        "latin-1 po": ("park.po", 'msgid "caf\xe9"\nmsgstr ""\n'.encode("latin-1"), "UTF-8"),
        "entity expansion": ("report.docx", _docx_body(LAUGHS, "&lol3;"), "DTD"),
        "external entity": ("report.docx", _docx_body(EXTERNAL, "&ext;"), "DTD"),
        "xliff entities": ("park.xlf", LAUGHS + b"<xliff>&lol3;</xliff>", "DTD"),
        "epub entities": (
            "book.epub",
            _replace(make_epub(), "EPUB/chapter1.xhtml", LAUGHS + b"<html>&lol3;</html>"),
            "entities",
        ),
        "malformed xml": (
            "report.docx",
            _replace(docx, "word/document.xml", b"<w:document"),
            "XML",
        ),
        "encrypted odt": (
            "letter.odt",
            _replace(
                make_odt(),
                "META-INF/manifest.xml",
                b'<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:'
                b'manifest:1.0"><manifest:encryption-data/></manifest:manifest>',
            ),
            "encrypted",
        ),
        "srt timing": ("film.srt", b"1\n00:00:01,000 --> 00:00:0x,000\nA man.\n", "timing"),
        "srt backwards": ("film.srt", b"1\n00:00:05,000 --> 00:00:01,000\nA man.\n", "ends before"),
        "srt no timing": ("film.srt", b"1\nA man walks.\n", "timing"),
        "vtt no header": ("film.vtt", b"00:01.000 --> 00:02.000\nA man.\n", "WEBVTT"),
        "unknown suffix": ("report.pdf", b"%PDF-1.4", "not supported"),
        "no suffix": ("report", b"A man.", "not supported"),
    }


BAD = _bad_files()


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_user_error(case):
    name, data, word = BAD[case]
    with pytest.raises(UserError) as e:
        translate_document(name, data, fake_translate)
    message = str(e.value)
    assert word.lower() in message.lower(), message
    assert "\n" not in message and name in message


def test_zip_bombs_are_bounded_by_size_and_entries():
    many = _zip({f"e{i}.xml": b"" for i in range(30)})
    with pytest.raises(UserError, match="30 entries; the limit is 20"):
        open_document("x.docx", many, limits=Limits(max_entries=20))
    big = _zip({"word/document.xml": b"\0" * 3_000_000})  # 3 MB of zeros in about 3 KB
    assert len(big) < 10_000
    with pytest.raises(UserError, match="unpacks to 3,000,000 bytes; the limit is 1,000,000"):
        open_document("x.docx", big, limits=Limits(max_unpacked=1_000_000))


def test_an_entry_that_unpacks_past_its_declared_size_is_refused():
    data = bytearray(_zip({"word/document.xml": b"<a>" + b"x" * 5000 + b"</a>"}))
    # shrink the declared uncompressed size in both headers (local and central) to 10 bytes
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(sig)
        data[at + offset : at + offset + 4] = (10).to_bytes(4, "little")
    with pytest.raises(UserError, match="document.xml"):
        open_document("x.docx", bytes(data))


def test_html_files_never_resolve_external_entities():
    page = b'<!DOCTYPE html [<!ENTITY ext SYSTEM "file:///etc/passwd">]><p>A man &ext; walks.</p>'
    out = translate_document("page.html", page, fake_translate)
    assert b"root:" not in out

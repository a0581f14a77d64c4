"""Office documents (docx, pptx, xlsx, odt, odp, epub) through seq2seq.documents with a
deterministic fake translator: every text node translated, the formatting around the right
words, everything else byte-identical, the structure as the format's own library reads it."""

from __future__ import annotations

import io

import pytest
from document_fixtures import (
    fake_text,
    fake_translate,
    make_docx,
    make_epub,
    make_odp,
    make_odt,
    make_pptx,
    make_xlsx,
    zip_entries,
)

from seq2seq.documents import open_document, translate_document


def translate(name: str, data: bytes, *, inline: bool = True) -> bytes:
    return translate_document(name, data, fake_translate, inline=inline)


def assert_only_parts_changed(before: bytes, after: bytes, parts: set[str]) -> None:
    """Same entries in the same order; every entry outside ``parts`` byte-identical."""
    a, b = zip_entries(before), zip_entries(after)
    assert list(a) == list(b)
    changed = {n for n in a if a[n] != b[n]}
    assert changed and changed <= parts, changed - parts


def _letters(text: str) -> bool:
    return any(c.isalpha() for c in text)


@pytest.mark.parametrize("inline", [True, False])
def test_docx_runs_links_tables_image_and_header(inline):
    import docx

    src = make_docx()
    out = translate("report.docx", src, inline=inline)
    a, b = docx.Document(io.BytesIO(src)), docx.Document(io.BytesIO(out))
    assert len(a.paragraphs) == len(b.paragraphs)
    for pa, pb in zip(a.paragraphs, b.paragraphs):
        assert len(pa.runs) == len(pb.runs)
        assert [(r.bold, r.italic, r.style.name) for r in pa.runs] == [
            (r.bold, r.italic, r.style.name) for r in pb.runs
        ]
        assert pa.style.name == pb.style.name
    body = a.paragraphs[1]
    translated = b.paragraphs[1]
    # the formatting runs come back around the words they covered
    for ra, rb in zip(body.runs, translated.runs):
        if _letters(ra.text):
            assert rb.text.strip() == fake_text(ra.text), (ra.text, rb.text)
    (link_a,), (link_b,) = body.hyperlinks, translated.hyperlinks
    assert link_b.url == link_a.url == "https://example.com/park?x=1"
    assert fake_text(link_a.text) in link_b.text
    cells_a = [c.text for c in a.tables[0]._cells]
    cells_b = [c.text for c in b.tables[0]._cells]
    assert cells_b == [fake_text(t) for t in cells_a]
    assert b.sections[0].header.paragraphs[0].text == fake_text(
        a.sections[0].header.paragraphs[0].text
    )
    assert len(b.inline_shapes) == len(a.inline_shapes) == 1
    assert_only_parts_changed(src, out, {"word/document.xml", "word/header1.xml"})


def test_docx_text_is_every_paragraph_with_letters():
    doc = open_document("report.docx", make_docx())
    assert sum(bool(b) for b in doc.boundaries) == 1  # the paragraph with bold, italic, a link
    assert (
        "A man walks with a black dog in the green park near the big house with a child."
        in doc.texts
    )
    assert all(_letters(t) for t in doc.texts)


def test_pptx_slides_runs_and_notes():
    import pptx

    src = make_pptx()
    out = translate("talk.pptx", src)
    a, b = pptx.Presentation(io.BytesIO(src)), pptx.Presentation(io.BytesIO(out))
    assert len(a.slides) == len(b.slides) == 2
    for sa, sb in zip(a.slides, b.slides):
        assert sa.slide_layout.name == sb.slide_layout.name
        assert len(sa.shapes) == len(sb.shapes)
        for sha, shb in zip(sa.shapes, sb.shapes):
            for pa, pb in zip(sha.text_frame.paragraphs, shb.text_frame.paragraphs):
                assert len(pa.runs) == len(pb.runs)
                for ra, rb in zip(pa.runs, pb.runs):
                    assert ra.font.bold == rb.font.bold
                    assert rb.text.strip() == fake_text(ra.text)
        notes_a = sa.notes_slide.notes_text_frame.text
        assert sb.notes_slide.notes_text_frame.text == fake_text(notes_a)
    parts = {f"ppt/slides/slide{k}.xml" for k in (1, 2)}
    parts |= {f"ppt/notesSlides/notesSlide{k}.xml" for k in (1, 2)}
    assert_only_parts_changed(src, out, parts)


def test_xlsx_text_cells_only():
    import openpyxl

    src = make_xlsx()
    out = translate("book.xlsx", src)
    a, b = openpyxl.load_workbook(io.BytesIO(src)), openpyxl.load_workbook(io.BytesIO(out))
    assert a.sheetnames == b.sheetnames == ["Park", "Street"]
    for wa, wb in zip(a, b):
        cells_a = {c.coordinate: c.value for row in wa.iter_rows() for c in row}
        cells_b = {c.coordinate: c.value for row in wb.iter_rows() for c in row}
        assert cells_a.keys() == cells_b.keys()
        for key, value in cells_a.items():
            if isinstance(value, str) and _letters(value) and not value.startswith("="):
                assert cells_b[key] == fake_text(value)
            else:
                assert cells_b[key] == value  # numbers, formulas, codes
    assert_only_parts_changed(src, out, {"xl/worksheets/sheet1.xml", "xl/worksheets/sheet2.xml"})


def _odf_paragraphs(data: bytes):
    from odf import teletype
    from odf.opendocument import load
    from odf.text import H, P, Span

    doc = load(io.BytesIO(data))
    texts = [teletype.extractText(p) for p in doc.getElementsByType(P) + doc.getElementsByType(H)]
    spans = [teletype.extractText(s) for s in doc.getElementsByType(Span)]
    return doc, texts, spans


def test_odt_spans_and_links():
    from odf.text import A

    src = make_odt()
    out = translate("letter.odt", src)
    doc_a, texts_a, spans_a = _odf_paragraphs(src)
    doc_b, texts_b, spans_b = _odf_paragraphs(out)
    assert len(texts_a) == len(texts_b)
    assert texts_b == [fake_text(t) for t in texts_a]
    assert spans_b == [fake_text(s) for s in spans_a]  # the bold span around its words
    (link_a,), (link_b,) = doc_a.getElementsByType(A), doc_b.getElementsByType(A)
    assert link_a.getAttribute("href") == link_b.getAttribute("href")
    assert_only_parts_changed(src, out, {"content.xml"})
    assert zip_entries(out)["mimetype"] == b"application/vnd.oasis.opendocument.text"


def test_odp_slides():
    from odf.draw import Page

    src = make_odp()
    out = translate("slides.odp", src)
    doc_a, texts_a, _ = _odf_paragraphs(src)
    doc_b, texts_b, _ = _odf_paragraphs(out)
    assert len(doc_b.getElementsByType(Page)) == len(doc_a.getElementsByType(Page)) == 2
    assert texts_b == [fake_text(t) for t in texts_a]
    assert_only_parts_changed(src, out, {"content.xml"})


def test_epub_chapters_toc_and_image():
    import zipfile

    import lxml.html
    from ebooklib import epub

    src = make_epub()
    out = translate("book.epub", src)
    with zipfile.ZipFile(io.BytesIO(out)) as z:
        first = z.infolist()[0]
        assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
    entries_a, entries_b = zip_entries(src), zip_entries(out)
    for k in (1, 2):
        part = f"EPUB/chapter{k}.xhtml"
        a = lxml.html.fromstring(entries_a[part])
        b = lxml.html.fromstring(entries_b[part])
        assert len(a.findall(".//p")) == len(b.findall(".//p"))
        assert [fake_text(p.text_content()) for p in a.iter("p", "h1")] == [
            " ".join(p.text_content().split()) for p in b.iter("p", "h1")
        ]
        assert [e.text for e in b.iter("b")] == [fake_text(e.text) for e in a.iter("b")]
        assert [i.get("src") for i in a.iter("img")] == [i.get("src") for i in b.iter("img")]
        assert b.find(".//title").text == a.find(".//title").text  # the head is left as it is
    assert_only_parts_changed(
        src, out, {"EPUB/chapter1.xhtml", "EPUB/chapter2.xhtml", "EPUB/nav.xhtml", "EPUB/toc.ncx"}
    )
    path = io.BytesIO(out)
    book = epub.read_epub(path)
    names = sorted(i.get_name() for i in book.get_items())
    assert "images/dot.png" in names and "chapter2.xhtml" in names


def test_odt_footnotes_are_translated_and_numbers_kept():
    from odf import teletype
    from odf.opendocument import OpenDocumentText, load
    from odf.text import Note, NoteBody, NoteCitation, P

    doc = OpenDocumentText()
    p = P(text="A man walks")
    note = Note(id="n1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="The dog runs."))
    note.addElement(body)
    p.addElement(note)
    p.addText(" in the park.")
    doc.text.addElement(p)
    doc.text.addElement(P(text="42"))
    buf = io.BytesIO()
    doc.save(buf)
    out = load(io.BytesIO(translate("notes.odt", buf.getvalue())))
    (citation,) = out.getElementsByType(NoteCitation)
    assert teletype.extractText(citation) == "1"
    texts = [teletype.extractText(x) for x in out.getElementsByType(P)]
    assert fake_text("The dog runs.") in texts and "42" in texts
    assert texts[0].startswith(fake_text("A man walks")) and texts[0].endswith(
        fake_text("in the park.")
    )

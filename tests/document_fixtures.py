"""Documents for the format tests, each made with its format's own library, in the words of
the factories' vocabulary (so that a ``shift`` model translates every word), and a
deterministic fake translator for the tests of fidelity.

Every builder returns the file's bytes.
"""

from __future__ import annotations

import io
import zipfile

from seq2seq.documents import RunTranslation

__all__ = [
    "BUILDERS",
    "fake",
    "fake_translate",
    "make_docx",
    "make_epub",
    "make_md",
    "make_odp",
    "make_odt",
    "make_po",
    "make_pptx",
    "make_srt",
    "make_vtt",
    "make_xlsx",
    "make_xliff",
    "png_bytes",
    "zip_entries",
]

SENTENCES = [
    "A man walks in the park.",
    "The dog plays with a red ball.",
    "Two people sit on the bench.",
    "A young woman runs near the water.",
    "The black cat jumps on the car.",
    "A child plays in the green grass.",
    "The old man sits under the tree.",
    "Three dogs run in the street.",
    "A small bike is near the house.",
    "The white dog walks with a woman.",
]


def fake(word: str) -> str:
    """The fake translation of one word (every word changes)."""
    return word.upper() + "~"


def fake_translate(texts: list[str], boundaries: list[bool] | bool) -> list[RunTranslation]:
    """Each word through :func:`fake`, aligned one to one (the same order) where ``boundaries``."""
    if isinstance(boundaries, bool):
        boundaries = [boundaries] * len(texts)
    out = []
    for t, align in zip(texts, boundaries):
        words = t.split()
        pairs = [(i, i) for i in range(len(words))] if align else None
        out.append(RunTranslation([(t, " ".join(fake(w) for w in words), pairs)]))
    return out


def fake_text(text: str) -> str:
    return " ".join(fake(w) for w in text.split())


def png_bytes() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 30, 40)).save(buf, format="PNG")
    return buf.getvalue()


def zip_entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def _add_hyperlink(paragraph, url: str, text: str) -> None:
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    r_id = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), r_id)
    run = OxmlElement("w:r")
    props = OxmlElement("w:rPr")
    underline = OxmlElement("w:u")
    underline.set(qn("w:val"), "single")
    props.append(underline)
    run.append(props)
    t = OxmlElement("w:t")
    t.text = text
    run.append(t)
    link.append(run)
    paragraph._p.append(link)


def make_docx() -> bytes:
    """A heading; a paragraph with bold and italic runs and a hyperlink; a 2x2 table; an
    image; a header."""
    import docx
    from docx.shared import Inches

    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = "The house near the park"
    d.add_heading("A dog and a cat", level=1)
    p = d.add_paragraph("A man walks ")
    p.add_run("with a black dog").bold = True
    p.add_run(" in the ")
    p.add_run("green park").italic = True
    p.add_run(" near ")
    _add_hyperlink(p, "https://example.com/park?x=1", "the big house")
    p.add_run(" with a child.")
    table = d.add_table(rows=2, cols=2)
    for (r, c), text in zip([(0, 0), (0, 1), (1, 0), (1, 1)], SENTENCES[1:5]):
        table.cell(r, c).text = text
    d.add_picture(io.BytesIO(png_bytes()), width=Inches(0.5))
    d.add_paragraph(SENTENCES[5])
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def make_pptx() -> bytes:
    """Two slides (a title and a body with a bold run), each with speaker notes."""
    import pptx

    prs = pptx.Presentation()
    for k in range(2):
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = SENTENCES[k]
        body = slide.placeholders[1].text_frame
        body.text = SENTENCES[k + 2]
        p = body.add_paragraph()
        p.add_run().text = "A woman sits "
        bold = p.add_run()
        bold.text = "on the red bench"
        bold.font.bold = True
        slide.notes_slide.notes_text_frame.text = SENTENCES[k + 4]
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def make_xlsx() -> bytes:
    """Text cells, a number, a formula, a code without letters, two sheets."""
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Park"
    ws["A1"] = SENTENCES[0]
    ws["A2"] = 42
    ws["A3"] = "=A2*2"
    ws["A4"] = "2024-01"
    ws["B1"] = SENTENCES[1]
    other = wb.create_sheet("Street")
    other["C3"] = SENTENCES[2]
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def make_odt() -> bytes:
    """A heading and a paragraph with a bold span and a link."""
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import A, H, P, Span

    doc = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    doc.text.addElement(H(outlinelevel=1, text="A dog and a cat"))
    p = P(text="A man walks ")
    p.addElement(Span(stylename=bold, text="with a black dog"))
    p.addText(" near ")
    p.addElement(A(href="https://example.com/park", text="the big house"))
    p.addText(".")
    doc.text.addElement(p)
    doc.text.addElement(P(text=SENTENCES[1]))
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def make_odp() -> bytes:
    """Two slides, each a frame with a text box."""
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.text import P

    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Master", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    for k in range(2):
        page = Page(masterpagename=master, name=f"page{k + 1}")
        frame = Frame(width="20cm", height="5cm", x="2cm", y="2cm")
        box = TextBox()
        box.addElement(P(text=SENTENCES[k]))
        box.addElement(P(text=SENTENCES[k + 2]))
        frame.addElement(box)
        page.addElement(frame)
        doc.presentation.addElement(page)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def make_epub() -> bytes:
    """Two chapters (a heading and a paragraph with bold words each), an image, a table of
    contents."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("s2s-test")
    book.set_title("The park")
    book.set_language("en")
    chapters = []
    for k in range(2):
        c = epub.EpubHtml(title=f"Chapter {k + 1}", file_name=f"chapter{k + 1}.xhtml", lang="en")
        c.content = (
            f"<h1>{SENTENCES[k]}</h1><p>A man walks <b>with a black dog</b> near the house."
            f' <img src="images/dot.png" alt="dot"/></p><p>{SENTENCES[k + 2]}</p>'
        )
        book.add_item(c)
        chapters.append(c)
    book.add_item(
        epub.EpubItem(
            uid="dot", file_name="images/dot.png", media_type="image/png", content=png_bytes()
        )
    )
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    buf = io.BytesIO()
    epub.write_epub(buf, book)
    return buf.getvalue()


def make_srt(n: int = 10) -> bytes:
    """``n`` cues with pysrt; one with two lines, one in italics."""
    import pysrt

    subs = pysrt.SubRipFile()
    for k in range(n):
        text = SENTENCES[k % len(SENTENCES)]
        if k == 1:
            text = "A man walks\nin the park."
        if k == 2:
            text = "<i>The dog</i> plays with a ball."
        subs.append(
            pysrt.SubRipItem(
                index=k + 1,
                start=pysrt.SubRipTime(seconds=2 * k),
                end=pysrt.SubRipTime(seconds=2 * k + 1, milliseconds=500),
                text=text,
            )
        )
    buf = io.StringIO()
    subs.write_into(buf)
    return buf.getvalue().encode("utf-8")


def make_vtt() -> bytes:
    """A WebVTT file with a note, cue identifiers, cue settings and a voice tag."""
    lines = ["WEBVTT", "", "NOTE made for the tests", ""]
    for k in range(4):
        lines += [
            f"cue-{k}",
            f"00:00:0{k}.000 --> 00:00:0{k}.900 align:start",
            ("<v Anna>" if k == 0 else "") + SENTENCES[k],
            "",
        ]
    return "\n".join(lines).encode("utf-8")


def make_po() -> bytes:
    """Entries with context, comments, flags, placeholders, a tag and a plural."""
    import polib

    po = polib.POFile()
    po.metadata = {
        "Project-Id-Version": "park 1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Plural-Forms": "nplurals=2; plural=(n != 1);",
    }
    po.append(
        polib.POEntry(
            msgid="A man walks {name} in the park.",
            msgctxt="menu",
            comment="Shown on the first page",
            tcomment="keep short",
            occurrences=[("park.py", "12")],
            flags=["python-brace-format"],
        )
    )
    po.append(polib.POEntry(msgid="The dog plays with %s balls.", flags=["c-format"]))
    po.append(polib.POEntry(msgid="A woman runs <b>near the water</b> now."))
    po.append(
        polib.POEntry(
            msgid="%(n)d dog runs in the park.",
            msgid_plural="%(n)d dogs run in the park.",
            msgstr_plural={0: "", 1: ""},
            flags=["python-format"],
        )
    )
    return str(po).encode("utf-8")


MARKDOWN = """---
title: The park
---
# A dog and a cat

A man walks **with a black dog** near [the big house](https://example.com/a_b "Home").
Two people sit on `the bench` in the park.

- The dog plays with a red ball.
- A child runs in the grass.

> The old man sits under the tree.

| Park | Street |
|------|--------|
| A red car | The black bike |

```python
the_park = "A man walks."  # untouched
```

    indented code stays too

[ref]: https://example.com/ref
"""


def make_md() -> bytes:
    return MARKDOWN.encode("utf-8")


def make_xliff() -> bytes:
    """XLIFF 1.2: a unit with inline codes and a note, a translate="no" unit, one with a
    target."""
    return b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="park.txt">
    <body>
      <trans-unit id="1"><source>A man walks <g id="b">with a black dog</g> in the park.<x id="br"/></source><note>first</note></trans-unit>
      <trans-unit id="2" translate="no"><source>Park Street</source></trans-unit>
      <trans-unit id="3"><source>The dog plays with a red ball.</source><target state="new">old</target></trans-unit>
    </body>
  </file>
</xliff>
"""


def make_html() -> bytes:
    return (
        b"<!DOCTYPE html><html><head><title>Park</title><style>p{color:red}</style></head>"
        b'<body><p>A man walks <b>with a black dog</b> near <a href="https://example.com/">'
        b"the big house</a>.</p><script>var x = 1;</script></body></html>"
    )


def make_txt() -> bytes:
    return f"{SENTENCES[0]} {SENTENCES[1]}\n\n  {SENTENCES[2]}\n".encode()


BUILDERS = {
    ".docx": make_docx,
    ".pptx": make_pptx,
    ".xlsx": make_xlsx,
    ".odt": make_odt,
    ".odp": make_odp,
    ".epub": make_epub,
    ".srt": make_srt,
    ".vtt": make_vtt,
    ".po": make_po,
    ".md": make_md,
    ".xlf": make_xliff,
    ".html": make_html,
    ".txt": make_txt,
}
"""Suffix -> builder of a fixture of that format."""

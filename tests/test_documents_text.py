"""Text formats (txt, html, srt, vtt, po, md, xliff) through seq2seq.documents with a
deterministic fake translator: every text translated, placeholders, tags, code, URLs, numbers
and timings byte-identical, the structure as the format's own library reads it."""

from __future__ import annotations

import io

import pytest
from document_fixtures import (
    MARKDOWN,
    fake_text,
    fake_translate,
    make_html,
    make_md,
    make_po,
    make_srt,
    make_txt,
    make_vtt,
    make_xliff,
)

from seq2seq.documents import open_document, translate_document
from seq2seq.documents.strings import Strings, rewrap


def translate(name: str, data: bytes, *, inline: bool = True) -> bytes:
    return translate_document(name, data, fake_translate, inline=inline)


def test_txt_keeps_lines_and_indentation():
    out = translate("notes.txt", make_txt()).decode()
    src = make_txt().decode()
    assert out.split("\n")[1:] == ["", "  " + fake_text(src.split("\n")[2]), ""]
    assert out.split("\n")[0] == fake_text(src.split("\n")[0])


def test_html_file_keeps_markup_script_and_head():
    out = translate("page.html", make_html()).decode()
    assert "<script>var x = 1;</script>" in out and "<title>Park</title>" in out
    assert "<b>WITH~ A~ BLACK~ DOG~</b>" in out
    assert '<a href="https://example.com/">THE~ BIG~ HOUSE.~</a>' in out


@pytest.mark.parametrize("inline", [True, False])
def test_srt_numbers_timings_and_lines(inline):
    import pysrt

    src = make_srt()
    out = translate("film.srt", src, inline=inline)
    a = pysrt.from_string(src.decode())
    b = pysrt.from_string(out.decode())
    assert len(a) == len(b) == 10
    for ca, cb in zip(a, b):
        assert (ca.index, ca.start, ca.end) == (cb.index, cb.start, cb.end)
        assert cb.text.count("\n") == ca.text.count("\n")
        assert cb.text_without_tags.split() == fake_text(ca.text_without_tags).split()
    assert b[2].text.startswith("<i>THE~ DOG~</i>")
    # everything but the text lines is byte-identical
    lines_a, lines_b = src.decode().split("\n"), out.decode().split("\n")
    assert len(lines_a) == len(lines_b)
    text_lines = {i for i, line in enumerate(lines_a) if line and not line[0].isdigit()}
    assert all(lines_a[i] == lines_b[i] for i in range(len(lines_a)) if i not in text_lines)


def test_vtt_header_notes_identifiers_settings_and_voice():
    import webvtt

    src = make_vtt()
    out = translate("film.vtt", src)
    a = webvtt.from_buffer(io.StringIO(src.decode()))
    b = webvtt.from_buffer(io.StringIO(out.decode()))
    assert len(a.captions) == len(b.captions) == 4
    for ca, cb in zip(a.captions, b.captions):
        assert (ca.identifier, ca.start, ca.end) == (cb.identifier, cb.start, cb.end)
        assert cb.text.split() == fake_text(ca.text).split()
    text = out.decode()
    assert "NOTE made for the tests" in text and "align:start" in text
    assert "<v Anna>A~ MAN~" in text


def test_po_msgstr_context_comments_flags_plurals_placeholders():
    import polib

    src = make_po()
    out = translate("park.po", src)
    a, b = polib.pofile(src.decode()), polib.pofile(out.decode())
    assert len(a) == len(b) == 4 and a.metadata == b.metadata
    for ea, eb in zip(a, b):
        assert (ea.msgid, ea.msgid_plural, ea.msgctxt) == (eb.msgid, eb.msgid_plural, eb.msgctxt)
        assert (ea.comment, ea.tcomment, ea.occurrences, ea.flags) == (
            eb.comment,
            eb.tcomment,
            eb.occurrences,
            eb.flags,
        )
    assert b[0].msgstr == "A~ MAN~ WALKS~ {name} IN~ THE~ PARK.~"
    assert b[1].msgstr == "THE~ DOG~ PLAYS~ WITH~ %s BALLS.~"
    assert b[2].msgstr == "A~ WOMAN~ RUNS~ <b>NEAR~ THE~ WATER~</b> NOW.~"
    assert b[3].msgstr_plural == {
        0: "%(n)d DOG~ RUNS~ IN~ THE~ PARK.~",
        1: "%(n)d DOGS~ RUN~ IN~ THE~ PARK.~",
    }


@pytest.mark.parametrize("inline", [True, False])
def test_po_placeholders_survive_without_alignments(inline):
    out = Strings(["Hello {name}, %(n)d new %s"], inline=inline)
    (got,) = out.apply(fake_translate(out.texts, inline))
    assert all(p in got for p in ("{name}", "%(n)d", "%s"))
    assert got.startswith("HELLO~") and got.endswith("%s")
    assert "{name}" not in " ".join(out.texts) and "%s" not in " ".join(out.texts)


def test_markdown_keeps_code_urls_markers_and_front_matter():
    from markdown_it import MarkdownIt

    src = make_md()
    out = translate("README.md", src).decode()
    assert out.count("\n") == MARKDOWN.count("\n")
    for kept in (
        "---\ntitle: The park\n---\n",
        '```python\nthe_park = "A man walks."  # untouched\n```',
        "    indented code stays too",
        "[ref]: https://example.com/ref",
        '(https://example.com/a_b "Home")',
        "`the bench`",
        "|------|--------|",
    ):
        assert kept in out, kept
    assert "# A~ DOG~ AND~ A~ CAT~\n" in out
    assert "**WITH~ A~ BLACK~ DOG~**" in out and "[THE~ BIG~ HOUSE.~](" in out
    assert "- THE~ DOG~ PLAYS~ WITH~ A~ RED~ BALL.~" in out
    assert "> THE~ OLD~ MAN~" in out and "| A~ RED~ CAR~ | THE~ BLACK~ BIKE~ |" in out
    # the same block structure as the source
    md = MarkdownIt("commonmark").enable("table")
    assert [t.type for t in md.parse(out)] == [t.type for t in md.parse(MARKDOWN)]


def test_xliff_targets_inline_codes_and_translate_no():
    from translate.storage import xliff

    src = make_xliff()
    out = translate("park.xlf", src)
    store = xliff.xlifffile.parsestring(out)
    units = store.units
    assert len(units) == 3
    assert units[0].target.split() == fake_text(units[0].source).split()
    assert units[1].target is None  # translate="no"
    assert units[2].target == fake_text(units[2].source)  # an old target replaced
    text = out.decode()
    assert '<g id="b">WITH~ A~ BLACK~ DOG~</g>' in text and '<x id="br"/>' in text
    assert "<note>first</note>" in text
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')


def test_every_format_knows_what_it_translates():
    doc = open_document("park.po", make_po())
    assert all(doc.boundaries)  # placeholders and tags need the alignments
    plain = Strings(["A man walks.", "A {name} walks."], inline=True)
    assert plain.boundaries == [(), (1,)]  # {name} sits before word 1 of "A walks."
    assert "{name}" not in " ".join(doc.texts)


def test_only_sentences_with_formatting_inside_them_need_alignments():
    """A sentence that formatting covers whole, or does not touch, is translated without
    alignments and gets its edge alignment; the bold still covers its words."""
    from seq2seq.documents import HtmlDocument, needs_alignments, run_translation

    doc = HtmlDocument("<p>A man walks. <b>The dog runs.</b> Two <i>cats</i> sit.</p>")
    (text,), (bounds,) = doc.texts, doc.boundaries
    sentences = ["A man walks.", "The dog runs.", "Two cats sit."]
    assert " ".join(sentences) == text and bounds == (3, 6, 7, 8)
    need = needs_alignments(sentences, bounds)
    assert need == [False, False, True]
    translations = [fake_text(s) for s in sentences]
    alignments = [[(0, 0), (1, 1), (2, 2)] if n else None for n in need]
    out = doc.apply([run_translation(sentences, translations, alignments, bounds)])
    assert out == "<p>A~ MAN~ WALKS.~ <b>THE~ DOG~ RUNS.~</b> TWO~ <i>CATS~</i> SIT.~</p>"


def test_rewrap_keeps_the_number_of_lines():
    assert rewrap("a b c d", 2) == ["a b", "c d"]
    assert rewrap("one", 2) == ["one", ""]
    assert rewrap("a b c", 1) == ["a b c"]

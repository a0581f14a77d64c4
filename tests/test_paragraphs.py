"""seq2seq.decode.paragraphs: paragraphs cut into sentences and put back with their line breaks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.decode.paragraphs import join_text, split_text


def test_sentences_are_split_with_the_rules_for_abbreviations():
    seg = split_text(
        "Mr. Smith went to Washington. He saw e.g. the White House! Did he? Yes.", language="en"
    )
    assert seg.sentences == [
        "Mr. Smith went to Washington.",
        "He saw e.g. the White House!",
        "Did he?",
        "Yes.",
    ]
    assert seg.lines == [("", 4)]


def test_the_language_chooses_the_non_breaking_prefixes():
    text = "Das kostet ca. 5 Euro. Er kam um 3 Uhr."
    assert split_text(text, language="de").sentences == [
        "Das kostet ca. 5 Euro.",
        "Er kam um 3 Uhr.",
    ]
    # "ca." and "z. B." are German non-breaking prefixes that the English rules do not know.
    assert split_text(text, language="en").sentences == [
        "Das kostet ca.",
        "5 Euro.",
        "Er kam um 3 Uhr.",
    ]
    assert split_text("Er kauft z. B. Brot.", language="de").sentences == ["Er kauft z. B. Brot."]
    assert split_text("Er kauft z. B. Brot.", language="en").sentences == [
        "Er kauft z.",
        "B. Brot.",
    ]


def test_line_breaks_empty_lines_and_indentation_are_kept():
    text = "First line. Second sentence.\n\n  Indented line.\r\nLast line"
    seg = split_text(text, language="en")
    assert seg.sentences == ["First line.", "Second sentence.", "Indented line.", "Last line"]
    assert seg.lines == [("", 2), ("", 0), ("  ", 1), ("", 1)]
    translated = join_text(seg, [s.upper() for s in seg.sentences])
    assert translated == "FIRST LINE. SECOND SENTENCE.\n\n  INDENTED LINE.\nLAST LINE"


def test_a_line_without_inner_sentence_ends_is_not_run_through_the_splitter():
    seg = split_text("A man  in a blue shirt is riding a bicycle.", language="en")
    assert seg.sentences == ["A man  in a blue shirt is riding a bicycle."]  # untouched


def test_split_false_keeps_each_line_whole():
    seg = split_text("One. Two.\nThree.", language="en", split=False)
    assert seg.sentences == ["One. Two.", "Three."]


def test_empty_and_blank_text_has_no_sentences():
    assert split_text("", language="en").sentences == []
    seg = split_text(" \n\t\n", language="en")
    assert seg.sentences == [] and join_text(seg, []) == "\n\n"


def test_an_unknown_language_uses_the_english_rules():
    text = "Dr. Who arrived. He left."
    assert split_text(text, language="xx").sentences == split_text(text, language="en").sentences


def test_join_needs_one_translation_per_sentence():
    seg = split_text("One. Two.", language="en")
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        join_text(seg, ["eins"])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .?!\n\r\tMr")), max_size=60))
def test_identity_translation_keeps_every_line(text):
    seg = split_text(text, language="en")
    assert all(s.strip() for s in seg.sentences)
    out = join_text(seg, seg.sentences)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    assert out.count("\n") == len(lines) - 1
    for original, joined in zip(lines, out.split("\n")):
        # Same words in the same order on every line; only spacing between them may change.
        assert joined.split() == original.split()

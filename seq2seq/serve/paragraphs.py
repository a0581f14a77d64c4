"""Paragraphs in, sentences out, and back: what a translation server does with free text.

A model is trained on single sentences, but users paste paragraphs. :func:`split_text` cuts a
text into lines (line breaks are kept exactly), each line into sentences with the rule-based
splitter of Philipp Koehn and Josh Schroeder (the Moses ``split-sentences.perl`` rules, the
``sentence-splitter`` package: non-breaking prefixes such as "Mr." or "e.g." for 24 languages,
shipped with the package, no download; run with compiled patterns by
:class:`seq2seq.data.MosesSplitter`); :func:`join_text` puts the translated sentences back
in the same layout.

Layout rules:

- ``\\r\\n`` and a lone ``\\r`` count as ``\\n``; every line of the input gives one line of
  output, an empty (or all-whitespace) line an empty line;
- a line's leading whitespace (indentation) is kept, its trailing whitespace is dropped;
- the sentences of one line are joined with one space (right for languages that separate
  sentences with spaces; a Chinese or Japanese target would want none).

The splitter only ever breaks after ``.``, ``?`` or ``!`` followed by a space, so a line
without one of those before its final punctuation is one sentence and skips the splitter (the
common case for a sentence-per-request client: no regular expressions run).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

__all__ = ["SPLITTER_LANGUAGES", "Segments", "join_text", "split_text"]

SPLITTER_LANGUAGES = frozenset(
    "ca cs da de el en es fi fr hu is it lt lv nl no pl pt ro ru sk sl sv tr".split()
)
"""Languages with their own non-breaking prefixes; any other splits with the English rules."""

_SENTENCE_END = "?!."
_TRAILING = "?!.\"')]}\u00bb\u201d\u2019 \t"  # what may end a line after its last sentence


@dataclass(frozen=True)
class Segments:
    """A text cut into sentences, with what is needed to put it back together.

    Attributes:
        sentences: the sentences to translate, in text order (none empty).
        lines: per input line, ``(indent, n_sentences)``: the line's leading whitespace and
            how many of ``sentences`` it holds (0 for an empty line).
    """

    sentences: list[str]
    lines: list[tuple[str, int]]


def _splitter(language: str):
    from seq2seq.data import moses_splitter

    if language not in SPLITTER_LANGUAGES:
        language = "en"
    return moses_splitter(language)


def _split_line(line: str, language: str) -> list[str]:
    head = line.rstrip(_TRAILING)
    if not any(c in head for c in _SENTENCE_END):
        return [line]  # nothing the splitter could break at
    return [s for s in _splitter(language).split(line) if s.strip()]


def split_text(text: str, *, language: str = "en", split: bool = True) -> Segments:
    """Cut ``text`` into lines and sentences.

    Args:
        text: any text; line breaks are ``\\n``, ``\\r\\n`` or ``\\r``.
        language: ISO 639-1 code of the text; selects the splitter's non-breaking prefixes
            (:data:`SPLITTER_LANGUAGES`; any other code uses the English ones).
        split: False keeps every line whole (one sentence per non-empty line).

    Returns:
        The sentences and the layout :func:`join_text` needs.
    """
    if len(language) != 2 or not language.isascii() or not language.isalpha():
        warnings.warn(f"no sentence-splitting rules for {language!r}; using English", stacklevel=2)
        language = "en"
    language = language.lower()
    sentences: list[str] = []
    lines: list[tuple[str, int]] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        body = line.strip()
        if not body:
            lines.append(("", 0))
            continue
        indent = line[: len(line) - len(line.lstrip())]
        parts = _split_line(body, language) if split else [body]
        sentences.extend(parts)
        lines.append((indent, len(parts)))
    return Segments(sentences=sentences, lines=lines)


def join_text(segments: Segments, translations: list[str]) -> str:
    """Put one translation per sentence of ``segments`` back into the text's layout.

    Raises:
        ValueError: ``translations`` does not have one entry per sentence.
    """
    if len(translations) != len(segments.sentences):
        raise ValueError(
            f"{len(translations)} translations for {len(segments.sentences)} sentences"
        )
    out = []
    start = 0
    for indent, n in segments.lines:
        parts = [t.strip() for t in translations[start : start + n]]
        start += n
        out.append(indent + " ".join(p for p in parts if p) if n else "")
    return "\n".join(out)

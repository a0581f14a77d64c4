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

Languages: the 24 of :data:`SPLITTER_LANGUAGES` have their own non-breaking prefixes; any
other language is split with the English rules (which break after ``.``, ``?`` or ``!``
followed by a space and a capital or a digit), and, for every language, after a sentence end
of a script that has no space between sentences or its own marks: ``。！？｡`` (Chinese,
Japanese), ``।॥`` (Devanagari), ``؟۔`` (Arabic, Urdu), with the closing quotes or brackets
that follow them. A code that is not two letters warns and uses the same.

The splitter only ever breaks after ``.``, ``?`` or ``!`` followed by a space (or one of the
marks above), so a line without one of those before its final punctuation is one sentence and
skips the splitter (the common case for a sentence-per-request client: no regular expressions
run).

:func:`translate_lines` is ``seq2seq translate``'s use of the same: lines in, one translation
per line out, a line cut into sentences when it would not fit the model (or always).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SPLITTER_LANGUAGES", "Segments", "join_text", "split_text", "translate_lines"]

SPLITTER_LANGUAGES = frozenset(
    "ca cs da de el en es fi fr hu is it lt lv nl no pl pt ro ru sk sl sv tr".split()
)
"""Languages with their own non-breaking prefixes; any other splits with the English rules."""

_UNSPACED_END = "\u3002\uff01\uff1f\uff61\u0964\u0965\u061f\u06d4"  # 。！？｡ ।॥ ؟۔
_SENTENCE_END = "?!." + _UNSPACED_END
_TRAILING = "?!.\"')]}\u00bb\u201d\u2019 \t" + _UNSPACED_END  # may end a line's last sentence
_AFTER_UNSPACED_END = re.compile(
    f"[{_UNSPACED_END}]+[\"'\u201d\u2019\u300d\u300f\uff09)\\]\u00bb]*\\s*"
)  # a sentence end of those scripts, its closing marks and any space: a cut after it


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
    out = []
    for sentence in _splitter(language).split(line):
        if any(c in sentence.rstrip(_TRAILING) for c in _UNSPACED_END):
            out.extend(_split_unspaced(sentence))
        elif sentence.strip():
            out.append(sentence)
    return out


def _split_unspaced(sentence: str) -> list[str]:
    """``sentence`` cut after each sentence end of :data:`_UNSPACED_END` (with its closing
    marks)."""
    out, start = [], 0
    for m in _AFTER_UNSPACED_END.finditer(sentence):
        out.append(sentence[start : m.end()].strip())
        start = m.end()
    out.append(sentence[start:].strip())
    return [s for s in out if s]


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


def translate_lines(
    translator,
    lines: list[str],
    *,
    split: str = "auto",
    language: str = "en",
    on_truncated: Callable[[int, int], None] | None = None,
    where: Callable[[int], str] | None = None,
    **kwargs,
) -> list[str]:
    """One translation per line (``seq2seq translate``'s plain output), lines cut into
    sentences with :func:`split_text` and rejoined with :func:`join_text`.

    Args:
        translator: a :class:`~seq2seq.decode.translator.Translator`.
        lines: the lines (none holds a line break).
        split: ``auto``: only a line whose pieces do not fit the model's positions is cut
            (it would otherwise be truncated; a sentence-per-line file is translated exactly
            as before); ``always``: every line, as the server does; ``never``: none.
        language: the source language (the splitter's rules).
        on_truncated: ``on_truncated(line, n_tokens)`` (1-based line) for a sentence still
            too long for the model, truncated.
        where: names line i (0-based) in errors.
        kwargs: per-call options of :meth:`Translator.translate` (glossary, terminology, search
            options); per-line lists (prefix, constraints, avoid) need ``split="never"``.

    Returns:
        The translation of each line, one line each ('' for an empty line).
    """
    if split not in ("auto", "always", "never"):
        raise ValueError(f"split must be auto, always or never, got {split!r}")
    if split == "auto":
        over: set[int] = set()
        translator.encode(translator.tag(lines), on_truncated=lambda i, _n: over.add(i - 1))
        cut = over
    else:
        cut = set(range(len(lines))) if split == "always" else set()
    if not cut:
        extra = {"where": where} if where is not None else {}
        return translator.translate(lines, on_truncated=on_truncated, **extra, **kwargs)
    segments = [
        split_text(line, language=language) if i in cut else Segments([line], [("", 1)])
        for i, line in enumerate(lines)
    ]
    owner = [i for i, seg in enumerate(segments) for _ in seg.sentences]
    sentences = [s for seg in segments for s in seg.sentences]
    name = where or (lambda i: f"line {i + 1}")
    done = translator.translate(
        sentences,
        on_truncated=(lambda j, n: on_truncated(owner[j - 1] + 1, n)) if on_truncated else None,
        where=lambda j: name(owner[j]),
        **kwargs,
    )
    out, start = [], 0
    for i, seg in enumerate(segments):
        n = len(seg.sentences)
        out.append(join_text(seg, done[start : start + n]) if i in cut else done[start])
        start += n
    return out

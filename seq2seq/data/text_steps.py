"""The text steps of the reference preparation scripts, restated in Python.

fairseq's ``examples/translation/prepare-iwslt14.sh`` and ``prepare-wmt14en2de.sh`` are shell
pipelines over Moses' Perl scripts. A corpus in the registry (:mod:`seq2seq.data.registry`)
names the steps its split goes through, in the scripts' order, and :func:`run_steps` applies them
to the extracted sentence pairs. Each step cites the script (and the line) it mirrors:

- :class:`Replace`: ``sed -e "s/’/'/g"`` (prepare-iwslt14.sh, valid/test data).
- :class:`MosesTokenize`: ``tokenizer.perl -l LANG`` (through sacremoses; a blank line is
  passed through unchanged, as tokenizer.perl's ``/^\\s*$/`` branch does).
- :class:`CleanCorpus`: ``clean-corpus-n.perl -ratio R CORPUS L1 L2 OUT MIN MAX``.
- :class:`Lowercase`: ``lowercase.perl`` (Perl's ``lc``: no final-sigma rule).
- :class:`EveryNth`: ``awk '{if (NR%23 == 0) print $0; }'`` and its ``!= 0`` twin.
- :class:`NormalizePunctuation`: ``normalize-punctuation.perl -l LANG`` (sacremoses with
  ``perl_parity=True``).
- :class:`RemoveNonPrinting`: ``remove-non-printing-char.perl`` (``s/\\p{C}/ /g``).

Steps are frozen dataclasses: their ``repr`` is part of what a prepared file records, so a
changed step re-prepares the file.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "CleanCorpus",
    "EveryNth",
    "Lowercase",
    "MosesTokenize",
    "NormalizePunctuation",
    "RemoveNonPrinting",
    "Replace",
    "Step",
    "run_steps",
]

# Perl's \s on character strings (the scripts read with a :utf8 layer): Unicode White_Space.
# Python's str.isspace() also counts U+001C..U+001F, which Perl does not.
_PERL_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PERL_SPACES = re.compile(f"[{_PERL_SPACE}]+")
_PERL_BLANK = re.compile(f"[{_PERL_SPACE}]*")


@dataclass(frozen=True)
class Replace:
    """``sed -e "s/OLD/NEW/g"`` on each line of both sides."""

    old: str
    new: str


@dataclass(frozen=True)
class MosesTokenize:
    """``tokenizer.perl -l LANG`` (``-a`` when ``aggressive``), XML escaping on, per side."""

    aggressive: bool = False


@dataclass(frozen=True)
class Lowercase:
    """``lowercase.perl``: Perl's ``lc`` on each line of both sides."""


@dataclass(frozen=True)
class CleanCorpus:
    """``clean-corpus-n.perl -ratio RATIO ... MIN MAX`` over the pairs.

    A pair is dropped when a side is empty, has fewer than ``min_tokens`` or more than
    ``max_tokens`` space-separated tokens, when one side has more than ``ratio`` times the
    other's tokens, or when a token is longer than 1,000 characters (the script's
    ``max-word-length``). Kept lines are rewritten as the script writes them: whitespace runs
    become one space, leading and trailing space removed (``|`` is removed unless the first
    pair has one, the script's factor check; Moses-tokenized text has none, it is escaped).

    With ``count_tokenized`` the counts are made on the Moses tokenization of each line (what
    the script sees in fairseq's pipeline) while the line itself is kept as it is: the raw text
    of exactly the pairs the tokenized pipeline keeps.
    """

    min_tokens: int
    max_tokens: int
    ratio: float
    count_tokenized: bool = False


@dataclass(frozen=True)
class EveryNth:
    """``awk 'NR%N == 0'`` (``keep=True``) or ``awk 'NR%N != 0'`` (``keep=False``) on the pairs."""

    n: int
    keep: bool


@dataclass(frozen=True)
class NormalizePunctuation:
    """``normalize-punctuation.perl -l LANG`` on each line (sacremoses, ``perl_parity=True``)."""


@dataclass(frozen=True)
class RemoveNonPrinting:
    """``remove-non-printing-char.perl``: every ``\\p{C}`` character becomes a space."""


Step = (
    Replace
    | MosesTokenize
    | Lowercase
    | CleanCorpus
    | EveryNth
    | NormalizePunctuation
    | RemoveNonPrinting
)


_PERL_SPACE_CHAR = re.compile(f"[{_PERL_SPACE}]")
_ENDS_WITH_PERIOD = re.compile(f"^([^{_PERL_SPACE}]+)\\.$")
_STARTS_WITH_DIGITS = re.compile(r"^[0-9]+")


@functools.cache
def _moses_tokenizer(lang: str):
    from sacremoses import MosesTokenizer

    class _Tokenizer(MosesTokenizer):
        """sacremoses with tokenizer.perl's current "word token method" (mosesdecoder HEAD):
        the last word's final period is always split off, and words are split on each single
        whitespace character with trailing empty fields dropped, as Perl's ``split`` does.
        (sacremoses 0.2 keeps ``etc.``/``i.`` whole at the end of a sentence.)"""

        def handles_nonbreaking_prefixes(self, text: str) -> str:
            words = _PERL_SPACE_CHAR.split(text)
            while words and not words[-1]:
                words.pop()
            last = len(words) - 1
            for i, word in enumerate(words):
                match = _ENDS_WITH_PERIOD.match(word)
                if not match:
                    continue
                pre = match.group(1)
                nxt = words[i + 1] if i < last else ""
                if i == last:
                    words[i] = pre + " ."
                elif (
                    ("." in pre and self.isanyalpha(pre))
                    or (pre in self.NONBREAKING_PREFIXES and pre not in self.NUMERIC_ONLY_PREFIXES)
                    or (nxt and self.islower(nxt[0]))
                ):
                    pass
                elif pre in self.NUMERIC_ONLY_PREFIXES and _STARTS_WITH_DIGITS.match(nxt):
                    pass
                else:
                    words[i] = pre + " ."
            return " ".join(w for w in words if w)

    return _Tokenizer(lang=lang)


@functools.cache
def _moses_normalizer(lang: str):
    from sacremoses import MosesPunctNormalizer

    return MosesPunctNormalizer(lang=lang, perl_parity=True)


def moses_tokenize(line: str, lang: str, *, aggressive: bool = False) -> str:
    """One line through ``tokenizer.perl -l lang``: blank lines unchanged, others tokenized."""
    if _PERL_BLANK.fullmatch(line):
        return line
    return _moses_tokenizer(lang).tokenize(
        line, aggressive_dash_splits=aggressive, return_str=True, escape=True
    )


def perl_lc(line: str) -> str:
    """Perl's ``lc``: full lowercase mapping per character, without Python's final-sigma rule."""
    if "Σ" in line:
        return "".join(c.lower() for c in line)
    return line.lower()


def _non_printing(c: str) -> bool:
    return unicodedata.category(c)[0] == "C"


def remove_non_printing(line: str) -> str:
    """``s/\\p{C}/ /g``: control, format, surrogate, private-use and unassigned characters."""
    if line.isprintable():  # fast path: isprintable() is False for every \\p{C} character
        return line
    return "".join(" " if _non_printing(c) else c for c in line)


def _clean_line(line: str, strip_bars: bool) -> str:
    if strip_bars:
        line = line.replace("|", "")
    line = _PERL_SPACES.sub(" ", line)
    if line.startswith(" "):
        line = line[1:]
    if line.endswith(" "):
        line = line[:-1]
    return line


_LONG_TOKEN = re.compile(f"[^{_PERL_SPACE}|]{{1001}}")


def _clean(
    step: CleanCorpus, pairs: Iterable[tuple[str, str]], langs: tuple[str, str]
) -> Iterator[tuple[str, str]]:
    factored: bool | None = None
    for src, tgt in pairs:
        if step.count_tokenized:
            a, b = moses_tokenize(src, langs[0]), moses_tokenize(tgt, langs[1])
        else:
            a, b = src, tgt
        if factored is None:  # the script decides from its first line only
            factored = "|" in a or "|" in b
        a, b = _clean_line(a, not factored), _clean_line(b, not factored)
        if not a or not b:
            continue
        na, nb = len(a.split(" ")), len(b.split(" "))
        if na > step.max_tokens or nb > step.max_tokens:
            continue
        if na < step.min_tokens or nb < step.min_tokens:
            continue
        if na / nb > step.ratio or nb / na > step.ratio:
            continue
        if _LONG_TOKEN.search(a) or _LONG_TOKEN.search(b):
            continue
        yield (src, tgt) if step.count_tokenized else (a, b)


def _apply(
    step: Step, pairs: Iterable[tuple[str, str]], langs: tuple[str, str]
) -> Iterator[tuple[str, str]]:
    src_lang, tgt_lang = langs
    if isinstance(step, Replace):
        return ((a.replace(step.old, step.new), b.replace(step.old, step.new)) for a, b in pairs)
    if isinstance(step, MosesTokenize):
        agg = step.aggressive
        return (
            (
                moses_tokenize(a, src_lang, aggressive=agg),
                moses_tokenize(b, tgt_lang, aggressive=agg),
            )
            for a, b in pairs
        )
    if isinstance(step, Lowercase):
        return ((perl_lc(a), perl_lc(b)) for a, b in pairs)
    if isinstance(step, CleanCorpus):
        return _clean(step, pairs, langs)
    if isinstance(step, EveryNth):
        n, keep = step.n, step.keep
        return (p for nr, p in enumerate(pairs, 1) if (nr % n == 0) == keep)
    if isinstance(step, NormalizePunctuation):
        ns, nt = _moses_normalizer(src_lang), _moses_normalizer(tgt_lang)
        return ((ns.normalize(a), nt.normalize(b)) for a, b in pairs)
    if isinstance(step, RemoveNonPrinting):
        return ((remove_non_printing(a), remove_non_printing(b)) for a, b in pairs)
    raise TypeError(f"not a step: {step!r}")


def run_steps(
    steps: Iterable[Step], pairs: Iterable[tuple[str, str]], langs: tuple[str, str]
) -> Iterator[tuple[str, str]]:
    """``pairs`` (source line, target line; no newline) through ``steps``, lazily, in order.

    Args:
        steps: The steps, first applied first.
        pairs: Sentence pairs as extracted.
        langs: ``(source language, target language)``: the per-language steps' languages.
    """
    for step in steps:
        pairs = _apply(step, pairs, langs)
    return iter(pairs)

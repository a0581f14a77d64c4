"""The Moses sentence splitter (Philipp Koehn and Josh Schroeder's ``split-sentences.perl``
rules, as the ``sentence-splitter`` package implements them), with its regular expressions
compiled once.

The package's ``SentenceSplitter.split`` passes pattern strings to ``regex`` at every call and
runs a pattern search for every word; this class runs the same rules on the same non-breaking
prefix files (shipped with the package) with compiled patterns, and searches only the words that
end with a period (the only words that pattern can match), so a paragraph splits several times
faster with the same sentences (``tests/test_sentence_split.py`` checks them against the
package).
"""

from __future__ import annotations

import functools
from pathlib import Path

import regex

__all__ = ["MosesSplitter", "moses_splitter"]

_STARTS = r"[\'\"([\u00bf\u00A1\p{Initial_Punctuation}]*[\p{Uppercase_Letter}\p{Other_Letter}]"
_BREAKS = [
    # non-period end of sentence markers (?!) followed by sentence starters
    regex.compile(rf"([?!]) +({_STARTS})"),
    # multi-dots followed by sentence starters
    regex.compile(rf"(\.[\.]+) +({_STARTS})"),
    # punctuation inside a quote or parenthetical, then a possible sentence starter
    regex.compile(
        r"([?!\.][\ ]*[\'\")\]\p{Final_Punctuation}]+) +([\'\"([\u00bf\u00A1\p{Initial_Punctuation}]*[\ ]*"
        r"[\p{Uppercase_Letter}\p{Other_Letter}])"
    ),
    # punctuation, then sentence starter punctuation and upper case
    regex.compile(
        r"([?!\.]) +([\'\"[\u00bf\u00A1\p{Initial_Punctuation}]+[\ ]*[\p{Uppercase_Letter}\p{Other_Letter}])"
    ),
]
_SPACES = regex.compile(r" +")
_PERIOD_END = regex.compile(r"([\w\.\-]*)([\'\"\)\]\%\p{Final_Punctuation}]*)(\.+)$")
_ACRONYM = regex.compile(r"(\.)[\p{Uppercase_Letter}\p{Other_Letter}\-]+(\.+)$")
_NEXT_STARTS = regex.compile(
    r"^([ ]*[\'\"([\u00bf\u00A1\p{Initial_Punctuation}]*[ ]*[\p{Uppercase_Letter}\p{Other_Letter}0-9])"
)
_DIGITS = regex.compile(r"^[0-9]+")
_COMMENT = regex.compile(r"#.*", flags=regex.DOTALL)

_DEFAULT, _NUMERIC_ONLY = 1, 2


class MosesSplitter:
    """Sentences of a text by the Moses rules for ``language`` (ISO 639-1; a language with a
    non-breaking prefix file of the ``sentence-splitter`` package)."""

    def __init__(self, language: str) -> None:
        import sentence_splitter

        path = Path(sentence_splitter.__file__).parent / "non_breaking_prefixes" / f"{language}.txt"
        self.prefixes: dict[str, int] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            kind = _NUMERIC_ONLY if "#NUMERIC_ONLY#" in line else _DEFAULT
            line = _COMMENT.sub("", line).strip()
            if line:
                self.prefixes[line] = kind

    def split(self, text: str) -> list[str]:
        """The sentences of ``text`` (the package's ``SentenceSplitter.split``)."""
        if not text:
            return []
        for pattern in _BREAKS:
            text = pattern.sub("\\1\n\\2", text)
        words = _SPACES.split(text)
        for i in range(len(words) - 1):
            word = words[i]
            if not word.endswith("."):
                continue
            m = _PERIOD_END.search(word)
            if m is None:
                continue
            prefix, starting_punct = m.group(1), m.group(2)
            kind = self.prefixes.get(prefix) if prefix else None
            if kind == _DEFAULT and not starting_punct:
                continue  # a known honorific: no break
            if _ACRONYM.search(word):
                continue  # an upper-case acronym: no break
            if _NEXT_STARTS.search(words[i + 1]):
                numeric = (
                    kind == _NUMERIC_ONLY
                    and not starting_punct
                    and _DIGITS.search(words[i + 1]) is not None
                )
                if not numeric:
                    words[i] = word + "\n"
        text = " ".join(words)
        text = _SPACES.sub(" ", text).replace("\n ", "\n").replace(" \n", "\n").strip()
        return text.split("\n")


@functools.lru_cache(maxsize=32)
def moses_splitter(language: str) -> MosesSplitter:
    """The splitter of ``language``, loaded once."""
    return MosesSplitter(language)

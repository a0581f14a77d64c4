"""Glossaries and do-not-translate lists: a translator's terms, applied to each sentence.

A :class:`Glossary` holds source terms with their target terms, and spans that must come
back exactly as they are (product names, code, URLs). Both are matched by one rule, the one of
:class:`~seq2seq.decode.terminology.Terminology` with ``smart_case``:

- as whole words: the characters on either side of a match are not letters, digits or ``_``
  (``cat`` matches in "a cat." but not in "cats" or "concat"; ``C++`` matches in "C++,");
- case: a term written without any uppercase letter (``bank``) matches in any case (``Bank``
  at the start of a sentence, ``BANK``); a term with one (``Apple``, ``US``) matches only
  exactly;
- the leftmost match wins, the longest where several start at one place; matches do not
  overlap, and a do-not-translate span wins over a glossary term that overlaps it.

How each is applied (:meth:`Glossary.apply`), with the constrained decoding of
:mod:`seq2seq.decode.constraints` (so the engine must do positive constraints: torch, onnx):

- a glossary term found in the sentence puts its target term in the sentence's ``include``
  constraints: the output holds the target term's SentencePiece pieces, so its text holds the
  target term as SentencePiece normalizes it (NFKC; a term with characters the target
  vocabulary lacks is an error);
- a do-not-translate span is replaced, in the source the model reads, by a placeholder made
  of letters of the model's vocabulary that occurs nowhere in the sentence (``QXZJ``), and
  the placeholder becomes an ``include`` constraint; once translated, each placeholder in the
  output is replaced by the span's original text. The span comes back byte for byte as the
  source had it, whatever its characters (even ones the vocabulary lacks), which a constraint
  on the span itself could not promise (SentencePiece normalizes text and cannot output what
  it has no piece for).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seq2seq.core import UserError
from seq2seq.decode.terminology import Terminology

__all__ = ["Applied", "Glossary", "Placeholders"]


@dataclass(frozen=True)
class Applied:
    """A sentence as the model reads it under a glossary, and how to restore its output.

    Attributes:
        source: the sentence with each do-not-translate span replaced by its placeholder.
        terms: ``(target term, where its entry is)`` of the glossary terms found, each once.
        kept: ``(placeholder, original span)`` per do-not-translate span, in source order.
    """

    source: str
    terms: tuple[tuple[str, str], ...] = ()
    kept: tuple[tuple[str, str], ...] = ()

    @property
    def include(self) -> list[str]:
        """The phrases the output must hold: the target terms, then the placeholders."""
        return [t for t, _ in self.terms] + list(dict.fromkeys(p for p, _ in self.kept))

    def names(self) -> dict[str, str]:
        """How errors name each phrase of :attr:`include`."""
        out = {t: f"{t!r} (glossary {where})" for t, where in self.terms}
        out.update({p: f"the do-not-translate span {span!r}" for p, span in self.kept})
        return out

    def restore(self, text: str) -> str:
        """The output ``text`` with every placeholder replaced by its original span."""
        for placeholder, span in self.kept:
            text = text.replace(placeholder, span)
        return text

    def restore_alignment(self, output: str, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """A word alignment of (:attr:`source`, ``output``) as one of the original sentence
        and the restored output: a word that held a placeholder stands for the words of its
        span (words: whitespace-separated, as seq2seq.decode.alignments counts them)."""
        src, tgt = self._word_map(self.source), self._word_map(output)
        out = {
            (a, b)
            for i, j in pairs
            if i < len(src) and j < len(tgt)
            for a in src[i]
            for b in tgt[j]
        }
        return sorted(out)

    def _word_map(self, masked: str) -> list[range]:
        """Per word of ``masked``, the words of the restored text it became."""
        out, start = [], 0
        for word in masked.split():
            n = len(self.restore(word).split())
            out.append(range(start, start + n))
            start += n
        return out


class Glossary:
    """Source terms with their targets, and do-not-translate spans (matching: module docstring).

    Args:
        terms: the glossary, ``(source term, target term)`` pairs or a loaded
            :class:`Terminology` (which should have ``smart_case``).
        keep: the do-not-translate terms.

    Raises:
        UserError: an empty term, or one source term given two targets (naming both entries).
    """

    def __init__(
        self,
        terms: Terminology | Iterable[tuple[str, str]] = (),
        keep: Iterable[str] = (),
    ) -> None:
        if not isinstance(terms, Terminology):
            terms = Terminology(terms, smart_case=True)
        keep = list(keep)
        for no, term in enumerate(keep, start=1):
            if not term.strip():
                raise UserError(f"do-not-translate entry {no}: an empty term")
        self.terms = terms
        self.keep = Terminology([(k, k) for k in keep], smart_case=True)

    @classmethod
    def load(
        cls, glossary: str | Path | None = None, do_not_translate: str | Path | None = None
    ) -> Glossary:
        """A glossary file (``SOURCE<TAB>TARGET`` lines, as ``--terminology``'s) and a
        do-not-translate file (one term per line; empty lines skipped).

        Raises:
            UserError: a missing file, bad UTF-8 or a bad line, naming the file and line.
        """
        terms = Terminology.load(glossary, smart_case=True) if glossary is not None else ()
        keep = read_terms(do_not_translate) if do_not_translate is not None else []
        return cls(terms, keep)

    def __len__(self) -> int:
        return len(self.terms) + len(self.keep)

    def matches(self, sentence: str) -> bool:
        """Whether a term or a do-not-translate span occurs in ``sentence``."""
        return bool(self.keep.spans(sentence) or self.terms.spans(sentence))

    def apply(self, sentence: str, placeholders: Callable[[str, int], list[str]]) -> Applied:
        """``sentence`` under this glossary.

        Args:
            sentence: one source sentence.
            placeholders: ``placeholders(sentence, n)``: n distinct strings that occur nowhere
                in the sentence (:class:`Placeholders`).
        """
        kept = self.keep.spans(sentence)
        taken = [(s, e) for s, e, _, _ in kept]
        terms: dict[str, str] = {}
        for s, e, target, where in self.terms.spans(sentence):
            if not any(s < ke and ks < e for ks, ke in taken):  # a kept span wins
                terms.setdefault(target, where)
        if not kept:
            return Applied(sentence, tuple(terms.items()))
        # One placeholder per distinct span text: the same span twice shares one.
        spans = list(dict.fromkeys(sentence[s:e] for s, e in taken))
        # Placeholders occur neither in the sentence nor in a target term (restored blindly).
        avoid = "\n".join([sentence, *terms])
        marks = dict(zip(spans, placeholders(avoid, len(spans))))
        pieces, last = [], 0
        for s, e in taken:
            pieces += [sentence[last:s], marks[sentence[s:e]]]
            last = e
        pieces.append(sentence[last:])
        return Applied("".join(pieces), tuple(terms.items()), tuple((marks[x], x) for x in spans))


def read_terms(path: str | Path) -> list[str]:
    """The terms of a do-not-translate file: one per line (UTF-8; whitespace around a term and
    empty lines are dropped).

    Raises:
        UserError: a missing file or bad UTF-8, naming the file (and line).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"do-not-translate file not found: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    out = []
    for no, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}:{no}: invalid UTF-8") from None
        if no == 1:
            line = line.lstrip("\ufeff")
        if line.strip():
            out.append(line.strip())
    return out


class Placeholders:
    """Placeholders for do-not-translate spans that a model's tokenizer encodes and decodes
    unchanged: four letters of its vocabulary (uncommon ones first), none occurring in the
    sentence they stand in (whatever the case).

    Args:
        tokenizer: the model's :class:`seq2seq.data.tokenizer.Tokenizer`.

    Raises:
        UserError: the vocabulary has too few letters to make placeholders of.
    """

    CANDIDATES = "QXZJKVWYBCDFGHPqxzjkvwybcdfghp"
    LENGTH = 4

    def __init__(self, tokenizer) -> None:
        from seq2seq.data import UNK_ID

        self.tokenizer = tokenizer
        self._unk = UNK_ID
        self.letters = [c for c in self.CANDIDATES if self._round_trips(c)]
        if len(self.letters) < 2:
            raise UserError(
                "this model's vocabulary has too few letters to make placeholders for "
                "do-not-translate spans"
            )

    def _round_trips(self, text: str) -> bool:
        tok = self.tokenizer
        src, tgt = tok.encode_src([text])[0], tok.encode_tgt([text])[0]
        if not src or not tgt or self._unk in src or self._unk in tgt:
            return False
        return tok.decode_tgt([tgt])[0] == text

    def __call__(self, sentence: str, n: int) -> list[str]:
        """``n`` distinct placeholders, none in ``sentence`` (compared in lowercase)."""
        folded, out = sentence.lower(), []
        base, k = len(self.letters), 0
        while len(out) < n:
            digits, x = [], k
            for _ in range(self.LENGTH):
                digits.append(self.letters[x % base])
                x //= base
            k += 1
            if x:  # every combination is taken: the sentence holds them all (cannot happen)
                raise UserError("no placeholder left for the do-not-translate spans")
            mark = "".join(digits)
            if mark.lower() in folded or any(mark.lower() in o.lower() for o in out):
                continue
            if self._round_trips(mark):
                out.append(mark)
        return out


def spread(glossary: Glossary | Sequence[Glossary | None] | None, n: int) -> list:
    """One glossary (or None) per sentence of ``n``."""
    if glossary is None or isinstance(glossary, Glossary):
        return [glossary] * n
    if len(glossary) != n:
        raise ValueError(f"glossary has {len(glossary)} entries for {n} sentences")
    return list(glossary)

"""Cleaning: the one stage between reading parallel text and binarizing it, with one report.

Rules, applied to each training pair in this order (a pair is counted under the first rule
that drops it):

1. ``empty``: a side is empty or whitespace-only (as read), or encodes to no pieces.
2. ``duplicate`` (``data.dedup``): ``pairs`` drops a pair identical to an earlier one (both
   sides, after stripping); ``sources`` drops a pair whose source was seen before (one target
   per source); ``none`` (the default) keeps every pair. Off by default because Multi30K's
   training set has exact duplicates (3 pairs in en-de) and the published settings train on
   them. Pairs are remembered by an 8-byte BLAKE2 digest (about 80 bytes per distinct pair).
3. ``wrong_language`` (``data.langid``): py3langid (its model ships in the package) names
   another language than the config's for either side. Needs the ``langid`` extra.
4. ``too_long``: a side has more than ``data.max_len`` SentencePiece pieces.
5. ``bad_ratio``: ``max(pieces) > data.max_ratio * min(pieces)``.

Evaluation splits (validation and test) only lose the pairs with a side empty or
whitespace-only as read, so scores stay comparable. :class:`CleaningReport` counts every rule;
its :meth:`~CleaningReport.summary` is the one line a split's binarization prints, and
:meth:`~CleaningReport.to_dict` is kept in the token store's header.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from seq2seq.core import UserError
from seq2seq.data.language_id import LanguageIdentifier

__all__ = ["DEDUP_MODES", "Cleaner", "CleaningReport", "CleaningRules"]

DEDUP_MODES = ("none", "pairs", "sources")


@dataclass(frozen=True)
class CleaningRules:
    """Which rules are on (see the module docstring).

    Attributes:
        dedup: ``none``, ``pairs`` or ``sources``.
        langid: Drop pairs whose sides py3langid assigns to other languages.
        max_len: Most pieces a side may have; None: no limit (evaluation splits).
        max_ratio: Largest allowed piece-length ratio; None: no limit.
    """

    dedup: str = "none"
    langid: bool = False
    max_len: int | None = None
    max_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.dedup not in DEDUP_MODES:
            raise UserError(
                f"data.dedup must be one of {', '.join(DEDUP_MODES)}, got {self.dedup!r}"
            )

    def key(self) -> dict:
        """What a token store records to know whether it was cleaned this way."""
        return {
            "dedup": self.dedup,
            "langid": self.langid,
            "max_len": self.max_len,
            "max_ratio": self.max_ratio,
        }


@dataclass
class CleaningReport:
    """What reading and cleaning one split kept and dropped, per rule.

    Attributes:
        split: Name used in the report line.
        lines: Line pairs read.
        empty: Dropped: a side empty or whitespace-only (or without pieces).
        duplicate: Dropped: seen before (``dedup``).
        wrong_language: Dropped by the language-id rule.
        too_long: Dropped: more than ``max_len`` pieces on a side.
        bad_ratio: Dropped: length ratio above ``max_ratio``.
        rules: The rules that were on.
    """

    split: str = ""
    lines: int = 0
    empty: int = 0
    duplicate: int = 0
    wrong_language: int = 0
    too_long: int = 0
    bad_ratio: int = 0
    rules: CleaningRules = field(default_factory=CleaningRules)

    @property
    def kept(self) -> int:
        """Pairs kept."""
        return (
            self.lines
            - self.empty
            - self.duplicate
            - self.wrong_language
            - self.too_long
            - self.bad_ratio
        )

    def summary(self) -> str:
        """One report line; rules that are off are not listed."""
        parts = [f"{self.empty:,} empty"]
        if self.rules.dedup == "pairs":
            parts.append(f"{self.duplicate:,} duplicate pairs")
        elif self.rules.dedup == "sources":
            parts.append(f"{self.duplicate:,} with a duplicate source")
        if self.rules.langid:
            parts.append(f"{self.wrong_language:,} in another language")
        parts += [f"{self.too_long:,} too long", f"{self.bad_ratio:,} with a bad length ratio"]
        return (
            f"{self.split or 'data'}: kept {self.kept:,} of {self.lines:,} sentence pairs "
            f"(dropped {', '.join(parts)})"
        )

    def to_dict(self) -> dict:
        """The counts (for a store's header)."""
        return {
            "lines": self.lines,
            "empty": self.empty,
            "duplicate": self.duplicate,
            "wrong_language": self.wrong_language,
            "too_long": self.too_long,
            "bad_ratio": self.bad_ratio,
        }


class Cleaner:
    """Applies :class:`CleaningRules` pair by pair and fills a :class:`CleaningReport`.

    Args:
        rules: The rules.
        src_lang: Expected source language (the language-id rule).
        tgt_lang: Expected target language.
        report: Receives the counts (``lines`` and ``empty`` are counted by the reader).
    """

    def __init__(
        self, *, rules: CleaningRules, src_lang: str, tgt_lang: str, report: CleaningReport
    ) -> None:
        self.rules, self.report = rules, report
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self._seen: set[bytes] = set()
        self._digest = hashlib.blake2b
        self._identifier = LanguageIdentifier(purpose="data.langid") if rules.langid else None

    def keep_text(self, src: str, tgt: str) -> bool:
        """The text rules (duplicates, language id) on one non-empty pair."""
        if self.rules.dedup != "none":
            text = src if self.rules.dedup == "sources" else f"{src}\t{tgt}"
            digest = self._digest(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            if digest in self._seen:
                self.report.duplicate += 1
                return False
            self._seen.add(digest)
        if self._identifier is not None and (
            self._identifier.classify(src) != self.src_lang
            or self._identifier.classify(tgt) != self.tgt_lang
        ):
            self.report.wrong_language += 1
            return False
        return True

    def keep_pieces_array(self, n_src: np.ndarray, n_tgt: np.ndarray) -> np.ndarray:
        """The piece-count rules (empty encoding, length, ratio) on a chunk of pairs.

        Args:
            n_src: Source pieces per pair, ``(N,)``.
            n_tgt: Target pieces per pair, ``(N,)``.

        Returns:
            The keep mask, ``(N,)`` bool.
        """
        longest, shortest = np.maximum(n_src, n_tgt), np.minimum(n_src, n_tgt)
        empty = shortest == 0
        drop = empty.copy()
        too_long = np.zeros_like(empty)
        bad_ratio = np.zeros_like(empty)
        if self.rules.max_len is not None:
            too_long = ~drop & (longest > self.rules.max_len)
            drop |= too_long
        if self.rules.max_ratio is not None:
            bad_ratio = ~drop & (longest > self.rules.max_ratio * shortest)
            drop |= bad_ratio
        self.report.empty += int(empty.sum())
        self.report.too_long += int(too_long.sum())
        self.report.bad_ratio += int(bad_ratio.sum())
        return ~drop

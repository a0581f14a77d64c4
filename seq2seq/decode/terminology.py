"""Terminology: source terms and their target terms, which become constraints.

A sentence that contains a source term (as whole words: not inside a longer word;
case-sensitively, or with ``smart_case`` a term written in lowercase in any case) gets the
term's target as an ``include`` constraint (seq2seq.decode.constraints), through
:meth:`seq2seq.decode.translator.Translator.translate_nbest`.

A termbase can hold millions of entries, so it is stored compactly, in memory proportional to
its size and with no Python object per entry: every term's UTF-8 bytes in one byte buffer,
and numpy arrays of the terms' offsets in it, the entries' line numbers and a hash of each
source term (sorted, for binary search). A sentence is matched by hashing its candidate spans: each span that starts
and ends at a word boundary and is as long as some source term (docs/benchmarks.md,
"Terminology"). Compiling the terms into one regular expression, as this module once did, took
memory and time far out of proportion to the file.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from seq2seq.core import UserError

__all__ = ["Terminology"]

_NON_WORD = re.compile(r"\W")
"""What may stand before a term's first and after its last character (``re``'s word rule)."""


class Terminology:
    """Source terms and their target terms (a termbase).

    Matching: a source term matches where it occurs as whole words (the characters around it
    are not word characters, ``re``'s ``\\w``), case-sensitively; with ``smart_case``, a term
    written without any uppercase letter (``bank``) matches in any case (``Bank``, ``BANK``),
    and a term with one (``Apple``, ``US``) only exactly. Scanning the sentence from the
    left, the leftmost match is taken, the longest one where several start there ("New York
    City" over "New York"), and the scan goes on after it: matches never overlap.

    One source term has one target: two entries with the same source term and different
    targets are an error that names both (the same entry twice is allowed).

    Args:
        entries: ``(source term, target term)`` pairs (whitespace around each is dropped);
            errors name them ``entry N`` (1-based).
        smart_case: the case rule above (the glossaries' rule, seq2seq.decode.glossary);
            False: every term matches only exactly (``--terminology``).

    Raises:
        UserError: an empty term, or two entries with one source term and different targets.
    """

    def __init__(self, entries: Iterable[tuple[str, str]], *, smart_case: bool = False) -> None:
        def numbered() -> Iterator[tuple[int, str, str]]:
            for no, (source, target) in enumerate(entries, start=1):
                if not source.strip() or not target.strip():
                    raise UserError(f"entry {no}: an empty term ({source!r}, {target!r})")
                yield no, source.strip(), target.strip()

        self._origin = None
        self.smart_case = smart_case
        self._build(numbered())

    @classmethod
    def load(cls, path: str | Path, *, smart_case: bool = False) -> Terminology:
        """Read ``SOURCE<TAB>TARGET`` lines (empty lines and ``#`` comments skipped).

        Raises:
            UserError: a missing file, bad UTF-8, a line without exactly two non-empty fields,
                or a source term given two targets (naming the file and line, both lines for
                a conflict).
        """
        path = Path(path)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below; lines are read one at a time)
        except FileNotFoundError:
            raise UserError(f"terminology file not found: {path}") from None
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror}") from None
        self = cls.__new__(cls)
        self._origin = str(path)
        self.smart_case = smart_case
        with f:
            self._build(_file_entries(f, path))
        return self

    def where(self, no: int) -> str:
        """How errors name entry line ``no``: ``FILE:LINE``, or ``entry N`` without a file."""
        return f"{self._origin}:{no}" if self._origin is not None else f"entry {no}"

    def __len__(self) -> int:
        return len(self._no)

    def entries(self) -> list[tuple[str, str]]:
        """Every ``(source term, target term)``, in file order."""
        return [
            (self._source(k).decode("utf-8"), self._target(k).decode("utf-8"))
            for k in range(len(self))
        ]

    def _build(self, entries: Iterator[tuple[int, str, str]]) -> None:
        # The blob holds source 0, target 0, source 1, ...; the term k's bytes are between
        # the offsets 2k, 2k + 1 (source) and 2k + 1, 2k + 2 (target). array() keeps the
        # columns compact while they grow: no Python object per entry survives the loop.
        blob = bytearray()
        sizes, hashes, numbers = array("q"), array("q"), array("q")
        lengths: set[int] = set()  # of the source terms, in characters
        put, size, keep_hash, keep_no = blob.extend, sizes.append, hashes.append, numbers.append
        for no, source, target in entries:
            s, t = source.encode("utf-8"), target.encode("utf-8")
            put(s)
            put(t)
            size(len(s))
            size(len(t))
            lengths.add(len(source))
            keep_hash(hash(source))
            keep_no(no)
        self._blob = blob
        self._bounds = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(np.frombuffer(sizes, np.int64), out=self._bounds[1:])
        del sizes
        self._no = np.frombuffer(numbers, np.int64)
        # Sorted by hash (ties in file order), for binary search.
        unsorted = np.frombuffer(hashes, np.int64)
        self._order = np.argsort(unsorted, kind="stable")
        self._hash = unsorted[self._order]
        del unsorted, hashes
        self._lengths = np.array(sorted(lengths), np.int64)
        self._check_conflicts()

    def _source(self, k: int) -> bytes:
        return bytes(self._blob[self._bounds[2 * k] : self._bounds[2 * k + 1]])

    def _target(self, k: int) -> bytes:
        return bytes(self._blob[self._bounds[2 * k + 1] : self._bounds[2 * k + 2]])

    def _check_conflicts(self) -> None:
        """Raise for the first entry (in file order) that gives a source term another target."""
        worst: tuple[int, int] | None = None  # (first, later) entries
        seen: dict[bytes, int] = {}
        previous = -2
        # Equal sources have equal hashes: only runs of equal hashes need a look (rare
        # collisions aside, they are repeated source terms). Each run is in file order.
        for pos in np.flatnonzero(self._hash[1:] == self._hash[:-1]).tolist():
            if pos != previous + 1:  # a new run
                k = int(self._order[pos])
                seen = {self._source(k): k}
            previous = pos
            later = int(self._order[pos + 1])
            first = seen.setdefault(self._source(later), later)
            if first != later and self._target(first) != self._target(later):
                if worst is None or self._no[later] < self._no[worst[1]]:
                    worst = (first, later)
        if worst is not None:
            first, later = worst
            raise UserError(
                f"{self.where(int(self._no[later]))}: the source term "
                f"{self._source(first).decode('utf-8')!r} has the target "
                f"{self._target(later).decode('utf-8')!r} here and "
                f"{self._target(first).decode('utf-8')!r} at {self.where(int(self._no[first]))} "
                "(give each source term one target)"
            )

    def _lookup(self, spans: list[str]) -> list[int]:
        """The entry whose source term is each span, or -1 (one binary search for all); with
        ``smart_case``, a span found nowhere is looked up again in lowercase, and taken if its
        entry's source term has no uppercase letter."""
        out = self._lookup_exact(spans)
        if self.smart_case:
            again = [i for i, k in enumerate(out) if k < 0 and spans[i] != spans[i].lower()]
            for i, k in zip(again, self._lookup_exact([spans[i].lower() for i in again])):
                if k >= 0:
                    term = self._source(k).decode("utf-8")
                    if term == term.lower():
                        out[i] = k
        return out

    def _lookup_exact(self, spans: list[str]) -> list[int]:
        if not spans:
            return []
        h = np.fromiter((hash(x) for x in spans), np.int64, count=len(spans))
        pos = np.searchsorted(self._hash, h, side="left")
        inside = pos < len(self._hash)
        maybe = np.flatnonzero(inside & (self._hash[np.where(inside, pos, 0)] == h))
        out = [-1] * len(spans)
        for i in maybe.tolist():  # equal hashes: compare the bytes (a run of them, rarely)
            data = spans[i].encode("utf-8")
            for j in range(int(pos[i]), len(self._hash)):
                if self._hash[j] != h[i]:
                    break
                k = int(self._order[j])
                if self._source(k) == data:
                    out[i] = k
                    break
        return out

    def targets_for(self, source: str) -> list[str]:
        """The target terms of the source terms found in ``source``, in source order (each
        once)."""
        return [target for target, _ in self.find(source)]

    def find(self, source: str) -> list[tuple[str, str]]:
        """``(target term, where its entry is)`` for the source terms found in ``source``, in
        source order, each target once (``where``: see :meth:`where`)."""
        found: dict[str, str] = {}
        for _s, _e, target, where in self.spans(source):
            found.setdefault(target, where)
        return list(found.items())

    def spans(self, source: str) -> list[tuple[int, int, str, str]]:
        """``(start, end, target term, where its entry is)`` of every match in ``source``, in
        source order (matches never overlap; see the class docstring)."""
        if not len(self._no) or not source:
            return []
        n = len(source)
        cuts = [m.start() for m in _NON_WORD.finditer(source)]
        starts = sorted({0, *(c + 1 for c in cuts if c + 1 < n)})  # word boundaries before
        ends = sorted({n, *cuts})  # and after a term
        lengths = set(self._lengths.tolist())
        longest = int(self._lengths[-1])
        # Every span from a start to an end as long as some source term: longest first.
        spans = [
            (s, e)
            for s in starts
            for e in reversed(ends[bisect_right(ends, s) : bisect_right(ends, s + longest)])
            if e - s in lengths
        ]
        entries = self._lookup([source[s:e] for s, e in spans])
        out = []
        resume = 0  # matches do not overlap: the next one starts at or after this
        for (s, e), k in zip(spans, entries):
            if k >= 0 and s >= resume:
                out.append((s, e, self._target(k).decode("utf-8"), self.where(int(self._no[k]))))
                resume = e
        return out


def _file_entries(f, path: Path) -> Iterator[tuple[int, str, str]]:
    """``(line number, source, target)`` of each entry line of a termbase file."""
    for no, raw in enumerate(f, start=1):  # binary lines end at b"\n" only
        try:
            line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
        except UnicodeDecodeError:
            raise UserError(f"{path}:{no}: invalid UTF-8") from None
        if no == 1:
            line = line.lstrip("\ufeff")
        if line[:1] == "#":
            continue
        fields = line.split("\t")
        if len(fields) == 2:
            source, target = fields[0].strip(), fields[1].strip()
            if source and target:
                yield no, source, target
                continue
        if line.strip():
            raise UserError(f"{path}:{no}: expected SOURCE<TAB>TARGET, got {len(fields)} field(s)")

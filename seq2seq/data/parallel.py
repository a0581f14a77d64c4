"""Reading and validating parallel text: two line-aligned UTF-8 files, plain or gzip.

Lines are split on ``\\n`` only (never ``str.splitlines``, which also splits on ``\\x0b``,
``\\x1c``, ``\\u2028``... and would misalign the sides); a ``\\r`` before the ``\\n`` is
dropped, a missing final newline is fine, other control characters (NUL included) are kept for
SentencePiece to handle. Different line counts and invalid UTF-8 are :class:`UserError` s naming
the file(s), the counts or the line. Pairs with an empty (or whitespace-only) side are dropped,
in every split, and counted (:class:`ReadStats`).

Training pairs go on to :func:`seq2seq.data.store.build_store` (cleaning, binarizing);
validation and test sets are read whole (:func:`read_parallel`).
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from seq2seq.core import READ_CHUNK, UserError, atomic_open
from seq2seq.data.cleaning import CleaningReport

__all__ = [
    "ParallelText",
    "ReadStats",
    "check_parallel",
    "count_lines",
    "iter_parallel",
    "read_parallel",
    "split_tsv",
]


def _open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes; gzip (detected by its magic bytes) is decompressed."""
    if not path.is_file():
        raise UserError(f"file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def count_lines(path: str | Path) -> int:
    """Lines (``\\n``-terminated, plus a final unterminated one) of a plain or gzip file."""
    lines, last = 0, b"\n"
    with _open_binary(Path(path)) as f:
        while chunk := f.read(READ_CHUNK):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def _lines(path: Path) -> Iterator[str]:
    """Decoded lines without their ``\\n`` / ``\\r\\n``; invalid UTF-8 names file and line."""
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):  # binary iteration splits on b"\n" only
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = raw[e.start : e.start + 1]
                raise UserError(
                    f"{path}:{lineno}: invalid UTF-8 (byte {bad!r} at column {e.start + 1})"
                ) from None
            yield text.removeprefix("\ufeff") if lineno == 1 else text


@dataclass
class ReadStats:
    """What reading (and, for a store, binarizing) one split kept and dropped.

    Attributes:
        split: Name used in the report line.
        lines: Line pairs read (after ``limit``).
        empty: Pairs dropped because a side was empty or whitespace-only (or had no pieces).
        too_long: Training pairs dropped for having more than ``max_len`` pieces on a side.
        bad_ratio: Training pairs dropped for a length ratio above ``max_ratio``.
    """

    split: str = ""
    lines: int = 0
    empty: int = 0
    too_long: int = 0
    bad_ratio: int = 0

    @property
    def kept(self) -> int:
        """Pairs kept."""
        return self.lines - self.empty - self.too_long - self.bad_ratio

    def summary(self) -> str:
        """One report line."""
        return (
            f"{self.split or 'data'}: kept {self.kept:,} of {self.lines:,} sentence pairs "
            f"(dropped {self.empty:,} empty, {self.too_long:,} too long, "
            f"{self.bad_ratio:,} with a bad length ratio)"
        )


def check_parallel(src_path: str | Path, tgt_path: str | Path) -> int:
    """The common line count of two parallel files; different counts are a :class:`UserError`."""
    n_src, n_tgt = count_lines(src_path), count_lines(tgt_path)
    if n_src != n_tgt:
        raise UserError(
            f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
            "parallel files need one sentence pair per line"
        )
    return n_src


def iter_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    *,
    limit: int = 0,
    stats: ReadStats | CleaningReport | None = None,
) -> Iterator[tuple[int, str, str]]:
    """Validated, non-empty sentence pairs of two line-aligned files.

    Both files are counted before the first pair is yielded, so a count mismatch is found before
    any work is done.

    Args:
        src_path: Source side (plain or gzip UTF-8).
        tgt_path: Target side.
        limit: Read only the first ``limit`` lines (0 = all); empty pairs among them are dropped.
        stats: Updated with the lines read and the empty pairs dropped.

    Yields:
        ``(line, src, tgt)``: the 0-based line number and both sides, stripped of surrounding
        whitespace.

    Raises:
        UserError: A missing file, different line counts (both files and counts named) or
            invalid UTF-8 (file and line named).
    """
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    stats = stats if stats is not None else ReadStats()
    check_parallel(src_path, tgt_path)
    pairs = zip(_lines(src_path), _lines(tgt_path))
    for line, (src, tgt) in enumerate(itertools.islice(pairs, limit or None)):
        stats.lines += 1
        src, tgt = src.strip(), tgt.strip()
        if not src or not tgt:
            stats.empty += 1
            continue
        yield line, src, tgt


def split_tsv(
    path: str | Path, src_out: str | Path, tgt_out: str | Path, *, columns: tuple[int, int] = (0, 1)
) -> int:
    """Write the two columns of a tab-separated pair file as two line-aligned text files.

    One pair a line, as Tatoeba exports and many OPUS dumps come (``src<TAB>tgt``, or more
    columns with ``columns`` picking the two sentences). A blank line becomes an empty pair
    (dropped later, line numbers stay aligned); a line with too few fields is an error naming
    the file and line. Both outputs appear atomically, and are not rewritten when they are
    newer than ``path``.

    Returns:
        The number of pairs.
    """
    path, src_out, tgt_out = Path(path), Path(src_out), Path(tgt_out)
    a, b = columns
    need = max(a, b) + 1
    if (
        src_out.is_file()
        and tgt_out.is_file()
        and min(src_out.stat().st_mtime_ns, tgt_out.stat().st_mtime_ns) >= path.stat().st_mtime_ns
    ):
        return count_lines(src_out)
    n = 0
    with (
        atomic_open(src_out, "w", encoding="utf-8") as fs,
        atomic_open(tgt_out, "w", encoding="utf-8") as ft,
    ):
        for lineno, line in enumerate(_lines(path), 1):
            fields = line.split("\t")
            if len(fields) < need:
                if not line.strip():
                    fields = [""] * need
                else:
                    raise UserError(
                        f"{path}:{lineno}: expected at least {need} tab-separated fields "
                        f"(source column {a}, target column {b}), found {len(fields)}"
                    )
            fs.write(fields[a] + "\n")
            ft.write(fields[b] + "\n")
            n += 1
    return n


@dataclass
class ParallelText:
    """A split read into memory (validation and test sets).

    Attributes:
        src: Source sentences.
        tgt: Target sentences (references).
        lines: 0-based line number of each pair in the files.
        stats: Lines read and empty pairs dropped.
    """

    src: list[str] = field(default_factory=list)
    tgt: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    stats: ReadStats = field(default_factory=ReadStats)


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, *, limit: int = 0, split: str = ""
) -> ParallelText:
    """All non-empty pairs of a (small) split, validated as in :func:`iter_parallel`."""
    text = ParallelText(stats=ReadStats(split))
    for line, src, tgt in iter_parallel(src_path, tgt_path, limit=limit, stats=text.stats):
        text.src.append(src)
        text.tgt.append(tgt)
        text.lines.append(line)
    return text

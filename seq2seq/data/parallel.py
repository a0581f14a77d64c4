"""From parallel text files to batches of token ids.

The steps, in order:

1. Reading (:func:`iter_parallel`, :func:`read_parallel`): two line-aligned UTF-8 files, plain or
   gzip. Lines are split on ``\\n`` only (never ``str.splitlines``, which also splits on
   ``\\x0b``, ``\\x1c``, ``\\u2028``... and would misalign the sides); a ``\\r`` before the
   ``\\n`` is dropped, a missing final newline is fine, other control characters (NUL included)
   are kept for SentencePiece to handle. Different line counts and invalid UTF-8 are
   :class:`UserError` s naming the file(s), the counts or the line. Pairs with an empty (or
   whitespace-only) side are dropped, in every split, and counted.
2. Cleaning and binarizing (:func:`build_store`): training pairs go through the cleaning stage
   (:mod:`seq2seq.data.cleaning`: duplicates, language id, more than ``max_len`` pieces, a length
   ratio above ``max_ratio``); evaluation splits never do. Ids are streamed, a chunk at a time,
   into a :class:`TokenStore` directory. Each split's counts, per rule, are reported in one line
   and kept in the store's header.
3. Batching (:class:`TokenBucketSampler`): batches of similar-length pairs holding at most
   ``max_tokens`` tokens, padding included; seeded shuffle, a new order every epoch, a shard per
   rank, exact mid-epoch resume.
4. Collating (:func:`collate`): ``src = pieces + [EOS]``, ``tgt = [BOS] + pieces + [EOS]``,
   padded with ``PAD_ID`` into a :class:`Batch`.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from seq2seq.core import UserError, atomic_dir, atomic_open
from seq2seq.data.cleaning import Cleaner, CleaningReport, CleaningRules
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

__all__ = [
    "Batch",
    "ParallelText",
    "ReadStats",
    "TokenBucketSampler",
    "TokenStore",
    "build_store",
    "check_parallel",
    "collate",
    "count_lines",
    "iter_parallel",
    "read_parallel",
    "split_tsv",
]

_CHUNK = 1 << 20
STORE_FORMAT = 1


# ---------------------------------------------------------------------------------------------
# Reading and validating parallel text


def _open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes; gzip (detected by its magic bytes) is decompressed."""
    if not path.is_file():
        raise UserError(f"file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def count_lines(path: str | Path) -> int:
    """Number of lines (``\\n``-terminated, plus a final unterminated one) of a plain or gzip file."""
    lines, last = 0, b"\n"
    with _open_binary(Path(path)) as f:
        while chunk := f.read(_CHUNK):
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


# ---------------------------------------------------------------------------------------------
# The binarized store


def _id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


class _ArrayWriter:
    """Appends 1-D arrays of one dtype to a raw file; can end as a raw file or a ``.npy``."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.size = path, np.dtype(dtype), 0
        self._file = open(path, "wb")

    def append(self, values: np.ndarray) -> None:
        np.ascontiguousarray(values, dtype=self.dtype).tofile(self._file)
        self.size += len(values)

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._file.close()

    def to_npy(self, npy_path: Path) -> None:
        """Rewrite the raw file as a ``.npy`` (header + the same bytes), streaming."""
        self.close()
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False}
        with open(npy_path, "wb") as out, open(self.path, "rb") as raw:
            np.lib.format.write_array_header_1_0(out, {**header, "shape": (self.size,)})
            while chunk := raw.read(_CHUNK):
                out.write(chunk)
        self.path.unlink()


def _file_key(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_store(
    path: str | Path,
    src_file: str | Path,
    tgt_file: str | Path,
    tokenizer: Tokenizer,
    *,
    split: str,
    train: bool,
    max_len: int = 256,
    max_ratio: float = 3.0,
    cleaning: CleaningRules | None = None,
    langs: tuple[str, str] = ("", ""),
    limit: int = 0,
    chunk_size: int = 10_000,
    log: Callable[[str], None] | None = None,
) -> TokenStore:
    """Binarize a split into a :class:`TokenStore` at ``path``, or reuse the one already there.

    Reading, then the cleaning stage (:mod:`seq2seq.data.cleaning`: empty pairs, duplicates,
    language id, length and ratio), then encoding, streamed ``chunk_size`` pairs at a time
    straight into the store's files: memory does not grow with the corpus (except the
    duplicate filter's digests). The store is rebuilt when anything it was built from changed:
    the tokenizer's fingerprint, the text files (path, size, mtime), ``train``, the cleaning
    rules or ``limit``. The directory appears atomically.

    Args:
        path: Store directory.
        src_file: Source side of the split.
        tgt_file: Target side.
        tokenizer: Encodes both sides.
        split: Name for the report line.
        train: Clean (training data only; evaluation data keeps every non-empty pair so that
            scores are comparable).
        max_len: With ``train`` and no ``cleaning``: most pieces a side may have (BOS/EOS not
            counted).
        max_ratio: With ``train`` and no ``cleaning``: largest allowed ``max(len) / min(len)``.
        cleaning: With ``train``: the full rules (default: ``max_len`` and ``max_ratio`` only).
        langs: ``(source, target)`` language codes, for the language-id rule.
        limit: Use only the first ``limit`` lines (0 = all).
        chunk_size: Pairs encoded at a time.
        log: Receives the one report line (default: printed on stderr).

    Returns:
        The opened store.

    Raises:
        UserError: The text is invalid (see :func:`iter_parallel`) or no pair is left.
    """
    rules = (
        (cleaning or CleaningRules(max_len=max_len, max_ratio=max_ratio))
        if train
        else CleaningRules()
    )
    path, src_file, tgt_file = Path(path), Path(src_file), Path(tgt_file)
    key = {
        "format": STORE_FORMAT,
        "fingerprint": tokenizer.fingerprint(),
        "src": _file_key(src_file) if src_file.is_file() else str(src_file),
        "tgt": _file_key(tgt_file) if tgt_file.is_file() else str(tgt_file),
        "train": train,
        "max_len": rules.max_len,
        "max_ratio": rules.max_ratio,
        "cleaning": rules.key(),
        "limit": limit,
    }
    try:
        if json.loads((path / "header.json").read_text(encoding="utf-8")).get("key") == key:
            return TokenStore(path)
    except (FileNotFoundError, ValueError):
        pass

    stats = CleaningReport(split, rules=rules)
    cleaner = Cleaner(rules=rules, src_lang=langs[0], tgt_lang=langs[1], report=stats)
    dtypes = {
        "src": _id_dtype(tokenizer.src_vocab_size),
        "tgt": _id_dtype(tokenizer.tgt_vocab_size),
    }
    with atomic_dir(path, overwrite=True) as tmp, contextlib.ExitStack() as writers:
        ids = {side: _ArrayWriter(tmp / f"{side}.bin", dtypes[side]) for side in ("src", "tgt")}
        ends = {side: _ArrayWriter(tmp / f"{side}.idx.raw", np.int64) for side in ("src", "tgt")}
        lines = _ArrayWriter(tmp / "lines.raw", np.int64)
        for writer in (*ids.values(), *ends.values(), lines):
            writers.callback(writer.close)
        for side in ("src", "tgt"):
            ends[side].append(np.zeros(1, np.int64))
        totals = {"src": 0, "tgt": 0}
        pairs = iter_parallel(src_file, tgt_file, limit=limit, stats=stats)
        if train and (rules.dedup != "none" or rules.langid):
            pairs = (p for p in pairs if cleaner.keep_text(p[1], p[2]))
        while chunk := list(itertools.islice(pairs, chunk_size)):
            line_nos, srcs, tgts = zip(*chunk)
            del chunk
            encoded = {"src": tokenizer.encode_src(srcs), "tgt": tokenizer.encode_tgt(tgts)}
            del srcs, tgts
            lens = {
                side: np.fromiter(map(len, encoded[side]), np.int64, len(line_nos))
                for side in ("src", "tgt")
            }
            if train:
                keep = cleaner.keep_pieces_array(lens["src"], lens["tgt"])
            else:
                keep = np.ones(len(line_nos), bool)
            for side in ("src", "tgt"):
                seqs = encoded[side]
                kept_lens = lens[side][keep]
                if keep.all():
                    flat_seqs = seqs
                else:
                    flat_seqs = [seq for seq, k in zip(seqs, keep.tolist()) if k]
                total = int(kept_lens.sum())
                flat = np.fromiter(itertools.chain.from_iterable(flat_seqs), np.int64, total)
                ids[side].append(flat)
                ends[side].append(totals[side] + np.cumsum(kept_lens))
                totals[side] += total
            lines.append(np.asarray(line_nos, np.int64)[keep])
        if stats.kept == 0:
            raise UserError(f"no sentence pairs left in {src_file} / {tgt_file}: {stats.summary()}")
        for side in ("src", "tgt"):
            ids[side].close()
            ends[side].to_npy(tmp / f"{side}.idx.npy")
        lines.to_npy(tmp / "lines.npy")
        header = {
            "key": key,
            "split": split,
            "n_pairs": stats.kept,
            "src_dtype": dtypes["src"].name,
            "tgt_dtype": dtypes["tgt"].name,
            "src_tokens": totals["src"],
            "tgt_tokens": totals["tgt"],
            "stats": stats.to_dict(),
        }
        with atomic_open(tmp / "header.json", "w", encoding="utf-8") as f:
            json.dump(header, f, indent=1)
    (log or _stderr)(stats.summary())
    return TokenStore(path)


def _ids_memmap(path: Path, dtype: str, count: int) -> np.ndarray:
    if count == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class TokenStore(Dataset):
    """A binarized split: memory-mapped token ids of every pair; opening it reads only a header.

    Directory layout (what :func:`build_store` writes):

    - ``header.json``: ``n_pairs``, ``src_dtype``/``tgt_dtype`` (``uint16`` when the vocabulary
      fits, else ``int32``), token totals, the drop counts (``stats``) and the build ``key``
      (tokenizer fingerprint, source files, filters).
    - ``src.bin``, ``tgt.bin``: every pair's ids (pieces only, no BOS/EOS), concatenated.
    - ``src.idx.npy``, ``tgt.idx.npy``: int64 offsets, ``n_pairs + 1`` of them; pair ``i`` is
      ``bin[idx[i]:idx[i + 1]]``.
    - ``lines.npy``: int64 line number of each pair in the text files.

    Items are ``(i, src_ids, tgt_ids)`` with numpy views into the memory map (see :func:`collate`).
    A store pickles as its path (DataLoader workers reopen it instead of copying it).
    """

    def __init__(self, path: str | Path) -> None:
        """Open the store at ``path`` (a :class:`UserError` when there is none)."""
        self.path = Path(path)
        try:
            self.header = json.loads((self.path / "header.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"no token store at {self.path} (build it with build_store)") from None
        except ValueError as e:
            raise UserError(f"{self.path / 'header.json'} is not valid JSON ({e})") from None
        fmt = self.header.get("key", {}).get("format")
        if fmt != STORE_FORMAT:
            raise UserError(
                f"{self.path} has store format {fmt}, expected {STORE_FORMAT}; rebuild it"
            )
        self._n = int(self.header["n_pairs"])
        self._offsets = {}
        self._ids = {}
        for side in ("src", "tgt"):
            offsets = np.load(self.path / f"{side}.idx.npy", mmap_mode="r")
            if len(offsets) != self._n + 1:
                raise UserError(
                    f"{self.path}/{side}.idx.npy has {len(offsets)} offsets, expected {self._n + 1}"
                )
            self._offsets[side] = offsets
            self._ids[side] = _ids_memmap(
                self.path / f"{side}.bin", self.header[f"{side}_dtype"], int(offsets[-1])
            )
        self._lines = np.load(self.path / "lines.npy", mmap_mode="r")
        self._lens: dict[str, np.ndarray] = {}

    @classmethod
    def open(cls, path: str | Path) -> TokenStore:
        """Open the store at ``path``."""
        return cls(path)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(i, src_ids, tgt_ids)`` of pair ``i`` (views; pieces only)."""
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"pair {i} out of range for a store of {self._n}")
        src_off, tgt_off = self._offsets["src"], self._offsets["tgt"]
        return (
            i,
            self._ids["src"][src_off[i] : src_off[i + 1]],
            self._ids["tgt"][tgt_off[i] : tgt_off[i + 1]],
        )

    def _side_lens(self, side: str) -> np.ndarray:
        if side not in self._lens:
            self._lens[side] = np.diff(self._offsets[side]).astype(np.int32)
        return self._lens[side]

    @property
    def src_lens(self) -> np.ndarray:
        """Pieces per source sentence, int32 (computed from the offsets at first use)."""
        return self._side_lens("src")

    @property
    def tgt_lens(self) -> np.ndarray:
        """Pieces per target sentence, int32 (computed from the offsets at first use)."""
        return self._side_lens("tgt")

    @property
    def lines(self) -> np.ndarray:
        """Line number (in the text files) of each pair."""
        return self._lines

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the tokenizer the store was built with."""
        return self.header["key"]["fingerprint"]

    def __getstate__(self) -> dict:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r}, n_pairs={self._n})"


# ---------------------------------------------------------------------------------------------
# Batching


class TokenBucketSampler(Sampler[list[int]]):
    """Batches of similar-length pairs, each holding at most ``max_tokens`` tokens with padding.

    A batch's size is ``n_sentences * max(max_src_len, max_tgt_len)``: the lengths passed in must
    include the specials the collate function adds (``src_lens + 1`` for EOS, ``tgt_lens + 2``
    for BOS and EOS, the widths of ``Batch.src_ids`` and ``Batch.tgt_ids``).

    Each epoch: pairs are sorted by ``max(src, tgt)`` length, then source length, then target
    length, each divided by ``bucket_width`` (ties in random order from ``(seed, epoch)``); batches
    are cut greedily along that order; then (with ``shuffle``) the batch order is shuffled from
    ``(seed, epoch)``. Every replica computes the same batches; rank ``r`` takes every
    ``num_replicas``-th one from ``r``, so shards are disjoint. Shards are made equally long:
    with ``drop_last`` the last ``len % num_replicas`` batches are dropped for the epoch; without
    it a shorter shard repeats its own first batches (so a few of its pairs are seen twice that
    epoch). A pair longer than ``max_tokens`` alone is a batch of its own (never dropped).

    The epoch is ``epoch_fn()`` when given (read at each ``iter``; the datamodule passes the
    trainer's current epoch), else the value given to :meth:`set_epoch`.

    Args:
        src_lens: Per-pair source length, specials included.
        tgt_lens: Per-pair target length, specials included.
        max_tokens: Token budget per batch, padding included.
        seed: Seed of the shuffles.
        shuffle: Shuffle tie order and batch order (training); False gives batches in length
            order (evaluation).
        num_replicas: Number of data-parallel ranks.
        rank: This rank.
        bucket_width: Lengths are compared in units of this many tokens; wider buckets give more
            varied batches, a little more padding.
        drop_last: Equalize shards by dropping batches instead of repeating them.
        epoch_fn: Returns the current epoch at iteration time.
    """

    def __init__(
        self,
        src_lens: Sequence[int] | np.ndarray,
        tgt_lens: Sequence[int] | np.ndarray,
        *,
        max_tokens: int,
        seed: int,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
        bucket_width: int = 1,
        drop_last: bool = False,
        epoch_fn: Callable[[], int] | None = None,
    ) -> None:
        self._src = np.asarray(src_lens, dtype=np.int64)
        self._tgt = np.asarray(tgt_lens, dtype=np.int64)
        if self._src.shape != self._tgt.shape or self._src.ndim != 1:
            raise ValueError(
                f"src_lens and tgt_lens must be 1-D of one length, got {self._src.shape} "
                f"and {self._tgt.shape}"
            )
        if max_tokens < 1:
            raise UserError(f"max_tokens must be positive, got {max_tokens}")
        if bucket_width < 1:
            raise UserError(f"bucket_width must be positive, got {bucket_width}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in range for {num_replicas} replicas")
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.bucket_width = int(bucket_width)
        self.drop_last = drop_last
        self.epoch_fn = epoch_fn
        self.epoch = 0
        self._start = 0
        self._start_epoch: int | None = None
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iterations (ignored when ``epoch_fn`` is given)."""
        self.epoch = int(epoch)

    def set_start_batch(self, n: int, *, epoch: int | None = None) -> None:
        """Make the next iteration skip its first ``n`` batches (resuming mid-epoch); once.

        With ``epoch``, that next iteration is of ``epoch`` whatever ``epoch_fn`` says: a
        resumed Lightning run creates its first iterator before its epoch counter moves past
        an epoch that the checkpoint had finished.
        """
        if n < 0:
            raise ValueError(f"start batch must be >= 0, got {n}")
        self._start = int(n)
        self._start_epoch = None if epoch is None else int(epoch)

    def current_epoch(self) -> int:
        """The epoch the next iteration uses."""
        return int(self.epoch_fn()) if self.epoch_fn is not None else self.epoch

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        n = len(self._src)
        if n == 0:
            return []
        w = self.bucket_width
        longest = np.maximum(self._src, self._tgt)
        if self.shuffle:
            tie = np.random.default_rng([self.seed, epoch, 0]).permutation(n)
        else:
            tie = np.arange(n)
        order = np.lexsort((tie, self._tgt // w, self._src // w, longest // w))  # last key first
        sizes = longest[order]
        batches = []
        start, cap = 0, self.max_tokens
        while start < n:
            window = sizes[start : start + max(1, cap // max(int(sizes[start]), 1))]
            widths = np.maximum.accumulate(window)
            fits = np.arange(1, len(window) + 1) * widths <= cap  # True for a prefix
            count = max(1, int(fits.sum()))  # an over-long pair is a batch of its own
            batches.append(order[start : start + count])
            start += count
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch, 1]).permutation(len(batches))
            batches = [batches[i] for i in perm]
        return batches

    def batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches (arrays of pair indices) for ``epoch`` (default: the current one)."""
        epoch = self.current_epoch() if epoch is None else int(epoch)
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        batches = self._global_batches(epoch)
        replicas = self.num_replicas
        if replicas > 1:
            if self.drop_last:
                per_rank = len(batches) // replicas
                mine = batches[self.rank : per_rank * replicas : replicas]
            else:
                per_rank = math.ceil(len(batches) / replicas)
                mine = batches[self.rank :: replicas]
                if not mine and batches:  # fewer batches than ranks: borrow one
                    mine = [batches[self.rank % len(batches)]]
                while len(mine) < per_rank:
                    mine = mine + mine[: per_rank - len(mine)]
            batches = mine
        self._cached = (epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self._start_epoch)
        start, self._start, self._start_epoch = self._start, 0, None
        return (b.tolist() for b in batches[start:])

    def __len__(self) -> int:
        """Batches of a whole epoch for this rank (a start batch does not change it)."""
        return len(self.batches())


# ---------------------------------------------------------------------------------------------
# Collating


@dataclass
class Batch:
    """A padded batch of sentence pairs (Lightning moves its tensors to the device).

    Attributes:
        src_ids: ``(B, S)`` long: source pieces + EOS, then PAD.
        tgt_ids: ``(B, T+1)`` long: BOS + target pieces + EOS, then PAD. The model uses
            ``tgt_in, tgt_out = tgt_ids[:, :-1], tgt_ids[:, 1:]``.
        index: ``(B,)`` long: position of each pair in its store (its split, empty pairs and
            filtered pairs excluded).
        n_tgt_tokens: Non-PAD tokens in ``tgt_out`` (pieces + EOS), for loss normalisation.
    """

    src_ids: torch.Tensor
    tgt_ids: torch.Tensor
    index: torch.Tensor
    n_tgt_tokens: int

    def __len__(self) -> int:
        """B."""
        return self.src_ids.size(0)

    def pin_memory(self) -> Batch:
        """A copy in pinned memory (DataLoader ``pin_memory=True`` calls this)."""
        return Batch(
            src_ids=self.src_ids.pin_memory(),
            tgt_ids=self.tgt_ids.pin_memory(),
            index=self.index.pin_memory(),
            n_tgt_tokens=self.n_tgt_tokens,
        )


def collate(items: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> Batch:
    """``[(index, src_pieces, tgt_pieces), ...]`` -> a :class:`Batch` (specials added, padded)."""
    batch_size = len(items)
    src_width = max(len(src) for _, src, _ in items) + 1
    tgt_width = max(len(tgt) for _, _, tgt in items) + 2
    src_ids = np.full((batch_size, src_width), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_ids = np.full((batch_size, tgt_width), PAD_ID, dtype=np.int64)  # (B, T+1)
    index = np.empty(batch_size, dtype=np.int64)
    n_tgt_tokens = 0
    for b, (i, src, tgt) in enumerate(items):
        n, m = len(src), len(tgt)
        src_ids[b, :n] = src
        src_ids[b, n] = EOS_ID
        tgt_ids[b, 0] = BOS_ID
        tgt_ids[b, 1 : m + 1] = tgt
        tgt_ids[b, m + 1] = EOS_ID
        index[b] = i
        n_tgt_tokens += m + 1
    return Batch(
        src_ids=torch.from_numpy(src_ids),
        tgt_ids=torch.from_numpy(tgt_ids),
        index=torch.from_numpy(index),
        n_tgt_tokens=n_tgt_tokens,
    )

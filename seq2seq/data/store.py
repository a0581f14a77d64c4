"""The binarized token store: a split's token ids, memory-mapped, built once per input.

:func:`build_store` reads a split (:func:`seq2seq.data.parallel.iter_parallel`), sends training
pairs through the cleaning stage (:mod:`seq2seq.data.cleaning`: duplicates, language id, more
than ``max_len`` pieces, a length ratio above ``max_ratio``; a validation split only loses
the pairs the model's positions could not hold) and
streams the ids, a chunk at a time, into a :class:`TokenStore` directory. Each split's counts,
per rule, are reported in one line and kept in the store's header.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from seq2seq.core import READ_CHUNK, UserError, atomic_dir, atomic_open, say
from seq2seq.data.cleaning import Cleaner, CleaningReport, CleaningRules
from seq2seq.data.parallel import iter_parallel
from seq2seq.data.tokenizer import Tokenizer

__all__ = ["STORE_FORMAT", "TokenStore", "build_store"]

STORE_FORMAT = 1


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
            while chunk := raw.read(READ_CHUNK):
                out.write(chunk)
        self.path.unlink()


def _file_key(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


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
            scores are comparable, except what ``cleaning`` drops when given).
        max_len: With ``train`` and no ``cleaning``: most pieces a side may have (BOS/EOS not
            counted).
        max_ratio: With ``train`` and no ``cleaning``: largest allowed ``max(len) / min(len)``.
        cleaning: With ``train``: the full rules (default: ``max_len`` and ``max_ratio`` only).
            Without: the piece-count rules for an evaluation split (a validation split drops
            what the model's positions cannot hold); default none.
        langs: ``(source, target)`` language codes, for the language-id rule; with a
            many-language model's tokenizer (M2M100, NLLB: ``language_id``) each side also
            starts with its language token, as transformers' labels do (``[tgt_lang] pieces
            </s>``; the collate function adds ``</s>`` and the start).
        limit: Use only the first ``limit`` lines (0 = all).
        chunk_size: Pairs encoded at a time.
        log: Receives the one report line (default: printed on stderr).

    Returns:
        The opened store.

    Raises:
        UserError: The text is invalid (see :func:`iter_parallel`) or no pair is left.
    """
    if train:
        rules = cleaning or CleaningRules(max_len=max_len, max_ratio=max_ratio)
    else:
        rules = cleaning or CleaningRules()
    count_rules = train or rules.max_len is not None or rules.max_ratio is not None
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
    lang_ids = None
    if hasattr(tokenizer, "language_id"):  # M2M100 / NLLB: the language tokens
        from seq2seq.data.lang_codes import resolve_language

        lang_ids = [
            tokenizer.language_id(resolve_language(code, tokenizer.languages, what=what))
            for code, what in zip(langs, ("data.pair source", "data.pair target"))
        ]
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
            if lang_ids is not None:
                for side, lang_id in zip(("src", "tgt"), lang_ids):
                    encoded[side] = [[lang_id, *r] for r in encoded[side]]
            del srcs, tgts
            lens = {
                side: np.fromiter(map(len, encoded[side]), np.int64, len(line_nos))
                for side in ("src", "tgt")
            }
            if count_rules:
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
    (log or say)(stats.summary())
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

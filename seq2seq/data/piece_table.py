"""What the tokenizers of converted models share: their pieces in id order, and their files.

A converted model's ids are not SentencePiece's own: :mod:`seq2seq.data.vocab_map` (MarianMT)
and :mod:`seq2seq.data.lang_tokens` (M2M100, NLLB-200) each build a table of every piece in our
id order. :class:`PieceTable` answers, once for both, what follows from that table and from the
files it was read from: the vocabulary sizes, the pieces an export writes, the pieces of ids,
and the fingerprint that tells two tokenizers apart. :func:`load_spm` is the one loader of a
SentencePiece model with a one-line error (the toolkit's own models add their special-id check
in :mod:`seq2seq.data.tokenizer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from seq2seq.core import UserError, sha256_files

__all__ = ["PieceTable", "load_spm"]


def load_spm(path: Path) -> spm.SentencePieceProcessor:
    """The SentencePiece model at ``path``; a :class:`UserError` naming it when it is none."""
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise UserError(f"{path} is not a SentencePiece model ({e})") from None


class PieceTable:
    """The part of a tokenizer that follows from its piece tables and files.

    A subclass sets ``files`` (the tokenizer files, hashed by :meth:`fingerprint`; it calls
    :meth:`_check_files` before reading them), ``_pieces`` (the source side's pieces in id
    order) and ``_tgt_pieces`` (the target side's: the same list when the vocabulary is
    shared).
    """

    files: list[Path]
    _pieces: list[str]
    _tgt_pieces: list[str]
    _fingerprint: str | None = None

    @property
    def src_vocab_size(self) -> int:
        """Source vocabulary size (specials included)."""
        return len(self._pieces)

    @property
    def tgt_vocab_size(self) -> int:
        """Target vocabulary size (the source's when the vocabulary is shared)."""
        return len(self._tgt_pieces)

    def pieces(self, side: str = "src") -> list[str]:
        """Every piece of one side (``src`` or ``tgt``), in id order (an export's vocabulary)."""
        return list(self._tgt_pieces if side == "tgt" else self._pieces)

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target piece of each id, specials included."""
        return [self._tgt_pieces[int(i)] for i in ids]

    def fingerprint(self) -> str:
        """sha256 over the files: two tokenizers encode alike iff this is equal."""
        if self._fingerprint is None:
            self._fingerprint = sha256_files(self.files)
        return self._fingerprint

    def _check_files(self) -> None:
        """Refuse, in one line, a tokenizer whose files are not all there."""
        missing = [str(p) for p in self.files if not p.is_file()]
        if missing:
            raise UserError(f"tokenizer file not found: {', '.join(missing)}")

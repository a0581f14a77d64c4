"""A tokenizer whose ids come from a piece -> id map (``vocab.json``), not from SentencePiece.

OPUS-MT (Marian) models tokenize the source with one SentencePiece model and the target with
another, and map both sides' pieces to ids through one shared ``vocab.json`` (or, in models
with separate vocabularies, the target's through ``target_vocab.json``); the SentencePiece
models' own ids are not used. A model directory converted from such a model
(:mod:`seq2seq.model.convert`) holds ``spm.src.model``, ``spm.tgt.model``, ``vocab.json`` and
perhaps ``target_vocab.json``, and :meth:`seq2seq.data.tokenizer.Tokenizer.load` returns a
:class:`VocabMapTokenizer` for it.

Our ``vocab.json`` maps every piece to *our* id, so the special ids are the toolkit's
(:data:`seq2seq.data.tokenizer.SPECIAL_PIECES`, which the tokenizer module, their one owner,
passes in), and every other module works unchanged. It follows ``MarianTokenizer``:

- a piece missing from ``vocab.json`` is ``<unk>``;
- a leading language code ``>>xx<<`` (multilingual targets) is one piece of its own;
- the special tokens written as text (``</s>``, ``<unk>``, ``<pad>``) are split out of the
  sentence and become their ids, and each stretch between them is encoded on its own (with
  its own language-code check), as the slow tokenizers of transformers split on special tokens;
- decoding drops the special tokens, joins the pieces with the SentencePiece model the
  Marian tokenizer decodes with (the source one when the vocabulary is shared, the target one
  when the vocabularies are separate) and turns each remaining word-boundary mark into a space.

EOS is appended by the collate function, as for every model.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import sentencepiece as spm

from seq2seq.core import UserError, atomic_open, sha256_file
from seq2seq.data.piece_table import PieceTable, load_spm

__all__ = [
    "TARGET_VOCAB_FILE",
    "VOCAB_FILE",
    "VocabMapTokenizer",
    "adopt_vocab_map",
    "read_vocab_map",
]

VOCAB_FILE = "vocab.json"
TARGET_VOCAB_FILE = "target_vocab.json"  # the target side's map, where the two differ
_WORD_MARK = "\u2581"  # SentencePiece's word-boundary mark


def read_vocab_map(path: str | Path) -> dict[str, int]:
    """Read a ``vocab.json`` piece -> id map and check that the ids are 0 .. V-1, each once.

    Raises:
        UserError: a file that is not such a map, naming it.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a JSON vocabulary ({e})") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{path} is not a piece -> id map (a non-empty JSON object)")
    ids = sorted(data.values()) if all(type(v) is int for v in data.values()) else None
    if ids != list(range(len(data))):
        raise UserError(f"{path}: the ids must be the integers 0 .. {len(data) - 1}, each once")
    return data


def _language_code(text: str) -> tuple[list[str], str]:
    """Split a leading ``>>xx<<`` off ``text``, as MarianTokenizer does."""
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return [text[: end + 2]], text[end + 2 :]
    return [], text


def _in_id_order(ids: dict[str, int], specials: dict[int, str], path: Path) -> list[str]:
    """The pieces of a map in id order, its special ids checked."""
    pieces = [""] * len(ids)
    for piece, i in ids.items():
        pieces[i] = piece
    for i, piece in specials.items():
        if i >= len(pieces) or pieces[i] != piece:
            raise UserError(f"{path}: id {i} must be {piece!r} (seq2seq's special ids)")
    return pieces


class VocabMapTokenizer(PieceTable):
    """Source and target SentencePiece models with a piece -> id map: one shared by both sides,
    or one for each side (separate vocabularies).

    It has the interface of :class:`seq2seq.data.tokenizer.Tokenizer`, which builds it
    (``Tokenizer.load`` of a directory with a ``vocab.json``).

    Attributes:
        files: ``[source model, target model, vocab.json]``, and ``target_vocab.json`` when
            the vocabularies are separate.
        joint: False (two SentencePiece models).
        separate: True when the target side has a map of its own.
    """

    joint = False

    def __init__(
        self,
        *,
        src_model: str | Path,
        tgt_model: str | Path,
        vocab: str | Path,
        tgt_vocab: str | Path | None = None,
        specials: dict[int, str],
        unk_id: int,
        literals: dict[str, int],
        encode: Callable[[spm.SentencePieceProcessor, str, type], list],
    ) -> None:
        """Load the two SentencePiece models and the map.

        Args:
            src_model: the source SentencePiece model.
            tgt_model: the target SentencePiece model.
            vocab: the ``vocab.json`` piece -> id map (the source's, and the target's
                unless ``tgt_vocab`` is given).
            tgt_vocab: the target side's map (separate vocabularies), or None.
            specials: the special ids and the piece each must carry in the map.
            unk_id: the id of a piece missing from the map.
            literals: the special tokens written as text and the id each becomes.
            encode: the checked ``sp.encode(text, out_type)`` of the tokenizer module.

        Raises:
            UserError: a missing or malformed file, or a map whose special ids carry other
                pieces.
        """
        files = [Path(src_model), Path(tgt_model), Path(vocab)]
        files += [Path(tgt_vocab)] if tgt_vocab is not None else []
        self.files = files
        self._check_files()
        self.separate = tgt_vocab is not None
        self._src = load_spm(files[0])
        self._tgt = load_spm(files[1])
        self._ids = read_vocab_map(files[2])
        self._tgt_ids = read_vocab_map(files[3]) if self.separate else self._ids
        self._unk = unk_id
        self._literals = dict(literals)
        # one capturing group: re.split keeps each literal, at the odd indices
        self._split = re.compile(
            "(" + "|".join(map(re.escape, literals)) + ")" if literals else "(?!)"
        )
        self._specials = frozenset(specials)
        self._encode_text = encode
        self._pieces = _in_id_order(self._ids, specials, files[2])
        self._tgt_pieces = (
            _in_id_order(self._tgt_ids, specials, files[3]) if self.separate else self._pieces
        )
        # MarianTokenizer decodes with the source model when the vocabulary is shared
        self._decoder = self._tgt if self.separate else self._src

    def _pieces_of(self, sp: spm.SentencePieceProcessor, text: str) -> list[str | int]:
        """The pieces of ``text``, with each literal special token as its id."""
        out: list[str | int] = []
        for i, chunk in enumerate(self._split.split(text)):
            if i % 2:  # re.split puts each matched literal at an odd index
                out.append(self._literals[chunk])
            elif chunk:
                code, rest = _language_code(chunk)
                out += code + self._encode_text(sp, rest, str)
        return out

    def _encode(
        self, sp: spm.SentencePieceProcessor, ids: dict[str, int], texts: Sequence[str]
    ) -> list[list[int]]:
        return [
            [p if isinstance(p, int) else ids.get(p, self._unk) for p in self._pieces_of(sp, t)]
            for t in texts
        ]

    def encode_src(self, texts: Sequence[str]) -> list[list[int]]:
        """Source sentences -> ids (no EOS): source pieces looked up in the map."""
        return self._encode(self._src, self._ids, list(texts))

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target sentences -> ids (no BOS/EOS): target pieces looked up in the map."""
        return self._encode(self._tgt, self._tgt_ids, list(texts))

    def _decode(
        self, sp: spm.SentencePieceProcessor, pieces: list[str], ids: Sequence[Sequence[int]]
    ) -> list[str]:
        # skip_special_tokens drops <unk> too
        out = []
        for row in ids:
            kept = [pieces[int(i)] for i in row if int(i) not in self._specials]
            out.append(sp.decode_pieces(kept).replace(_WORD_MARK, " ").strip())
        return out

    def decode_src(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Source ids -> text; special ids anywhere are dropped."""
        return self._decode(self._src, self._pieces, ids)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Target ids -> text, as ``MarianTokenizer.decode(ids, skip_special_tokens=True)``."""
        return self._decode(self._decoder, self._tgt_pieces, ids)

    def src_pieces(self, text: str) -> list[str]:
        """The source pieces of one sentence (plot labels)."""
        return [
            p if isinstance(p, str) else self._pieces[p] for p in self._pieces_of(self._src, text)
        ]

    def __repr__(self) -> str:
        return (
            f"VocabMapTokenizer(vocab_size={len(self._pieces)}/{len(self._tgt_pieces)}, "
            f"files={[str(p) for p in self.files]})"
        )


def adopt_vocab_map(out_dir: str | Path, parent: str | Path, names: Sequence[str]) -> None:
    """Copy a converted model's tokenizer files ``names`` from ``parent`` into ``out_dir``
    (fine-tuning); files already in ``out_dir`` must be byte for byte the parent's.

    Args:
        out_dir: the new run's directory.
        parent: the converted model directory.
        names: the files to copy (the two SentencePiece models and ``vocab.json``).

    Raises:
        UserError: a missing parent file, or a different file already in ``out_dir``.
    """
    out_dir, parent = Path(out_dir), Path(parent)
    missing = [str(parent / n) for n in names if not (parent / n).is_file()]
    if missing:
        raise UserError(f"tokenizer file not found: {', '.join(missing)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        mine, theirs = out_dir / name, parent / name
        if mine.is_file():
            if sha256_file(mine) != sha256_file(theirs):
                raise UserError(
                    f"{mine} is not the tokenizer file of {parent}; remove it, or use a new "
                    "--out directory"
                )
            continue
        with atomic_open(mine, "wb") as f, open(theirs, "rb") as src:
            shutil.copyfileobj(src, f)

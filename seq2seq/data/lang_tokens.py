"""The tokenizer of a converted M2M100 or NLLB-200 model: language tokens as ids.

M2M100 and NLLB-200 (:mod:`seq2seq.model.m2m100`) tell the model the languages with tokens of
their vocabulary: the source is ``[src_lang] pieces </s>`` and the decoder is forced to write
``[tgt_lang]`` first. A converted model directory keeps the folder's own tokenizer files and a
``languages.json`` (written by the conversion) that names the family, the number of weight
rows, NLLB's ``legacy_behaviour`` and every language code with its id in the folder, so no id
is hard-coded here:

- M2M100 (``M2M100Tokenizer``): ``sentencepiece.bpe.model`` and the folder's ``vocab.json``
  (kept as ``m2m100_vocab.json``); the text is split on the special tokens written in it
  (``<s>``, ``<pad>``, ``</s>``, ``<unk>``), each stretch encoded by SentencePiece on its own,
  and each piece looked up in the map (a missing one is ``<unk>``), as transformers does.
- NLLB (``NllbTokenizer``/``NllbTokenizerFast``): the folder's ``tokenizer.json``, run by the
  ``tokenizers`` library without its post-processor (the language token and ``</s>`` are
  placed here, so ``legacy_behaviour`` is honoured for the source).

Ids. Both families number ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 (fairseq's order);
the toolkit's are ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3, and its decoder starts from
``<s>``, while these models' decoder starts from ``</s>``. So our id of a folder id ``i`` is
:func:`our_id`: ``<pad>`` -> 0, ``<unk>`` -> 1, ``</s>`` -> 3, the folder's ``<s>`` -> the last
row (``rows``), every other id unchanged; our ``<s>`` (2) is the decoder's start, which reads the
``</s>`` row (``model.start_is_eos``, :mod:`seq2seq.model.m2m100`). A model has ``rows + 1`` ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import sentencepiece as spm

from seq2seq.core import UserError
from seq2seq.data.piece_table import PieceTable, load_spm

__all__ = [
    "LANGUAGES_FILE",
    "LanguageTokenizer",
    "M2M100_SPM",
    "M2M100_VOCAB",
    "NLLB_TOKENIZER",
    "language_files",
    "our_id",
    "read_languages",
]

LANGUAGES_FILE = "languages.json"
M2M100_SPM = "sentencepiece.bpe.model"
M2M100_VOCAB = "m2m100_vocab.json"
NLLB_TOKENIZER = "tokenizer.json"
_FOLDER_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # the folder's ids 0, 1, 2, 3
_WORD_MARK = "\u2581"


def our_id(folder_id: int, rows: int) -> int:
    """Our id of the folder's id ``folder_id`` (see the module docstring)."""
    return {0: rows, 1: 0, 2: 3, 3: 1}.get(folder_id, folder_id)


def language_files(directory: str | Path) -> list[str]:
    """The tokenizer files of a converted M2M100/NLLB model directory (names), from its
    ``languages.json``."""
    meta = _read_meta(Path(directory) / LANGUAGES_FILE)
    files = [M2M100_SPM, M2M100_VOCAB] if meta["family"] == "m2m100" else [NLLB_TOKENIZER]
    return [LANGUAGES_FILE, *files]


def model_languages(directory: str | Path) -> list[str]:
    """A converted M2M100/NLLB model's language codes (``en``, ``eng_Latn``) in id order, read
    from its ``languages.json`` without loading the model (the server's routing plan)."""
    meta = _read_meta(Path(directory) / LANGUAGES_FILE)
    return sorted(meta["languages"], key=meta["languages"].__getitem__)


def read_languages(directory: str | Path) -> dict:
    """A converted M2M100/NLLB model's ``languages.json``, checked: ``family``, ``rows``,
    ``legacy_behaviour`` and ``languages`` (code -> the folder's id)."""
    return _read_meta(Path(directory) / LANGUAGES_FILE)


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    ok = (
        isinstance(meta, dict)
        and meta.get("family") in ("m2m100", "nllb")
        and type(meta.get("rows")) is int
        and isinstance(meta.get("languages"), dict)
        and all(type(v) is int for v in meta["languages"].values())
    )
    if not ok:
        raise UserError(f"{path} is not a languages file of seq2seq convert m2m100")
    return meta


class LanguageTokenizer(PieceTable):
    """The tokenizer of a converted M2M100/NLLB model (the interface of
    :class:`seq2seq.data.tokenizer.Tokenizer`, plus the language tokens).

    Attributes:
        files: the tokenizer files (``languages.json`` first).
        family: ``m2m100`` or ``nllb``.
        legacy: NLLB's ``legacy_behaviour``: the source is ``pieces </s> [src_lang]``.
        languages: the model's language codes (``en``, ``eng_Latn``), in id order.
    """

    joint = False

    def __init__(
        self,
        directory: str | Path,
        *,
        special_ids: dict[str, int],
        encode: Callable[[spm.SentencePieceProcessor, str, type], list],
    ) -> None:
        """Load the files of ``directory``.

        Args:
            directory: a converted model directory (with ``languages.json``).
            special_ids: the toolkit's ``pad``, ``unk``, ``bos`` and ``eos`` ids.
            encode: the checked ``sp.encode(text, out_type)`` of the tokenizer module.

        Raises:
            UserError: a missing or malformed file.
        """
        directory = Path(directory)
        self.files = [directory / n for n in language_files(directory)]
        self._check_files()
        meta = _read_meta(self.files[0])
        self.family = meta["family"]
        self.legacy = bool(meta.get("legacy_behaviour", False))
        self._rows = meta["rows"]
        self._ids = dict(special_ids)
        self._encode_text = encode
        size = self._rows + 1
        pieces = [""] * size
        if self.family == "m2m100":
            from seq2seq.data.vocab_map import read_vocab_map

            self._sp = load_spm(self.files[1])
            folder = read_vocab_map(self.files[2])
            self._tk = None
        else:
            self._sp = None
            self._tk = _load_tokenizers(self.files[1])
            folder = dict(self._tk.get_vocab(with_added_tokens=True))
        for piece, i in folder.items():
            if not 0 <= i < self._rows:
                raise UserError(f"{self.files[-1]}: id {i} of {piece!r} is not below {self._rows}")
            pieces[our_id(i, self._rows)] = piece
        self._folder = folder
        self.languages = sorted(meta["languages"], key=lambda c: meta["languages"][c])
        self._lang_ids = {c: our_id(i, self._rows) for c, i in meta["languages"].items()}
        for code, i in self._lang_ids.items():
            if not 0 <= i < size:
                raise UserError(f"{self.files[0]}: the id of {code} is not below {self._rows}")
            pieces[i] = pieces[i] or _lang_token(self.family, code)
        pieces[special_ids["bos"]] = "<s>"  # the decoder's start (it reads the </s> row)
        pieces[self._rows] = "<s>"  # the folder's own <s>
        for i, p in enumerate(pieces):
            if not p:
                pieces[i] = f"madeupword{i:04d}"  # rows no tokenizer id names (fairseq's)
        self._pieces = self._tgt_pieces = pieces  # one vocabulary for both sides
        self._dropped = frozenset(
            [special_ids[k] for k in ("pad", "bos", "eos", "unk")]
            + [self._rows]
            + list(self._lang_ids.values())
        )
        literal = {p: our_id(i, self._rows) for i, p in enumerate(_FOLDER_SPECIALS)}
        self._literals = literal
        self._split = re.compile("(" + "|".join(map(re.escape, literal)) + ")")

    # ---- languages ----------------------------------------------------------------------

    def language_id(self, code: str) -> int:
        """Our id of the language token of the model's code ``code`` (``en``, ``eng_Latn``).

        Raises:
            UserError: a code the model does not have.
        """
        if code not in self._lang_ids:
            raise UserError(f"the model has no language {code!r}")
        return self._lang_ids[code]

    def source_ids(self, ids: Sequence[int], lang: str) -> list[int]:
        """A source as the model reads it: ``[lang] ids </s>`` (NLLB's legacy behaviour:
        ``ids </s> [lang]``)."""
        lang_id, eos = self.language_id(lang), self._ids["eos"]
        return [*ids, eos, lang_id] if self.legacy else [lang_id, *ids, eos]

    # ---- encoding -----------------------------------------------------------------------

    def _encode_one(self, text: str) -> list[int]:
        if self._tk is not None:
            enc = self._tk.encode(text, add_special_tokens=False)
            return [our_id(i, self._rows) for i in enc.ids]
        out: list[int] = []
        unk = self._folder.get("<unk>", 3)
        for i, chunk in enumerate(self._split.split(text)):
            if i % 2:
                out.append(self._literals[chunk])
            elif chunk:
                for piece in self._encode_text(self._sp, chunk, str):
                    out.append(our_id(self._folder.get(piece, unk), self._rows))
        return out

    def encode_src(self, texts: Sequence[str]) -> list[list[int]]:
        """Source sentences -> ids, without the language token and ``</s>``."""
        return [self._encode_one(t) for t in texts]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target sentences -> ids, without the language token and ``</s>``."""
        return [self._encode_one(t) for t in texts]

    def _decode_one(self, row: Sequence[int]) -> str:
        kept = [int(i) for i in row if int(i) not in self._dropped]
        if self._tk is not None:
            return self._tk.decode(kept, skip_special_tokens=True)  # (ids 4+: the folder's)
        text = self._sp.decode_pieces([self._pieces[i] for i in kept])
        return text.replace(_WORD_MARK, " ").strip()

    def decode_src(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Source ids -> text; special and language tokens dropped."""
        return [self._decode_one(r) for r in ids]

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Target ids -> text, as ``decode(ids, skip_special_tokens=True)``; the language
        token is dropped."""
        return [self._decode_one(r) for r in ids]

    def src_pieces(self, text: str) -> list[str]:
        """The source pieces of one sentence (plot labels)."""
        return [self._pieces[i] for i in self._encode_one(text)]

    def __repr__(self) -> str:
        return (
            f"LanguageTokenizer({self.family}, vocab_size={len(self._pieces)}, "
            f"languages={len(self.languages)})"
        )


def _lang_token(family: str, code: str) -> str:
    return f"__{code}__" if family == "m2m100" else code


def _load_tokenizers(path: Path):
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise UserError(
            f"{path} needs the tokenizers package (pip install 'seq2seq[hf]' or tokenizers)"
        ) from None
    try:
        return HFTokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 (the library's errors are plain Exceptions)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} is not a tokenizer.json ({first})") from None

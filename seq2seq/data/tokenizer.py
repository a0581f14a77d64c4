"""SentencePiece subword models: training and loading; the one owner of the special token ids.

Every model this toolkit trains reserves the same four ids, which the rest of the code imports
from here: ``PAD_ID = 0``, ``UNK_ID = 1``, ``BOS_ID = 2``, ``EOS_ID = 3``.

A tokenizer directory holds either one joint model ``spm.model`` (source and target share a
vocabulary, which shared embeddings need) or two models ``spm.src.model`` and ``spm.tgt.model``.
Encoding returns pieces only; adding BOS/EOS is the collate function's job
(:func:`seq2seq.data.batching.collate`).
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import sentencepiece as spm

from seq2seq.core import UserError, atomic_open, sha256_file, sha256_files
from seq2seq.data.lang_tokens import LANGUAGES_FILE, LanguageTokenizer, language_files
from seq2seq.data.piece_table import load_spm
from seq2seq.data.vocab_map import (
    TARGET_VOCAB_FILE,
    VOCAB_FILE,
    VocabMapTokenizer,
    adopt_vocab_map,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "JOINT_MODEL",
    "PAD_ID",
    "SPECIAL_PIECES",
    "SRC_MODEL",
    "TGT_MODEL",
    "UNK_ID",
    "Tokenizer",
    "ensure_tokenizer",
    "model_files",
    "trained_options",
    "train_tokenizer",
]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
_DROPPED_BY_DECODE = frozenset({PAD_ID, BOS_ID, EOS_ID})
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
"""The piece of each special id (a converted model's ``vocab.json`` carries them too)."""

JOINT_MODEL = "spm.model"
SRC_MODEL = "spm.src.model"
TGT_MODEL = "spm.tgt.model"


def model_files(directory: str | Path, *, joint: bool) -> list[Path]:
    """The model file(s) a tokenizer directory holds: ``[spm.model]`` or ``[src, tgt]``."""
    directory = Path(directory)
    if joint:
        return [directory / JOINT_MODEL]
    return [directory / SRC_MODEL, directory / TGT_MODEL]


def _sentences(path: Path) -> Iterator[str]:
    """Non-blank lines of a (maybe gzipped) UTF-8 file, split on ``\\n`` only, ``\\r`` stripped."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    with opener(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                text = line.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{path}:{lineno}: invalid UTF-8 (byte {e.start + 1} of the line)"
                ) from None
            if text.strip():
                yield text


def _train_model(
    files: list[Path],
    *,
    model_type: str,
    vocab_size: int,
    character_coverage: float,
    max_sentences: int,
    user_symbols: Sequence[str] = (),
) -> bytes:
    # SentencePiece runs this iterator from C++: an exception raised in it comes back as a
    # RuntimeError with a Python stack frame in its text. So an exception (bad UTF-8, or a
    # signal: Ctrl-C, SIGTERM) ends the iteration and is raised again below, as it was.
    failed: list[BaseException] = []
    count = [0]

    def sentences() -> Iterator[str]:
        try:
            for path in files:
                for sentence in _sentences(path):
                    count[0] += 1
                    yield sentence
        except GeneratorExit:
            raise
        except BaseException as e:  # noqa: BLE001 (re-raised once SentencePiece returns)
            failed.append(e)

    names = ", ".join(str(p) for p in files)
    proto = io.BytesIO()  # SentencePiece writes the serialized model here
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=proto,
            model_type=model_type,
            vocab_size=vocab_size,
            # A corpus too small for vocab_size yields a smaller vocabulary instead of failing.
            hard_vocab_limit=False,
            character_coverage=character_coverage,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece="<pad>",
            unk_piece="<unk>",
            bos_piece="<s>",
            eos_piece="</s>",
            num_threads=min(16, os.cpu_count() or 1),
            minloglevel=1,
            **_user_symbol_options(user_symbols),
        )
    except RuntimeError as e:
        if failed:
            raise failed[0] from None
        if count[0] == 0:
            raise UserError(
                f"no training sentences left in {names} (after filtering: blank lines dropped); "
                "SentencePiece needs some text"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"SentencePiece training on {names} failed: {first}") from None
    if failed:
        raise failed[0]
    if not proto.getvalue():
        raise UserError(f"SentencePiece training on {files[0]} produced no model (empty input?)")
    return proto.getvalue()


def train_tokenizer(
    src_file: str | Path,
    tgt_file: str | Path,
    out_dir: str | Path,
    *,
    model_type: str = "bpe",
    vocab_size: int = 8000,
    joint: bool = True,
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    seed: int = 1,
    user_symbols: Sequence[str] = (),
) -> Tokenizer:
    """Train SentencePiece on the training split and write the model file(s) into ``out_dir``.

    Args:
        src_file: Source side of the training split (plain or gzip UTF-8, one sentence a line).
        tgt_file: Target side.
        out_dir: Directory for ``spm.model`` (joint) or ``spm.src.model`` + ``spm.tgt.model``.
        model_type: ``bpe`` or ``unigram``.
        vocab_size: Pieces per model, specials included. A corpus too small for it gets a smaller
            vocabulary (SentencePiece's ``hard_vocab_limit=False``) rather than an error.
        joint: One model over both sides, or one per side.
        character_coverage: Share of characters covered by the vocabulary (1.0 for small alphabets).
        max_sentences: Sentences sampled (randomly, from ``seed``) when the input has more.
        seed: SentencePiece's random seed (sampling and shuffling).
        user_symbols: Pieces the model must keep whole, each one id (a multilingual model's
            target-language tags, :mod:`seq2seq.data.tags`).

    Returns:
        The trained :class:`Tokenizer`. Files are written atomically.
    """
    if model_type not in ("bpe", "unigram"):
        raise UserError(f"SentencePiece model type must be bpe or unigram, got {model_type!r}")
    if vocab_size < 8:
        raise UserError(f"vocab_size must be at least 8, got {vocab_size}")
    src_file, tgt_file = Path(src_file), Path(tgt_file)
    for path in (src_file, tgt_file):
        if not path.is_file():
            raise UserError(f"training file not found: {path}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spm.set_random_generator_seed(seed)
    options = {
        "model_type": model_type,
        "vocab_size": vocab_size,
        "character_coverage": character_coverage,
        "max_sentences": max_sentences,
        "user_symbols": tuple(user_symbols),
    }
    inputs = [[src_file, tgt_file]] if joint else [[src_file], [tgt_file]]
    for target, files in zip(model_files(out_dir, joint=joint), inputs):
        proto = _train_model(files, **options)
        with atomic_open(target, "wb") as f:
            f.write(proto)
    return Tokenizer.load(out_dir, joint=joint)


_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def trained_options(path: str | Path) -> dict:
    """The options a SentencePiece model file was trained with (read from its trainer spec).

    Returns:
        ``{"model_type", "vocab_size", "character_coverage", "max_sentences"}`` in
        :func:`train_tokenizer`'s terms.
    """
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as e:  # protobuf's DecodeError and friends
        raise UserError(f"{path} is not a SentencePiece model ({e})") from None
    spec = proto.trainer_spec
    return {
        "model_type": _MODEL_TYPES.get(spec.model_type, str(spec.model_type)),
        "vocab_size": spec.vocab_size,
        "character_coverage": round(spec.character_coverage, 6),
        "max_sentences": spec.input_sentence_size,
    }


def _differences(path: Path, wanted: dict) -> list[str]:
    have = trained_options(path)
    out = []
    for key in ("model_type", "vocab_size", "character_coverage", "max_sentences"):
        want = round(wanted[key], 6) if key == "character_coverage" else wanted[key]
        if have[key] != want:
            out.append(f"{key} {have[key]} (the config says {want})")
    return out


def _user_symbol_options(user_symbols: Sequence[str]) -> dict:
    """SentencePiece's option for pieces kept whole (none: no option, as before tags)."""
    return {"user_defined_symbols": list(user_symbols)} if user_symbols else {}


def _missing_symbols(path: Path, user_symbols: Sequence[str]) -> list[str]:
    """The wanted user-defined pieces (language tags) a model file lacks, as a difference."""
    if not user_symbols:
        return []
    sp = _load_processor(path)
    missing = [s for s in user_symbols if sp.piece_to_id(s) == UNK_ID]
    return [f"no piece for {', '.join(missing)} (the config's language tags)"] if missing else []


def _given_models(spm_model: Path, *, joint: bool) -> list[Path]:
    """The model file(s) ``data.spm_model`` names: a file (joint) or a tokenizer directory."""
    if spm_model.is_dir():
        files = model_files(spm_model, joint=joint)
    elif joint:
        files = [spm_model]
    else:
        raise UserError(
            f"data.spm_model {spm_model} is one file, but data.joint_vocab is false: give a "
            f"directory holding {SRC_MODEL} and {TGT_MODEL}"
        )
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise UserError(f"data.spm_model: SentencePiece model not found: {', '.join(missing)}")
    for path in files:
        _load_processor(path)  # right special ids, or a clear error
    return files


def ensure_tokenizer(
    out_dir: str | Path,
    src_file: str | Path,
    tgt_file: str | Path,
    *,
    spm_model: str | Path | None = None,
    **options,
) -> Tokenizer:
    """The experiment's tokenizer: trained once, reused only when it is the one asked for.

    - ``spm_model`` given: that model (a ``spm.model`` file, or a directory with the model
      files) is copied into ``out_dir`` and used as it is; ``vocab_size`` and the other training
      options are then not used. A different model already in ``out_dir`` is an error.
    - otherwise a model already in ``out_dir`` (a rerun, a resumed or a failed run) is reused
      only if it was trained with the same ``model_type``, ``vocab_size``,
      ``character_coverage`` and ``max_sentences`` (read from the model's own trainer spec);
      a difference is an error naming each option, never a silent reuse.
    - else SentencePiece is trained on ``src_file``/``tgt_file`` (:func:`train_tokenizer`).

    Args:
        out_dir: The experiment directory.
        src_file: Source side of the training text.
        tgt_file: Target side.
        spm_model: A SentencePiece model to reuse on purpose.
        **options: :func:`train_tokenizer`'s keyword arguments (``joint`` included).

    Raises:
        UserError: A model in ``out_dir`` that differs from what is asked for.
    """
    out_dir = Path(out_dir)
    if spm_model is not None and (Path(spm_model) / LANGUAGES_FILE).is_file():  # M2M100/NLLB
        adopt_vocab_map(out_dir, spm_model, language_files(spm_model))
        return Tokenizer.load(out_dir, joint=False)
    if spm_model is not None and (Path(spm_model) / VOCAB_FILE).is_file():  # a converted model
        names = [SRC_MODEL, TGT_MODEL, VOCAB_FILE]
        names += [TARGET_VOCAB_FILE] if (Path(spm_model) / TARGET_VOCAB_FILE).is_file() else []
        adopt_vocab_map(out_dir, spm_model, names)
        return Tokenizer.load(out_dir, joint=False)
    joint = options.get("joint", True)
    existing = model_files(out_dir, joint=joint)
    have = all(p.is_file() for p in existing)
    if spm_model is not None:
        given = _given_models(Path(spm_model), joint=joint)
        if have:
            for mine, theirs in zip(existing, given):
                if sha256_file(mine) != sha256_file(theirs):
                    # never advise deleting it: it may belong to a finished model
                    raise UserError(
                        f"{mine} is not the SentencePiece model data.spm_model names ({theirs}): "
                        f"{out_dir} holds another tokenizer; use a new --out directory"
                    )
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            for mine, theirs in zip(existing, given):
                with atomic_open(mine, "wb") as f, open(theirs, "rb") as src:
                    shutil.copyfileobj(src, f)
        return Tokenizer.load(out_dir, joint=joint)
    if have:
        wanted = {
            "model_type": options.get("model_type", "bpe"),
            "vocab_size": options.get("vocab_size", 8000),
            "character_coverage": options.get("character_coverage", 1.0),
            "max_sentences": options.get("max_sentences", 2_000_000),
        }
        for path in existing:
            diffs = _differences(path, wanted) + _missing_symbols(
                path, options.get("user_symbols", ())
            )
            if diffs:
                raise UserError(
                    f"{path} already exists and was trained with {'; '.join(diffs)}: use a new "
                    "--out directory to train a new one, or set data.spm_model to reuse a "
                    "SentencePiece model on purpose"
                )
        return Tokenizer.load(out_dir, joint=joint)
    return train_tokenizer(src_file, tgt_file, out_dir, **options)


def _encode(sp: spm.SentencePieceProcessor, texts: list[str] | str, out_type: type) -> list:
    """``sp.encode``; a text SentencePiece cannot take (a lone surrogate) is a UserError."""
    try:
        return sp.encode(texts, out_type=out_type)
    except (TypeError, RuntimeError):
        for i, text in enumerate([texts] if isinstance(texts, str) else texts):
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise UserError(
                    f"sentence {i + 1}: unpaired surrogate U+{ord(text[e.start]):04X} at "
                    f"character {e.start + 1} is not valid Unicode (text decoded with "
                    "errors='surrogateescape'?); decode input as strict UTF-8"
                ) from None
        raise


def _load_processor(path: Path) -> spm.SentencePieceProcessor:
    sp = load_spm(path)
    expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
    actual = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    if actual != expected:
        raise UserError(
            f"{path} has special ids {actual}, but seq2seq needs {expected}; "
            "train it with seq2seq (train_tokenizer)"
        )
    return sp


class Tokenizer:
    """A loaded SentencePiece model pair (the same model twice when joint).

    Attributes:
        files: The model file(s): ``[spm.model]`` or ``[spm.src.model, spm.tgt.model]``.
        joint: Whether source and target share one model.
    """

    def __init__(self, *, src_model: str | Path, tgt_model: str | Path) -> None:
        """Load models; pass the same path twice for a joint model."""
        src_model, tgt_model = Path(src_model), Path(tgt_model)
        self.joint = src_model.resolve() == tgt_model.resolve()
        self.files = [src_model] if self.joint else [src_model, tgt_model]
        self._src = _load_processor(src_model)
        self._tgt = self._src if self.joint else _load_processor(tgt_model)
        self._fingerprint: str | None = None

    @classmethod
    def load(cls, directory: str | Path, *, joint: bool | None = None) -> Tokenizer:
        """Load the tokenizer in ``directory``.

        Args:
            directory: Holds ``spm.model`` or ``spm.src.model`` + ``spm.tgt.model``.
            joint: Which kind to load; None detects it (an error when both kinds are present).
        """
        directory = Path(directory)
        if joint is not True and (directory / LANGUAGES_FILE).is_file():  # M2M100 / NLLB
            return LanguageTokenizer(
                directory,
                special_ids={"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
                encode=_encode,
            )
        if joint is not True and (directory / VOCAB_FILE).is_file():  # a converted model
            return VocabMapTokenizer(
                src_model=directory / SRC_MODEL,
                tgt_model=directory / TGT_MODEL,
                vocab=directory / VOCAB_FILE,
                tgt_vocab=target if (target := directory / TARGET_VOCAB_FILE).is_file() else None,
                specials=SPECIAL_PIECES,
                unk_id=UNK_ID,
                # Marian's special tokens written as text; its <pad> is the decoder's start,
                # which is our <s> row (seq2seq.model.marian), and our <pad> id is masked
                literals={"</s>": EOS_ID, "<unk>": UNK_ID, "<pad>": BOS_ID},
                encode=_encode,
            )
        has_joint = (directory / JOINT_MODEL).is_file()
        has_pair = all(p.is_file() for p in model_files(directory, joint=False))
        if joint is None:
            if has_joint and has_pair:
                raise UserError(
                    f"{directory} holds both {JOINT_MODEL} and {SRC_MODEL}/{TGT_MODEL}; "
                    "say which (joint=True/False)"
                )
            if not has_joint and not has_pair:
                raise UserError(
                    f"no SentencePiece model in {directory} "
                    f"(expected {JOINT_MODEL}, or {SRC_MODEL} and {TGT_MODEL})"
                )
            joint = has_joint
        files = model_files(directory, joint=joint)
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise UserError(f"SentencePiece model not found: {', '.join(missing)}")
        return cls(src_model=files[0], tgt_model=files[-1])

    @property
    def src_vocab_size(self) -> int:
        """Source vocabulary size V (specials included)."""
        return self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        """Target vocabulary size V (specials included)."""
        return self._tgt.get_piece_size()

    def encode_src(self, texts: Sequence[str]) -> list[list[int]]:
        """Source sentences -> piece ids (no BOS/EOS); a lone surrogate is a UserError.

        A leading target-language tag that is a piece of the model (``<2fr> ...``; see
        :mod:`seq2seq.data.tags`) becomes its one id, first; a model without tags encodes
        every sentence as it is."""
        tags, rest = self._split_tags(list(texts))
        ids = _encode(self._src, rest, int)
        return [row if tag is None else [tag, *row] for tag, row in zip(tags, ids)]

    def _split_tags(self, texts: list[str]) -> tuple[list[int | None], list[str]]:
        """Per sentence, the id of its leading language tag (None: none) and the rest."""
        from seq2seq.data.tags import split_tag

        tags: list[int | None] = []
        rest: list[str] = []
        for text in texts:
            tag, tail = split_tag(text) if isinstance(text, str) else (None, text)
            tag_id = self._src.piece_to_id(tag) if tag is not None else UNK_ID
            tags.append(tag_id if tag_id != UNK_ID else None)
            rest.append(tail if tag_id != UNK_ID else text)
        return tags, rest

    def language_tags(self) -> list[str]:
        """The target-language tags that are pieces of the source model (none: bilingual)."""
        from seq2seq.data.tags import TAG_RE

        pieces = (self._src.id_to_piece(i) for i in range(self._src.get_piece_size()))
        return [p for p in pieces if TAG_RE.fullmatch(p)]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target sentences -> piece ids (no BOS/EOS); a lone surrogate is a UserError."""
        return _encode(self._tgt, list(texts), int)

    def decode_src(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Source ids -> text; PAD, BOS and EOS anywhere are ignored (UNK decodes as ``⁇``)."""
        return self._decode(self._src, ids)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Target ids -> text; PAD, BOS and EOS anywhere are ignored (UNK decodes as ``⁇``)."""
        return self._decode(self._tgt, ids)

    @staticmethod
    def _decode(sp: spm.SentencePieceProcessor, ids: Sequence[Sequence[int]]) -> list[str]:
        rows = [[int(i) for i in row if int(i) not in _DROPPED_BY_DECODE] for row in ids]
        return sp.decode(rows) if rows else []

    def src_pieces(self, text: str) -> list[str]:
        """The source pieces of one sentence (plot labels), a leading tag one piece as in
        :meth:`encode_src`."""
        tags, rest = self._split_tags([text])
        pieces = _encode(self._src, rest[0], str)
        return pieces if tags[0] is None else [self._src.id_to_piece(tags[0]), *pieces]

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target piece of each id, specials included (``<s>``, ``</s>``, ``<pad>``)."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]

    def fingerprint(self) -> str:
        """sha256 over the model file(s): two tokenizers encode alike iff this is equal."""
        if self._fingerprint is None:
            self._fingerprint = sha256_files(self.files)
        return self._fingerprint

    def __repr__(self) -> str:
        kind = "joint" if self.joint else "separate"
        return (
            f"Tokenizer({kind}, src_vocab_size={self.src_vocab_size}, "
            f"tgt_vocab_size={self.tgt_vocab_size}, files={[str(p) for p in self.files]})"
        )

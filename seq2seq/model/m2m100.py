"""M2M100 and NLLB-200 (``M2M100ForConditionalGeneration``) into a model directory.

``seq2seq convert m2m100 HF_DIR --out MODEL_DIR`` for a local folder of either family; the
tokenizer files tell which: ``vocab.json`` + ``sentencepiece.bpe.model`` is M2M100
(``M2M100Tokenizer``), ``tokenizer.json`` is NLLB-200 (``NllbTokenizer``/``NllbTokenizerFast``).
The weights are read as for Marian (:mod:`seq2seq.model.convert`: one file or shards,
safetensors or ``.bin`` through ``torch.load(weights_only=True)``, float32 or float16), without
transformers.

**Architecture** (each piece a ``ModelConfig`` option): pre-norm layers with the encoder's and
decoder's final layer norms (``norm_first: true``), embeddings scaled by sqrt(d_model)
(``scale_embedding``), tensor2tensor's sinusoidal table read from row ``padding_idx + 1`` =
2 (``positions: sinusoidal``, ``position_offset: 2``; computed, never read from the file), the
config's activation (ReLU), biases on every linear layer, one embedding shared by both sides
and tied to the output, no output bias.

**Vocabulary** (:mod:`seq2seq.data.lang_tokens`): the folder numbers ``<s>`` 0, ``<pad>`` 1,
``</s>`` 2, ``<unk>`` 3 and its decoder starts from ``</s>``. Our ``<pad>``, ``<unk>`` and
``</s>`` rows are the folder's; our ``<s>`` id stays the decoder's start, and
``model.start_is_eos: true`` makes it read the ``</s>`` row (``Decoder.embed``), as the
folder's decoder does, with its own logit fixed at :data:`seq2seq.model.marian.START_BIAS`
(``Seq2SeqTransformer.project``), so training moves one row for both, as fairseq's does, and a
fine-tuned model exports back exactly. Our ``<s>`` row is written as a copy of the ``</s>``
row and is not used (a directory converted before ``start_is_eos`` existed reads it, and keeps
its output out of the softmax with the ``final_logits_bias`` START_BIAS); the folder's ``<s>``
row moves to the end. Every other row keeps its id, so language tokens and the rows no
tokenizer id names (M2M100's made-up words) stay in the softmax, as in transformers. A
converted model has one row more than the folder's.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import torch

from seq2seq.config import DecodingConfig, ExperimentConfig, ModelConfig
from seq2seq.core import UserError, atomic_dir
from seq2seq.data import (
    LANGUAGES_FILE,
    M2M100_SPM,
    M2M100_VOCAB,
    NLLB_TOKENIZER,
    our_id,
    read_vocab_map,
)
from seq2seq.model.convert import _check_shapes, _read_weights, read_hf_config
from seq2seq.model.directory import save_model_dir
from seq2seq.model.hf_weights import read_json
from seq2seq.model.marian import (
    ACTIVATIONS,
    START_BIAS,
    _fused,
    marian_layer_names,
    marian_shapes,
    to_marian_layers,
)
from seq2seq.model.transformer import build_model

__all__ = [
    "M2M100_CODES",
    "POSITION_OFFSET",
    "convert_m2m100",
    "m2m100_order",
    "read_m2m100_config",
    "to_m2m100_weights",
]

POSITION_OFFSET = 2
"""M2M100's sinusoidal table: position p reads row p + padding_idx + 1 (padding_idx 1)."""

# fairseq's language lists, in dictionary order, for an M2M100 folder whose tokenizer_config
# names them only by ``language_codes`` (as transformers 5 saves it); the ids are then
# len(vocab.json) + the index, read from the folder's own vocab.json
M2M100_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
_M2M100_TOKEN = re.compile(r"__([A-Za-z]{2,3}(?:[_-][A-Za-z0-9]+)?)__")
_NLLB_CODE = re.compile(r"[a-z]{2,3}_[A-Z][a-z]{3}")
_FOLDER_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


def m2m100_order(rows: int) -> list[int]:
    """For each of our ids, the folder's row it takes: ``[<pad>, <unk>, </s> (our start),
    </s>, 4 .. rows-1, <s>]`` (``rows + 1`` entries)."""
    return [1, 3, 2, 2, *range(4, rows), 0]


def to_m2m100_weights(
    state: Mapping[str, torch.Tensor],
    *,
    n_encoder_layers: int,
    n_decoder_layers: int,
    where: str,
    start_is_eos: bool,
) -> dict[str, torch.Tensor]:
    """Our state dict -> an M2M100 folder's tensors (the inverse of
    :func:`from_m2m100_weights`): the model's own tensors or views of them (the split
    projections), and the embedding's rows reordered (the one copy).

    The folder has one row for the decoder's start and the end (its decoder starts from
    ``</s>``). With ``start_is_eos`` (``model.start_is_eos``, what conversion writes) our
    decoder reads that one row too, fine-tuned or not, and our unused ``<s>`` row is dropped.
    Without it (a directory converted before the option existed) our ``<s>`` row is the start
    and must still equal our ``</s>`` row, as conversion wrote it. Either way the output bias
    must be conversion's (0, and :data:`~seq2seq.model.marian.START_BIAS` on ``<s>``),
    because M2M100 has none.

    Args:
        state: our model's ``state_dict()``.
        n_encoder_layers: encoder layers.
        n_decoder_layers: decoder layers.
        where: the file the messages name.
        start_is_eos: the model's ``model.start_is_eos``.

    Returns:
        ``model.shared.weight`` (rows in the folder's order, our ``<s>`` row dropped), both
        sides' final ``layer_norm`` and every layer's weights under transformers' names.

    Raises:
        UserError: a start row or an output bias that M2M100 cannot express.
    """
    emb = state["encoder.embedding.weight"]
    rows = emb.size(0) - 1
    if not start_is_eos and not torch.equal(emb[2], emb[3]):
        raise UserError(
            f"{where}: the decoder's start row (<s>) differs from the </s> row (fine-tuned "
            "from a model converted before model.start_is_eos existed); "
            "M2M100ForConditionalGeneration has one row for both: export it with "
            "--format ctranslate2 or onnx, or fine-tune a model converted again"
        )
    expected = torch.zeros(rows + 1)
    expected[2] = START_BIAS
    bias = state.get("final_logits_bias")
    if bias is None or not torch.equal(bias.detach().cpu().float(), expected):
        raise UserError(
            f"{where}: the model's output bias is not a converted M2M100's (M2M100 has none)"
        )
    index = torch.tensor([our_id(i, rows) for i in range(rows)])  # folder row i <- ours
    out = {"model.shared.weight": emb.index_select(0, index)}
    for side in ("encoder", "decoder"):
        for kind in ("weight", "bias"):
            out[f"model.{side}.layer_norm.{kind}"] = state[f"{side}.final_norm.{kind}"]
    out.update(
        to_marian_layers(
            state, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers
        )
    )
    return {k: v.detach() for k, v in out.items()}


def read_m2m100_config(hf_dir: str | Path) -> dict:
    """``config.json`` of an M2M100/NLLB folder, checked for what conversion can map.

    Raises:
        UserError: no config.json, another ``model_type`` (mBART, T5, Marian...), or an
            option with no equivalent here, naming the key.
    """
    path, cfg = read_hf_config(
        hf_dir, "m2m_100", "seq2seq convert m2m100 takes 'm2m_100' models (M2M100, NLLB-200)"
    )
    need = (
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "vocab_size",
    )
    for key in need:
        if type(cfg.get(key)) is not int or cfg[key] < 1:
            raise UserError(f"{path}: {key} is missing or not a positive integer")
    for key, same in (
        ("decoder_attention_heads", "encoder_attention_heads"),
        ("decoder_ffn_dim", "encoder_ffn_dim"),
    ):
        if cfg.get(key, cfg[same]) != cfg[same]:
            raise UserError(f"{path}: {key} {cfg[key]} differs from {same} {cfg[same]}")
    for key, want in (("pad_token_id", 1), ("eos_token_id", 2), ("decoder_start_token_id", 2)):
        if cfg.get(key, want) != want:
            raise UserError(
                f"{path}: {key} is {cfg[key]!r}; M2M100 and NLLB models have {want} (fairseq's "
                "<s> 0, <pad> 1, </s> 2, <unk> 3)"
            )
    if cfg.get("activation_function", "relu") not in ACTIVATIONS:
        raise UserError(
            f"{path}: activation_function {cfg.get('activation_function')!r} is not one of "
            f"{', '.join(ACTIVATIONS)}"
        )
    if cfg["d_model"] % cfg["encoder_attention_heads"]:
        raise UserError(f"{path}: encoder_attention_heads must divide d_model")
    return cfg


def _family(hf_dir: Path) -> str:
    """``m2m100`` or ``nllb``, from the tokenizer files (and tokenizer_config's class)."""
    config = hf_dir / "tokenizer_config.json"
    cls = read_json(config).get("tokenizer_class", "") if config.is_file() else ""
    cls = cls if isinstance(cls, str) else ""
    if cls.startswith("Nllb") or (
        not cls.startswith("M2M100") and (hf_dir / NLLB_TOKENIZER).is_file()
    ):
        if not (hf_dir / NLLB_TOKENIZER).is_file():
            raise UserError(
                f"{hf_dir / NLLB_TOKENIZER} not found: seq2seq reads an NLLB tokenizer from its "
                "tokenizer.json (the folder has only sentencepiece.bpe.model)"
            )
        return "nllb"
    missing = [n for n in ("vocab.json", M2M100_SPM) if not (hf_dir / n).is_file()]
    if missing:
        raise UserError(
            f"{hf_dir / missing[0]} not found: an M2M100 folder needs vocab.json and "
            f"{M2M100_SPM}, an NLLB folder tokenizer.json"
        )
    return "m2m100"


def _check_specials(ids: dict[str, int], where: Path) -> None:
    for piece, i in _FOLDER_SPECIALS.items():
        if ids.get(piece) != i:
            raise UserError(
                f"{where}: {piece} has id {ids.get(piece)}, expected {i} (fairseq's order)"
            )


def _m2m100_languages(hf_dir: Path, n_vocab: int) -> tuple[dict[str, int], int]:
    """The language codes and their ids of an M2M100 folder, and its made-up words."""
    path = hf_dir / "tokenizer_config.json"
    tok = read_json(path) if path.is_file() else {}
    decoder = tok.get("added_tokens_decoder")
    found: dict[str, int] = {}
    if isinstance(decoder, dict):
        for key, entry in decoder.items():
            content = entry.get("content") if isinstance(entry, dict) else None
            m = _M2M100_TOKEN.fullmatch(content) if isinstance(content, str) else None
            if m and key.isdigit():
                found[m.group(1)] = int(key)
    if not found:
        listed = tok.get("additional_special_tokens") or tok.get("extra_special_tokens") or []
        tokens = [t for t in listed if isinstance(t, str) and _M2M100_TOKEN.fullmatch(t)]
        codes = [_M2M100_TOKEN.fullmatch(t).group(1) for t in tokens]
        if not codes:
            name = tok.get("language_codes", "m2m100")
            if name not in M2M100_CODES:
                raise UserError(f"{path}: language_codes {name!r} is not m2m100 or wmt21")
            codes = M2M100_CODES[name]
        found = {c: n_vocab + i for i, c in enumerate(codes)}
    madeup = tok.get("num_madeup_words", 8)
    return found, madeup if type(madeup) is int and madeup >= 0 else 8


def _nllb_languages(path: Path) -> tuple[dict[str, int], int]:
    """The language codes and ids of an NLLB ``tokenizer.json`` (its special added tokens),
    and the size of its vocabulary."""
    data = read_json(path)
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict):
        raise UserError(f"{path} has no model vocabulary (not a tokenizer.json)")
    ids = {p: i for p, i in vocab.items() if type(i) is int}
    found = {}
    for entry in data.get("added_tokens") or []:
        if isinstance(entry, dict) and type(entry.get("id")) is int:
            ids[entry.get("content")] = entry["id"]
            if entry.get("special") and _NLLB_CODE.fullmatch(str(entry.get("content"))):
                found[entry["content"]] = entry["id"]
    _check_specials(ids, path)
    return found, max(ids.values()) + 1


def _tokenizer_meta(hf_dir: Path, family: str, rows: int) -> dict:
    """The ``languages.json`` of the model directory (checked against the weights' rows)."""
    if family == "m2m100":
        vocab = read_vocab_map(hf_dir / "vocab.json")
        _check_specials(vocab, hf_dir / "vocab.json")
        languages, spare = _m2m100_languages(hf_dir, len(vocab))
        size = max([len(vocab) - 1, *languages.values()]) + 1
        where = hf_dir / "vocab.json"
        legacy = False
    else:
        languages, size = _nllb_languages(hf_dir / NLLB_TOKENIZER)
        spare, where = 7, hf_dir / NLLB_TOKENIZER  # fairseq pads rows to a multiple of 8
        path = hf_dir / "tokenizer_config.json"
        legacy = bool(read_json(path).get("legacy_behaviour", False)) if path.is_file() else False
    if not languages:
        raise UserError(f"{where}: the tokenizer holds no language codes")
    if not size <= rows <= size + spare:
        raise UserError(
            f"{where}: the tokenizer has {size} ids, but the weights have {rows} rows "
            f"(config.json vocab_size): they do not belong together"
        )
    return {"family": family, "rows": rows, "legacy_behaviour": legacy, "languages": languages}


def _shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    d = cfg["d_model"]
    shapes = marian_shapes(
        vocab_size=cfg["vocab_size"],
        d_model=d,
        d_ff=cfg["encoder_ffn_dim"],
        n_encoder_layers=cfg["encoder_layers"],
        n_decoder_layers=cfg["decoder_layers"],
    )
    del shapes["final_logits_bias"]  # M2M100 has none
    for side in ("encoder", "decoder"):
        for kind in ("weight", "bias"):
            shapes[f"model.{side}.layer_norm.{kind}"] = (d,)
    return shapes


def from_m2m100_weights(
    tensors: Mapping[str, torch.Tensor], cfg: dict, where: str
) -> dict[str, Callable[[], torch.Tensor]]:
    """The folder's tensors -> our state dict (float32), in :func:`m2m100_order`: for each of
    our tensors a function that makes it (as :func:`seq2seq.model.marian.from_marian_weights`;
    ``save_model_dir`` calls each as it writes it, so one converted tensor exists at a time).

    Args:
        tensors: the folder's tensors (a dict, or an ``HFWeights`` that reads each on lookup).
        cfg: the folder's ``config.json``.
        where: the file the messages name.
    """
    name = "model.shared.weight"
    if name not in tensors:
        name = "model.encoder.embed_tokens.weight"
    shapes = getattr(tensors, "shapes", None) or {name: tuple(tensors[name].shape)}
    rows = shapes[name][0]

    def embedding() -> torch.Tensor:
        return tensors[name].index_select(0, torch.tensor(m2m100_order(rows)))

    def bias() -> torch.Tensor:
        out = torch.zeros(rows + 1)
        out[2] = START_BIAS  # our <s> (the decoder's start) is never generated
        return out

    def one(theirs: str) -> Callable[[], torch.Tensor]:
        return lambda: tensors[theirs]

    def cat(parts: list[str]) -> Callable[[], torch.Tensor]:
        return lambda: torch.cat([tensors[p] for p in parts], dim=0)

    out: dict[str, Callable[[], torch.Tensor]] = {
        "encoder.embedding.weight": embedding,
        "final_logits_bias": bias,
    }
    for side, n in (("encoder", cfg["encoder_layers"]), ("decoder", cfg["decoder_layers"])):
        for i in range(n):
            for ours, theirs in marian_layer_names(side, i).items():
                out[ours] = one(theirs)
            for ours, parts in _fused(side, i):
                out[ours] = cat(parts)
        for kind in ("weight", "bias"):
            out[f"{side}.final_norm.{kind}"] = one(f"model.{side}.layer_norm.{kind}")
    return {k: _float32(f) for k, f in out.items()}


def _float32(make: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    return lambda: make().to(torch.float32).contiguous()


def _pair(hf_dir: Path, languages: dict[str, int], pair: str | None) -> str:
    if pair is not None:
        return pair
    path = hf_dir / "tokenizer_config.json"
    tok = read_json(path) if path.is_file() else {}
    src, tgt = tok.get("src_lang"), tok.get("tgt_lang")
    if src in languages and tgt in languages and src != tgt:
        return f"{src}-{tgt}"
    codes = sorted(languages, key=languages.get)
    return f"{codes[0]}-{codes[1]}" if len(codes) > 1 else f"{codes[0]}-{codes[0]}"


def _decoding(hf_dir: Path) -> DecodingConfig:
    path = hf_dir / "generation_config.json"
    beam = read_json(path).get("num_beams") if path.is_file() else None
    return DecodingConfig(beam_size=beam) if type(beam) is int and beam >= 1 else DecodingConfig()


def convert_m2m100(
    hf_dir: str | Path, out_dir: str | Path, *, pair: str | None = None, force: bool = False
) -> Path:
    """Write the model directory ``out_dir`` from the M2M100 or NLLB folder ``hf_dir``.

    Args:
        hf_dir: a local folder (as ``save_pretrained`` or ``huggingface-cli download`` leaves
            it).
        out_dir: the model directory to create.
        pair: ``src-tgt`` for ``data.pair`` (default: tokenizer_config.json's ``src_lang``
            and ``tgt_lang``).
        force: replace an existing ``out_dir``.

    Raises:
        UserError: a folder that is not a convertible M2M100/NLLB model (one line, naming the
            file), or an existing ``out_dir`` without ``force``; nothing is written.
    """
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if not hf_dir.is_dir():
        raise UserError(f"M2M100/NLLB folder not found: {hf_dir}")
    if out_dir.exists() and not force:
        raise UserError(f"{out_dir} already exists; pass --force to replace it")
    cfg = read_m2m100_config(hf_dir)
    family = _family(hf_dir)
    meta = _tokenizer_meta(hf_dir, family, cfg["vocab_size"])
    tensors, weights_path = _read_weights(hf_dir)
    _check_shapes(tensors, _shapes(cfg), weights_path)
    model_cfg = ModelConfig(
        d_model=cfg["d_model"],
        n_heads=cfg["encoder_attention_heads"],
        d_ff=cfg["encoder_ffn_dim"],
        n_encoder_layers=cfg["encoder_layers"],
        n_decoder_layers=cfg["decoder_layers"],
        dropout=float(cfg.get("dropout", 0.1)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0)),
        activation_dropout=float(cfg.get("activation_dropout", 0.0)),
        activation=ACTIVATIONS[cfg.get("activation_function", "relu")],
        norm_first=True,
        positions="sinusoidal",
        position_offset=POSITION_OFFSET,
        max_positions=int(cfg.get("max_position_embeddings", 1024)),
        share_embeddings=True,
        tie_output=True,
        scale_embeddings=bool(cfg.get("scale_embedding", True)),
        final_logits_bias=True,
        start_is_eos=True,  # the decoder starts from the </s> row, as the folder's
    )
    vocab_size = cfg["vocab_size"] + 1
    experiment = ExperimentConfig(
        data=replace(
            ExperimentConfig().data,
            pair=_pair(hf_dir, meta["languages"], pair),
            joint_vocab=False,
            vocab_size=vocab_size,
            max_len=min(ExperimentConfig().data.max_len, model_cfg.max_positions - 1),
        ),
        model=model_cfg,
        decoding=_decoding(hf_dir),
    )
    try:
        experiment.validate()
    except UserError as e:
        raise UserError(f"{hf_dir / 'config.json'}: {e}") from None
    ours = from_m2m100_weights(tensors, cfg, str(weights_path))
    with torch.device("meta"):  # shapes only: each tensor is converted as it is written
        model = build_model(
            model_cfg, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, pad_id=0
        )
    with atomic_dir(out_dir, overwrite=force) as tmp:
        if family == "m2m100":
            shutil.copyfile(hf_dir / M2M100_SPM, tmp / M2M100_SPM)
            shutil.copyfile(hf_dir / "vocab.json", tmp / M2M100_VOCAB)
        else:
            shutil.copyfile(hf_dir / NLLB_TOKENIZER, tmp / NLLB_TOKENIZER)
        with open(tmp / LANGUAGES_FILE, "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
            f.write("\n")
        save_model_dir(tmp, model, experiment, weights=ours)
    return out_dir

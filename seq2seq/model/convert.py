"""Convert a Hugging Face MarianMT (OPUS-MT) folder into a model directory.

``seq2seq convert marian HF_DIR --out MODEL_DIR``. The folder is what transformers'
``save_pretrained`` writes (``config.json``; ``model.safetensors`` or ``pytorch_model.bin``, or
their shards and ``.index.json``; ``source.spm``, ``target.spm``, ``vocab.json``;
``tokenizer_config.json`` and ``generation_config.json`` are read when present). Nothing is
downloaded and transformers is not imported: the conversion reads JSON, SentencePiece and
safetensors (a ``.bin`` file only through ``torch.load(weights_only=True)``, which runs no
pickled code).

The result is an ordinary model directory (:mod:`seq2seq.model.directory`) whose tokenizer is
a :class:`~seq2seq.data.vocab_map.VocabMapTokenizer`; the name, shape and vocabulary mapping
is :mod:`seq2seq.model.marian`. A folder that is not a Marian model, or whose weights disagree
with its config, is a :class:`~seq2seq.core.UserError` of one line, and nothing is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from seq2seq.config import ConfigError, ExperimentConfig, config_from_dict, split_pair
from seq2seq.core import UserError, atomic_dir, printable
from seq2seq.data import (
    SPECIAL_PIECES,
    SRC_MODEL,
    TARGET_VOCAB_FILE,  # Marian's name for the target's map, which a model directory keeps
    TGT_MODEL,
    VOCAB_FILE,
    read_vocab_map,
)
from seq2seq.model.directory import check_finite, check_out_dir, save_model_dir
from seq2seq.model.hf_weights import HFWeights, read_hf_weights, read_json
from seq2seq.model.marian import ACTIVATIONS, from_marian_weights, marian_shapes, our_order
from seq2seq.model.transformer import build_model

__all__ = ["checked_config", "convert_marian", "read_marian_config"]


def read_hf_config(hf_dir: str | Path, model_type: str, takes: str) -> tuple[Path, dict]:
    """A Hugging Face folder's ``config.json`` (its path and content), of ``model_type``.

    Raises:
        UserError: no config.json, or another ``model_type``; ``takes`` says what the
            converter takes instead.
    """
    path = Path(hf_dir) / "config.json"
    if not path.is_file():
        raise UserError(f"{path} not found: {hf_dir} is not a Hugging Face model folder")
    cfg = read_json(path)
    if cfg.get("model_type") != model_type:
        raise UserError(f"{path}: model_type is {cfg.get('model_type')!r}; {takes}")
    return path, cfg


def read_marian_config(hf_dir: str | Path) -> dict:
    """``config.json`` of a Marian folder, checked for what conversion can map.

    Raises:
        UserError: no config.json, another ``model_type``, or an option that has no
            equivalent here (pre-norm, learned positions, ...), naming the key.
    """
    path, cfg = read_hf_config(hf_dir, "marian", "seq2seq converts 'marian' models")
    need = (
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "vocab_size",
        "pad_token_id",
        "eos_token_id",
    )
    for key in need:
        if type(cfg.get(key)) is not int:
            raise UserError(f"{path}: {key} is missing or not an integer")
    pairs = [
        ("decoder_attention_heads", "encoder_attention_heads"),
        ("decoder_ffn_dim", "encoder_ffn_dim"),
        ("decoder_start_token_id", "pad_token_id"),
    ]
    if cfg.get("share_encoder_decoder_embeddings", True):
        pairs.append(("decoder_vocab_size", "vocab_size"))
    elif type(cfg.get("decoder_vocab_size", cfg["vocab_size"])) is not int:
        raise UserError(f"{path}: decoder_vocab_size is not an integer")
    for key, same in pairs:
        if cfg.get(key, cfg[same]) != cfg[same]:
            raise UserError(
                f"{path}: {key} {cfg[key]} differs from {same} {cfg[same]}; seq2seq maps only "
                f"Marian models where they are equal"
            )
    for key in ("normalize_before", "normalize_embedding", "add_final_layer_norm"):
        if cfg.get(key):
            raise UserError(f"{path}: {key} is true; Marian models are post-norm (not supported)")
    if not cfg.get("static_position_embeddings", True):
        raise UserError(f"{path}: static_position_embeddings is false (not supported)")
    activation = cfg.get("activation_function", "swish")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise UserError(
            f"{path}: activation_function {printable(repr(activation))[:80]} is not one of "
            f"{', '.join(ACTIVATIONS)}"
        )
    return cfg


def checked_config(
    values: dict, names: dict[str, tuple[Path, str]], where: Path
) -> ExperimentConfig:
    """A converted model's config, through the toolkit's one validation of a config: each
    value's type as a YAML file's would be checked (:func:`seq2seq.config.config_from_dict`),
    then every section's ranges and bounds (:meth:`ExperimentConfig.validate`: positive sizes,
    heads dividing the width, dropout in [0, 1), sizes and beams below their limits, the pair).
    Every converter builds its config here, before it reads a weight or allocates a tensor.

    Args:
        values: the config as nested dicts (``{"model": {"n_heads": 8}, ...}``), with the
            values as the pretrained model's files give them.
        names: dotted key -> (the file, the key there) each value came from, so that an error
            names what the user can see (``config.json: encoder_attention_heads``).
        where: the file an error about any other key names.

    Raises:
        UserError: one line naming the file and the key, nothing else done.
    """
    try:
        experiment = config_from_dict(values, source=str(where))
        experiment.validate()
    except ConfigError as e:
        if e.key is None or e.text is None:
            raise UserError(f"{where}: {e}") from None
        file, key = names.get(e.key, (where, e.key))
        text = e.text
        for ours in sorted(names, key=len, reverse=True):  # "must divide model.d_model"
            text = text.replace(ours, names[ours][1])
        raise UserError(f"{file}: {key} {text}") from None
    return experiment


def _read_weights(hf_dir: Path) -> tuple[HFWeights, Path]:
    """The folder's tensors (read lazily, :func:`~seq2seq.model.hf_weights.read_hf_weights`)
    and the file that messages name."""
    tensors = read_hf_weights(hf_dir)
    return tensors, tensors.path


def _check_shapes(
    tensors: HFWeights | dict[str, torch.Tensor], expected: dict, weights: Path
) -> None:
    """Compare the folder's tensor shapes (an :class:`HFWeights`' headers: nothing read) with
    the config's."""
    shapes = getattr(tensors, "shapes", None)
    if shapes is None:
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    for name, shape in expected.items():
        if name == "model.shared.weight" and name not in shapes:
            name = "model.encoder.embed_tokens.weight"
        if name == "final_logits_bias" and name not in shapes:
            continue  # absent: zero
        if name not in shapes:
            raise UserError(f"{weights}: weight {name} is missing")
        have = tuple(shapes[name])
        if have != tuple(shape) and not (name == "final_logits_bias" and have == shape[1:]):
            raise UserError(
                f"{weights}: {name} has shape {list(have)}, but config.json says {list(shape)}"
            )


def _pair(hf_dir: Path, pair: str | None) -> str:
    """``--pair`` (checked), else the tokenizer's languages where they make a pair, else
    ``src-tgt``."""
    if pair is not None:
        split_pair(pair, "--pair")
        return pair
    path = hf_dir / "tokenizer_config.json"
    if path.is_file():
        tok = read_json(path)
        found = f"{tok.get('source_lang')}-{tok.get('target_lang')}"
        try:
            split_pair(found)
            return found
        except ConfigError:
            pass
    return "src-tgt"


def _num_beams(hf_dir: Path, cfg: dict) -> tuple[dict, dict]:
    """The model's default beam, as ``decoding`` values and their origin: the generation
    config's ``num_beams`` (else config.json's); none given: the toolkit's default."""
    for path, values in (
        (hf_dir / "generation_config.json", None),
        (hf_dir / "config.json", cfg),
    ):
        if values is None:
            values = read_json(path) if path.is_file() else {}
        if values.get("num_beams") is not None:
            beam = values["num_beams"]
            return {"beam_size": beam}, {"decoding.beam_size": (path, "num_beams")}
    return {}, {}


def _marian_experiment(hf_dir: Path, cfg: dict, pair: str | None) -> ExperimentConfig:
    """The converted model's config from Marian's ``config.json`` (and generation config),
    checked by :func:`checked_config` before anything is read or allocated."""
    path = hf_dir / "config.json"
    mapping = {
        "d_model": ("d_model", None),
        "n_heads": ("encoder_attention_heads", None),
        "d_ff": ("encoder_ffn_dim", None),
        "n_encoder_layers": ("encoder_layers", None),
        "n_decoder_layers": ("decoder_layers", None),
        "dropout": ("dropout", 0.1),
        "attention_dropout": ("attention_dropout", 0.0),
        "activation_dropout": ("activation_dropout", 0.0),
        "max_positions": ("max_position_embeddings", 512),
        "share_embeddings": ("share_encoder_decoder_embeddings", True),
        "tie_output": ("tie_word_embeddings", True),
        "scale_embeddings": ("scale_embedding", False),
    }
    model = {ours: cfg.get(theirs, default) for ours, (theirs, default) in mapping.items()}
    names = {f"model.{ours}": (path, theirs) for ours, (theirs, _) in mapping.items()}
    model.update(
        activation=ACTIVATIONS[cfg.get("activation_function", "swish")],
        norm_first=False,
        positions="sinusoidal_marian",
        final_logits_bias=True,
    )
    decoding, decoding_names = _num_beams(hf_dir, cfg)
    positions = model["max_positions"]
    default_len = ExperimentConfig().data.max_len
    data = {
        "pair": _pair(hf_dir, pair),
        "joint_vocab": False,
        "vocab_size": cfg["vocab_size"],
        # fine-tuning (--init-from) keeps this: training pairs must fit the positions
        "max_len": min(default_len, positions - 1) if type(positions) is int else default_len,
    }
    names["data.vocab_size"] = (path, "vocab_size")
    names["data.pair"] = (path.with_name("tokenizer_config.json"), "source_lang-target_lang")
    return checked_config(
        {"data": data, "model": model, "decoding": decoding},
        {**names, **decoding_names},
        path,
    )


def _separate_vocabs(hf_dir: Path) -> bool:
    """Whether the tokenizer maps the target through a ``target_vocab.json`` of its own."""
    path = hf_dir / "tokenizer_config.json"
    separate = path.is_file() and read_json(path).get("separate_vocabs") is True
    if separate and not (hf_dir / TARGET_VOCAB_FILE).is_file():
        raise UserError(f"{hf_dir / TARGET_VOCAB_FILE} not found: {path} says separate_vocabs")
    return separate


def _vocabulary(
    path: Path, size: tuple[str, int], *, pad: int | None = None, eos: int | None = None
) -> tuple[dict[str, int], list[int]]:
    """Our piece -> id map and :func:`~seq2seq.model.marian.our_order` for one Marian map.

    Args:
        path: the ``vocab.json`` (or ``target_vocab.json``).
        size: the config key that gives its size, and the size.
        pad: the id of the decoder's start (``<pad>``); None: the map's ``<pad>``.
        eos: the id of ``</s>``; None: the map's ``</s>``.
    """
    marian = read_vocab_map(path)
    n = len(marian)
    if n != size[1]:
        raise UserError(f"{path} has {n} pieces, but config.json says {size[0]} {size[1]}")
    pieces = [""] * n
    for piece, i in marian.items():
        pieces[i] = piece
    pad = marian.get("<pad>", -1) if pad is None else pad
    eos = marian.get("</s>", -1) if eos is None else eos
    unk = marian.get("<unk>")
    if unk is None:
        raise UserError(f"{path} has no '<unk>' piece")
    if not (0 <= pad < n and 0 <= eos < n):
        raise UserError(f"{path}: the <pad> id {pad} or the </s> id {eos} is not in it")
    order = our_order(n, pad=pad, unk=unk, eos=eos)
    ours = {SPECIAL_PIECES[i]: i for i in range(4)}
    for our_id, marian_id in enumerate(order[4:], start=4):
        piece = pieces[marian_id]
        if piece in ours:
            raise UserError(f"{path}: piece {piece!r} clashes with seq2seq's special pieces")
        ours[piece] = our_id
    return ours, order


def convert_marian(
    hf_dir: str | Path, out_dir: str | Path, *, pair: str | None = None, force: bool = False
) -> Path:
    """Write the model directory ``out_dir`` from the Marian folder ``hf_dir``.

    Args:
        hf_dir: a local MarianMT folder (as ``save_pretrained`` or ``huggingface-cli download``
            leaves it).
        out_dir: the model directory to create.
        pair: ``src-tgt`` for ``data.pair`` (default: ``tokenizer_config.json``'s languages).
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        UserError: a folder that is not a convertible Marian model (one line, naming the file
            and what is wrong), or an existing ``out_dir`` without ``force``.
    """
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    if not hf_dir.is_dir():
        raise UserError(f"Marian folder not found: {hf_dir}")
    check_out_dir(out_dir, force=force)
    cfg = read_marian_config(hf_dir)
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (hf_dir / name).is_file():
            raise UserError(f"{hf_dir / name} not found: a Marian folder needs its tokenizer files")
    experiment = _marian_experiment(hf_dir, cfg, pair)
    model_cfg = experiment.model
    shared, tied = model_cfg.share_embeddings, model_cfg.tie_output
    separate = _separate_vocabs(hf_dir)
    if shared and separate:
        raise UserError(
            f"{hf_dir / 'config.json'}: share_encoder_decoder_embeddings is true, but the "
            f"tokenizer has separate vocabularies ({TARGET_VOCAB_FILE})"
        )
    n_tgt = cfg.get("decoder_vocab_size") or cfg["vocab_size"]
    pad, eos = cfg["pad_token_id"], cfg["eos_token_id"]
    if shared:
        vocab, order = _vocabulary(
            hf_dir / "vocab.json", ("vocab_size", cfg["vocab_size"]), pad=pad, eos=eos
        )
        tgt_vocab, tgt_order = vocab, None
    else:  # the source's own <pad> and </s>; the decoder starts from the config's pad
        vocab, order = _vocabulary(hf_dir / "vocab.json", ("vocab_size", cfg["vocab_size"]))
        tgt_path = hf_dir / (TARGET_VOCAB_FILE if separate else "vocab.json")
        tgt_vocab, tgt_order = _vocabulary(
            tgt_path, ("decoder_vocab_size", n_tgt), pad=pad, eos=eos
        )
    tensors, weights_path = _read_weights(hf_dir)  # nothing read yet: shapes from headers
    check_finite(tensors, weights_path)
    n_enc, n_dec = cfg["encoder_layers"], cfg["decoder_layers"]
    shapes = marian_shapes(
        vocab_size=cfg["vocab_size"],
        d_model=cfg["d_model"],
        d_ff=cfg["encoder_ffn_dim"],
        n_encoder_layers=n_enc,
        n_decoder_layers=n_dec,
        decoder_vocab_size=None if shared else n_tgt,
        tied=tied,
    )
    _check_shapes(tensors, shapes, weights_path)
    ours = from_marian_weights(
        tensors,
        n_encoder_layers=n_enc,
        n_decoder_layers=n_dec,
        order=order,
        where=str(weights_path),
        tgt_order=tgt_order,
        tied=tied,
    )
    with torch.device("meta"):  # shapes only: each tensor is converted as it is written
        model = build_model(
            model_cfg, src_vocab_size=len(vocab), tgt_vocab_size=len(tgt_vocab), pad_id=0
        )
    with atomic_dir(out_dir, overwrite=force) as tmp:
        shutil.copyfile(hf_dir / "source.spm", tmp / SRC_MODEL)
        shutil.copyfile(hf_dir / "target.spm", tmp / TGT_MODEL)
        for name, pieces in ((VOCAB_FILE, vocab), (TARGET_VOCAB_FILE, tgt_vocab)):
            if name == VOCAB_FILE or pieces != vocab:  # the target's own map, where it differs
                with open(tmp / name, "w", encoding="utf-8") as f:
                    json.dump(pieces, f, ensure_ascii=False, indent=0)
                    f.write("\n")
        save_model_dir(tmp, model, experiment, weights=ours)
    return out_dir

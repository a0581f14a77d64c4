"""Hugging Face export: a model directory as a MarianMT folder, or, for a converted M2M100 /
NLLB-200 model, as an ``M2M100ForConditionalGeneration`` folder.

:func:`export_hf` chooses the family's writer from the model directory: one with a
``languages.json`` (``seq2seq convert m2m100``) is written by :mod:`seq2seq.export.hf_m2m100`;
any other must be Marian-shaped (post-norm, Marian's positions), and is written here.

``seq2seq export MODEL_DIR --format hf --out DIR`` writes what
``transformers.MarianMTModel.from_pretrained`` and ``MarianTokenizer.from_pretrained`` load
(config.json, model.safetensors, generation_config.json, source.spm, target.spm, vocab.json,
target_vocab.json for a model with separate embeddings, tokenizer_config.json), so
``MarianMTModel.generate`` translates with it (and transformers 4's ``pipeline("translation",
model=DIR)``; transformers 5 has no translation pipeline). The weight and vocabulary mapping is
:mod:`seq2seq.model.marian`, the one conversion in uses.

Marian is one architecture, so a model whose shape it cannot express is refused up front,
naming the option (:func:`check_hf_support`). For a converted OPUS-MT model the round trip is
exact. For a model trained here, Marian has no start token: its decoder starts from ``<pad>``,
which takes our ``<s>`` row, and our own ``<pad>`` row is dropped; neither is ever a
training target, so their probabilities are tiny, but the log-probabilities are not exactly
ours (the tests check that the translations are).
Needs the ``hf`` extra (transformers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from seq2seq.core import atomic_dir, atomic_open
from seq2seq.export.format import (
    ExportError,
    bart_family_fields,
    check_out,
    require,
    side_pieces,
    side_spm,
)
from seq2seq.export.hf_m2m100 import export_hf_m2m100, is_m2m100_dir
from seq2seq.model import (
    layout_of,
    load_model_dir,
    marian_order,
    to_marian_weights,
    write_safetensors,
)

__all__ = ["check_hf_support", "export_hf"]


def check_hf_support(cfg_model, where: str) -> None:
    """Raise :class:`~seq2seq.export.format.ExportError` naming the first option MarianMT
    cannot express.

    Args:
        cfg_model: the model section of the config.
        where: what the message names (the config file).
    """
    refusals = [
        (
            cfg_model.norm_first,
            "model.norm_first: true (pre-norm); Marian is post-norm (a pre-norm model exports "
            "to hf as M2M100 only when seq2seq convert m2m100 made it)",
        ),
        (
            cfg_model.positions != "sinusoidal_marian",
            f"model.positions: {cfg_model.positions}; Marian computes sinusoidal_marian positions",
        ),
        (
            cfg_model.decoder_mask != "causal",
            f"model.decoder_mask: {cfg_model.decoder_mask}; Marian's decoder mask is causal",
        ),
        (
            cfg_model.start_is_eos,
            "model.start_is_eos: true; Marian's decoder starts from its own <pad> row",
        ),
    ]
    for refused, what in refusals:
        if refused:
            raise ExportError(f"{where}: MarianMT cannot express {what}")


def _marian_vocab(ours: list[str]) -> dict[str, int]:
    """Marian's piece -> id map for our pieces (in our id order): :func:`marian_order`, with
    Marian's names for the special pieces."""
    pieces = [ours[i] for i in marian_order(len(ours))]
    pieces[0], pieces[1], pieces[-1] = "</s>", "<unk>", "<pad>"
    vocab: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        vocab.setdefault(piece, i)  # a piece twice (never in practice) keeps its first id
    return vocab


def _languages(pair: str) -> tuple[str, str]:
    src, _, tgt = pair.partition("-")
    return src, tgt


def export_hf(model_dir: str | Path, out_dir: str | Path, *, force: bool = False) -> Path:
    """Write ``out_dir``, a MarianMT folder of the model directory ``model_dir`` (an
    ``M2M100ForConditionalGeneration`` folder for a converted M2M100/NLLB model).

    Args:
        model_dir: a seq2seq model directory.
        out_dir: the folder to create.
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        ExportError: an option Marian (or M2M100) cannot express (named), an existing ``out_dir`` without
            ``force``, or no transformers.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if is_m2m100_dir(model_dir):
        return export_hf_m2m100(model_dir, out_dir, force=force)
    check_out(out_dir, force)
    loaded = load_model_dir(model_dir, device="cpu")
    m = loaded.cfg.model
    check_hf_support(m, str(model_dir / "config.yaml"))
    require("transformers")
    from transformers import GenerationConfig, MarianConfig

    src_pieces, tgt_pieces = side_pieces(model_dir, loaded.tokenizer)
    shared = m.share_embeddings
    vocab = _marian_vocab(src_pieces)
    tgt_vocab = vocab if shared else _marian_vocab(tgt_pieces)
    n, n_tgt = len(src_pieces) - 1, len(tgt_pieces) - 1  # our <pad> row is not exported
    pad = n_tgt - 1  # the decoder's start: our <s> row
    if pad >= n:  # MarianMT pads both embeddings with the one pad_token_id
        raise ExportError(
            f"{model_dir / 'config.yaml'}: MarianMT cannot express a target vocabulary "
            f"({n_tgt} pieces) larger than the source's ({n}): its one pad_token_id must fit both"
        )
    d = loaded.cfg.decoding
    config = MarianConfig(
        vocab_size=n,
        decoder_vocab_size=n_tgt,
        **bart_family_fields(m),
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=m.tie_output,
        architectures=["MarianMTModel"],
    )
    generation = GenerationConfig(
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        pad_token_id=pad,
        num_beams=d.beam_size,
        max_length=m.max_positions,
    )
    tensors = to_marian_weights(
        loaded.model.state_dict(),
        n_encoder_layers=m.n_encoder_layers,
        n_decoder_layers=m.n_decoder_layers,
        shared=shared,
        tied=m.tie_output,
    )
    src_lang, tgt_lang = _languages(loaded.cfg.data.pair)
    src_spm, tgt_spm = side_spm(model_dir)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        config.save_pretrained(tmp)
        generation.save_pretrained(tmp)
        with atomic_open(tmp / "model.safetensors", "wb") as f:  # (save_file would leave 0600)
            write_safetensors(f, layout_of(tensors), tensors.__getitem__, {"format": "pt"})
        shutil.copyfile(src_spm, tmp / "source.spm")
        shutil.copyfile(tgt_spm, tmp / "target.spm")
        for name, pieces in (("vocab.json", vocab), ("target_vocab.json", tgt_vocab)):
            if name == "vocab.json" or not shared:
                (tmp / name).write_text(
                    json.dumps(pieces, ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
                )
        tokenizer_config = {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": src_lang,
            "target_lang": tgt_lang,
            "separate_vocabs": not shared,
            "model_max_length": m.max_positions,
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
        }
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8"
        )
    return out_dir

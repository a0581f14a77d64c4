"""Hugging Face export of a converted M2M100 / NLLB-200 model: an
``M2M100ForConditionalGeneration`` folder.

``seq2seq export MODEL_DIR --format hf --out DIR`` for a model directory that
``seq2seq convert m2m100`` wrote (it has a ``languages.json``) writes what
``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load:

- ``config.json`` (``model_type: m2m_100``: pre-norm layers with final layer norms,
  ``scale_embedding``, the sinusoidal table that transformers computes, offset by
  ``pad_token_id + 1``; ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2 as the decoder's start and end,
  one embedding shared by both sides and tied to the output), ``generation_config.json``
  (the model's beam size; the target language is left to ``generate``'s
  ``forced_bos_token_id``, as for the original checkpoints) and ``model.safetensors``
  (:func:`seq2seq.model.m2m100.to_m2m100_weights`, the inverse of the conversion);
- the tokenizer files conversion kept, with a ``tokenizer_config.json`` written from
  ``languages.json``: M2M100 (``M2M100Tokenizer``: ``sentencepiece.bpe.model``,
  ``vocab.json`` and fairseq's ``language_codes`` list) or NLLB (``NllbTokenizer``:
  ``tokenizer.json``, its language codes and ``legacy_behaviour``).

The export checks itself: transformers' model of the folder must give our log-probabilities
on a probe sentence (:mod:`seq2seq.export.probe`). ``seq2seq convert m2m100`` reads the folder
back into identical weights. A model fine-tuned from a converted one (``train --init-from``)
exports as exactly: conversion sets ``model.start_is_eos``, so its decoder starts from the
``</s>`` row, the one row M2M100 has for the start and the end. Needs the ``hf`` extra
(transformers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from seq2seq.core import atomic_dir, atomic_open
from seq2seq.data import (
    LANGUAGES_FILE,
    M2M100_SPM,
    M2M100_VOCAB,
    NLLB_TOKENIZER,
    our_id,
    read_languages,
    read_vocab_map,
)
from seq2seq.export.format import (
    HF_ACTIVATIONS,
    ExportError,
    bart_family_fields,
    check_out,
    require,
)
from seq2seq.export.probe import check_reproduced, probe_ids
from seq2seq.model import (
    M2M100_CODES,
    POSITION_OFFSET,
    layout_of,
    load_model_dir,
    to_m2m100_weights,
    write_safetensors,
)

__all__ = ["check_m2m100_support", "export_hf_m2m100", "is_m2m100_dir"]

_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "pad_token": "<pad>"}


def is_m2m100_dir(model_dir: Path) -> bool:
    """A model directory of ``seq2seq convert m2m100`` (or trained from one)."""
    return (Path(model_dir) / LANGUAGES_FILE).is_file()


def check_m2m100_support(cfg_model, where: str) -> None:
    """Raise :class:`~seq2seq.export.format.ExportError` naming the first option
    ``M2M100ForConditionalGeneration`` cannot express.

    Args:
        cfg_model: the model section of the config.
        where: what the message names (the config file).
    """
    refusals = [
        (not cfg_model.norm_first, "model.norm_first: false (post-norm); M2M100 is pre-norm"),
        (
            cfg_model.positions != "sinusoidal" or cfg_model.position_offset != POSITION_OFFSET,
            f"model.positions: {cfg_model.positions} from row {cfg_model.position_offset}; "
            f"M2M100 computes sinusoidal positions from row {POSITION_OFFSET}",
        ),
        (
            not (cfg_model.share_embeddings and cfg_model.tie_output),
            "separate or untied embeddings; M2M100 has one, tied to the output",
        ),
        (
            cfg_model.decoder_mask != "causal",
            f"model.decoder_mask: {cfg_model.decoder_mask}; M2M100's decoder mask is causal",
        ),
        (
            cfg_model.activation not in HF_ACTIVATIONS,
            f"model.activation: {cfg_model.activation}",
        ),
    ]
    for refused, what in refusals:
        if refused:
            raise ExportError(f"{where}: M2M100ForConditionalGeneration cannot express {what}")


def _tokenizer_config(meta: dict, vocab_size: int, pair: str, max_len: int, where: Path) -> dict:
    """``tokenizer_config.json`` of the family's tokenizer, from ``languages.json``."""
    languages = meta["languages"]
    codes = sorted(languages, key=languages.__getitem__)
    src, _, tgt = pair.partition("-")
    config: dict = {**_SPECIALS, "unk_token": "<unk>", "model_max_length": max_len}
    if src in languages and tgt in languages:
        config |= {"src_lang": src, "tgt_lang": tgt}
    if meta["family"] == "nllb":
        return config | {
            "tokenizer_class": "NllbTokenizer",
            "cls_token": "<s>",
            "mask_token": "<mask>",
            "legacy_behaviour": bool(meta.get("legacy_behaviour", False)),
            "additional_special_tokens": codes,
        }
    name = next(
        (
            n
            for n, listed in M2M100_CODES.items()
            if languages == {c: vocab_size + i for i, c in enumerate(listed)}
        ),
        None,
    )
    if name is None:
        raise ExportError(
            f"{where}: M2M100Tokenizer numbers its languages from fairseq's m2m100 or wmt21 "
            "list after vocab.json; this model's languages are neither"
        )
    madeup = meta["rows"] - vocab_size - len(codes)
    return config | {
        "tokenizer_class": "M2M100Tokenizer",
        "language_codes": name,
        "num_madeup_words": max(madeup, 0),
    }


def export_hf_m2m100(model_dir: Path, out_dir: Path, *, force: bool = False) -> Path:
    """Write ``out_dir``, an ``M2M100ForConditionalGeneration`` folder of the converted
    M2M100/NLLB model directory ``model_dir``.

    Args:
        model_dir: a model directory with a ``languages.json``.
        out_dir: the folder to create.
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        ExportError: an option or weights M2M100 cannot express (named), languages that its
            tokenizer cannot number, an existing ``out_dir`` without ``force``, or no
            transformers; nothing is written at ``out_dir``.
    """
    check_out(out_dir, force)
    loaded = load_model_dir(model_dir, device="cpu")
    m = loaded.cfg.model
    check_m2m100_support(m, str(model_dir / "config.yaml"))
    meta = read_languages(model_dir)
    nllb = meta["family"] == "nllb"
    vocab_size = 0 if nllb else len(read_vocab_map(model_dir / M2M100_VOCAB))
    tok_config = _tokenizer_config(
        meta, vocab_size, loaded.cfg.data.pair, m.max_positions, model_dir / LANGUAGES_FILE
    )
    require("transformers")
    from transformers import GenerationConfig, M2M100Config

    tensors = to_m2m100_weights(
        loaded.model.state_dict(),
        n_encoder_layers=m.n_encoder_layers,
        n_decoder_layers=m.n_decoder_layers,
        where=str(model_dir / "model.safetensors"),
        start_is_eos=m.start_is_eos,
    )
    rows = tensors["model.shared.weight"].size(0)
    if rows != meta["rows"]:
        raise ExportError(
            f"{model_dir / LANGUAGES_FILE}: rows {meta['rows']}, but the weights have {rows}"
        )
    beams = loaded.cfg.decoding.beam_size
    ids = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
    config = M2M100Config(
        vocab_size=rows,
        **bart_family_fields(m),
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        tie_word_embeddings=True,
        architectures=["M2M100ForConditionalGeneration"],
        **ids,
    )
    generation = GenerationConfig(num_beams=beams, max_length=m.max_positions, **ids)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        config.save_pretrained(tmp)
        generation.save_pretrained(tmp)
        with atomic_open(tmp / "model.safetensors", "wb") as f:  # one tensor at a time
            write_safetensors(f, layout_of(tensors), tensors.__getitem__, {"format": "pt"})
        if nllb:
            shutil.copyfile(model_dir / NLLB_TOKENIZER, tmp / NLLB_TOKENIZER)
        else:
            shutil.copyfile(model_dir / M2M100_SPM, tmp / M2M100_SPM)
            shutil.copyfile(model_dir / M2M100_VOCAB, tmp / "vocab.json")
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(tok_config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
        del tensors
        _check_hf_probe(tmp, loaded.model)
    return out_dir


def _check_hf_probe(folder: Path, model) -> None:
    """transformers' model of ``folder`` must give our log-probabilities on a probe sentence
    (teacher-forced, in the folder's ids), or the export fails."""
    import torch
    from transformers import M2M100ForConditionalGeneration
    from transformers.utils import logging as hf_logging

    rows = model.tgt_vocab_size - 1
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # (its "Loading weights" bar is not the export's)
    try:
        theirs_model = M2M100ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    src, tgt = probe_ids(model)
    folder_id = {our_id(i, rows): i for i in range(rows)}  # ours -> the folder's
    with torch.no_grad():
        ours = model(torch.tensor([[*src, 3]]), torch.tensor([[2, *tgt]])).log_softmax(-1)
        theirs = theirs_model.eval()(
            input_ids=torch.tensor([[folder_id[i] for i in src] + [2]]),
            decoder_input_ids=torch.tensor([[2] + [folder_id[i] for i in tgt]]),
        ).logits.log_softmax(-1)
    index = torch.tensor([our_id(i, rows) for i in range(rows)])
    diff = float((ours.index_select(-1, index) - theirs).abs().max())
    check_reproduced(diff, "Hugging Face")

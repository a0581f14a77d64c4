"""``seq2seq convert marian``: a Hugging Face MarianMT (OPUS-MT) folder as a model directory."""

from __future__ import annotations

import sys

from seq2seq.cli.arguments import add_command
from seq2seq.core import check_paths

__all__ = ["add_convert"]


def add_convert(sub) -> None:
    """Add ``seq2seq convert``."""
    p = add_command(
        sub,
        "convert",
        "Convert a pretrained model into a seq2seq model directory.\n\n"
        "`convert marian HF_DIR` reads a local MarianMT folder (OPUS-MT, as transformers'\n"
        "save_pretrained or `huggingface-cli download` leaves it: config.json, model.safetensors\n"
        "or pytorch_model.bin (or their shards), source.spm, target.spm, vocab.json, and\n"
        "target_vocab.json with separate vocabularies) and writes a model directory that\n"
        "translate, score, evaluate, serve, export and train --init-from use like any other.\n"
        "`convert m2m100 HF_DIR` reads a local M2M100 or NLLB-200 folder (config.json, the\n"
        "weights, and vocab.json + sentencepiece.bpe.model for M2M100 or tokenizer.json for\n"
        "NLLB); translate it with --source-lang/--target-lang (en, de, eng_Latn, ...).\n"
        "Nothing is downloaded; a folder that is not a convertible model of the kind is refused\n"
        "and nothing is written at --out.",
        "seq2seq convert marian opus-mt-en-de --out runs/opus_en_de\n"
        "seq2seq convert m2m100 nllb-200-distilled-600M --out runs/nllb600m\n"
        "seq2seq translate runs/opus_en_de -i test.en --beam 4",
    )
    p.add_argument(
        "kind",
        choices=["marian", "m2m100"],
        help="the kind of model (marian: OPUS-MT; m2m100: M2M100 and NLLB-200)",
    )
    p.add_argument("hf_dir", metavar="HF_DIR", help="the local Hugging Face model folder")
    p.add_argument("--out", required=True, metavar="MODEL_DIR", help="the directory to create")
    p.add_argument(
        "--pair",
        metavar="SRC-TGT",
        help="language pair for data.pair (default: tokenizer_config.json's languages)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")
    p.set_defaults(run=_run_convert)


def _run_convert(args) -> int:
    from seq2seq.model import convert_m2m100, convert_marian

    check_paths(input_dirs=[("HF_DIR", args.hf_dir)], replaced_dirs=[("--out", args.out)])
    convert = convert_m2m100 if args.kind == "m2m100" else convert_marian
    out = convert(args.hf_dir, args.out, pair=args.pair, force=args.force)
    print(f"converted {args.hf_dir} -> {out}", file=sys.stderr)
    return 0

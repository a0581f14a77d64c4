"""``seq2seq export``: a model directory as a CTranslate2 or ONNX folder."""

from __future__ import annotations

import sys

from seq2seq.cli.arguments import add_command
from seq2seq.core import check_paths

__all__ = ["add_export"]


def add_export(sub) -> None:
    """Add ``seq2seq export``."""
    p = add_command(
        sub,
        "export",
        "Export a model directory for fast inference (CTranslate2, ONNX) or for transformers\n"
        "(hf: a MarianMT folder that transformers' MarianMTModel and MarianTokenizer load; the model\n"
        "must be Marian-shaped: post-norm, sinusoidal_marian positions, shared embeddings; a model\n"
        "converted with `convert m2m100` is written as an M2M100ForConditionalGeneration folder).\n\n"
        "The output folder is self-contained (weights, SentencePiece model(s), config.yaml,\n"
        "export.json, a README.md on loading it without seq2seq) and is what\n"
        "`seq2seq translate --engine ctranslate2|onnx OUT` reads. CTranslate2 cannot express\n"
        "block-causal or sliding-window decoder masks (export those to ONNX). A failed export\n"
        "leaves no OUT folder; an existing OUT is an error unless --force.",
        "seq2seq export runs/multi30k_small --format ctranslate2 --out runs/m30k_ct2\n"
        "seq2seq export runs/multi30k_small --format ctranslate2 --quantization int8 "
        "--out runs/m30k_ct2_int8\n"
        "seq2seq export runs/multi30k_small --format onnx --out runs/m30k_onnx\n"
        "seq2seq export runs/opus_en_de --format hf --out runs/opus_en_de_hf\n"
        "seq2seq translate --engine ctranslate2 runs/m30k_ct2 -i test.en --beam 5",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="model directory (seq2seq train --out)")
    p.add_argument(
        "--format",
        choices=["ctranslate2", "onnx", "hf"],
        help="export format (default: the model's export.format)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to create")
    p.add_argument(
        "--quantization",
        choices=["none", "int8", "int8_float32", "float16"],
        help="CTranslate2 weight type (default: the model's export.quantization)",
    )
    p.add_argument("--opset", type=int, help="ONNX opset (default: the model's export.opset)")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder")
    p.set_defaults(run=_run_export)


def _run_export(args) -> int:
    from seq2seq.export import describe, export_model

    check_paths(
        input_dirs=[("model directory", args.model_dir)], replaced_dirs=[("--out", args.out)]
    )
    out = export_model(
        args.model_dir,
        args.out,
        fmt=args.format,
        quantization=args.quantization,
        opset=args.opset or None,  # 0, like unset: the model's
        force=args.force,
    )
    print(describe(out), file=sys.stderr)
    return 0

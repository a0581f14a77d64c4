"""Parity of the exported engines with the torch engine, on a real test set.

Exports MODEL_DIR to CTranslate2 (float32 and the requested quantizations) and ONNX, then per
engine: greedy search over the test set (the share of sentences whose output is token for
token the torch engine's) and beam search (BLEU with sacreBLEU). Prints one table row per
engine.

Targets (issue 8): float32 exports give identical greedy output and beam-5 BLEU within 0.1
of torch; int8 within 0.5 BLEU. Speed is benchmarks/decode_speed.py's job: it times every
engine in a fresh process (in one process the engines' thread pools, torch's OpenMP and
CTranslate2's, slow each other down).

Usage (Multi30K test_2016_flickr through the offline mirror):

    python benchmarks/export_parity.py runs/multi30k_small --corpus multi30k --pair en-de \\
        --split test_2016_flickr --mirror $SEQ2SEQ_MIRROR --threads 2
    python benchmarks/export_parity.py runs/m --src test.en --ref test.de --engines torch,onnx
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needs  # noqa: E402  this folder: one line and exit 2 for a missing model or mirror

from seq2seq.config.loading import load_config  # noqa: E402
from seq2seq.decode.options import SearchOptions  # noqa: E402
from seq2seq.decode.translator import Translator  # noqa: E402
from seq2seq.evaluate.evaluation import read_test_pair, resolve_test_set  # noqa: E402
from seq2seq.evaluate.metrics import score_corpus  # noqa: E402
from seq2seq.export.ctranslate2 import export_ctranslate2  # noqa: E402
from seq2seq.export.onnx import export_onnx  # noqa: E402

ENGINES = ("torch", "ctranslate2", "ctranslate2-int8", "onnx")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_test_set_args(p)
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated: torch, torch-int8, torch-bf16, ctranslate2, ctranslate2-QUANT "
        f"(int8, int8_float32, float16), onnx (default: {','.join(ENGINES)})",
    )
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every engine (2)")
    p.add_argument("--beam", type=int, default=5, help="beam size of the BLEU run (5)")
    p.add_argument("--limit", type=int, default=0, help="use the first N sentences (0: all)")
    p.add_argument("--export-dir", type=Path, help="keep the exports here (default: a temp dir)")
    p.add_argument("--tokenized-lc", action="store_true", help="BLEU with tokenize=none, lowercase")
    return p.parse_args(argv)


def add_test_set_args(p: argparse.ArgumentParser) -> None:
    """The model directory and the test-set options :func:`load_test_set` reads."""
    p.add_argument("model_dir", type=Path, help="a trained model directory")
    p.add_argument("--corpus", help="corpus (default: the model's data.corpus)")
    p.add_argument("--pair", help="language pair (default: the model's data.pair)")
    p.add_argument("--split", default="test_2016_flickr", help="test split (test_2016_flickr)")
    p.add_argument("--variant", help="corpus variant (default: the model's data.variant)")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"), help="offline mirror")
    p.add_argument("--cache-dir", help="corpus download cache")
    p.add_argument("--src", type=Path, help="source file (instead of a corpus split)")
    p.add_argument("--ref", type=Path, help="reference file, aligned with --src")


def load_test_set(args: argparse.Namespace, work_dir: Path) -> tuple[list[str], list[str], str]:
    needs.model_dir(args.model_dir)
    if args.src is not None or args.ref is not None:
        if args.src is None or args.ref is None:
            raise needs.UserError("--src and --ref go together")
        src, ref = read_test_pair(args.src, args.ref)
        return src, ref, args.src.name
    cfg = load_config(args.model_dir / "config.yaml")
    src_path, ref_path, name = resolve_test_set(
        cfg,
        corpus=args.corpus,
        pair=args.pair,
        split=args.split,
        variant=args.variant,
        mirror=args.mirror,
        cache_dir=args.cache_dir,
        work_dir=work_dir / "data",
    )
    src, ref = read_test_pair(src_path, ref_path)
    return src, ref, name


def export_for(engine: str, model_dir: Path, export_dir: Path) -> tuple[Path, str, str]:
    """(folder, runtime engine name, quantization) for a benchmark engine name."""
    if engine == "torch":
        return model_dir, "torch", "float32"
    if engine in ("torch-int8", "torch-bf16"):  # the torch engine's other precisions
        return model_dir, engine, engine.partition("-")[2]
    if engine == "onnx":
        out = export_dir / "onnx"
        if not out.exists():
            export_onnx(model_dir, out)
        return out, "onnx", "float32"
    if engine.startswith("ctranslate2"):
        quant = engine.partition("-")[2] or "none"
        out = export_dir / f"ct2-{quant}"
        if not out.exists():
            export_ctranslate2(model_dir, out, quantization=quant)
        return out, "ctranslate2", "float32" if quant == "none" else quant
    raise needs.UserError(
        f"unknown engine {engine!r}; expected {', '.join(ENGINES)} or ctranslate2-QUANT"
    )


def search_tokens(translator: Translator, src_ids: list[list[int]], opts: SearchOptions) -> list:
    """Best hypothesis' token ids per sentence ([] for an empty source)."""
    out: list[list[int]] = [[] for _ in src_ids]
    todo = [i for i, s in enumerate(src_ids) if s]
    from seq2seq.decode.batching import batch_by_tokens

    for batch in batch_by_tokens([len(src_ids[i]) for i in todo], opts.max_tokens):
        idx = [todo[j] for j in batch]
        for i, hyps in zip(idx, translator.engine.translate_ids([src_ids[i] for i in idx], opts)):
            out[i] = hyps[0].tokens if hyps else []
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # the engines take their thread count from torch
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if "torch" not in engines:
        engines.insert(0, "torch")  # the reference
    with tempfile.TemporaryDirectory(prefix="seq2seq-parity-") as tmp:
        export_dir = args.export_dir or Path(tmp)
        export_dir.mkdir(parents=True, exist_ok=True)
        src, ref, name = load_test_set(args, Path(tmp))
        if args.limit:
            src, ref = src[: args.limit], ref[: args.limit]
        greedy = SearchOptions(method="greedy")
        beam = SearchOptions(method="beam", beam_size=args.beam)
        print(f"{name}: {len(src)} sentences, {args.threads} threads, beam {args.beam}", flush=True)

        rows, ref_tokens, ref_bleu = [], None, None
        for engine in engines:
            folder, runtime, quant = export_for(engine, args.model_dir, export_dir)
            translator = Translator.load(folder, engine=runtime)
            src_ids = translator.encode(src)
            tokens = search_tokens(
                translator, src_ids, greedy.replace(max_tokens=translator.opts.max_tokens)
            )
            if ref_tokens is None:
                ref_tokens = tokens
            identical = 100.0 * sum(a == b for a, b in zip(tokens, ref_tokens)) / len(src)
            opts = beam.replace(max_tokens=translator.opts.max_tokens)
            hyps = translator.translate(src, **_fields(opts))
            kw = dict(tokenize="none", lowercase=True) if args.tokenized_lc else {}
            bleu = score_corpus(hyps, ref, **kw)["bleu"]
            if ref_bleu is None:
                ref_bleu = bleu
            rows.append((engine, quant, identical, bleu, bleu - ref_bleu))
            print(f"  {engine}: done", file=sys.stderr, flush=True)

    header = (
        "engine",
        "quant",
        "greedy identical %",
        f"beam-{args.beam} BLEU",
        "ΔBLEU",
    )
    table = [header] + [(e, q, f"{i:.1f}", f"{b:.2f}", f"{d:+.2f}") for e, q, i, b, d in rows]
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    for n, row in enumerate(table):
        print(
            "  ".join(
                cell.rjust(w) if c >= 2 else cell.ljust(w)
                for c, (cell, w) in enumerate(zip(row, widths))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        "targets: float32 greedy identical 100%, |ΔBLEU| <= 0.1; int8 |ΔBLEU| <= 0.5 "
        "(speed: benchmarks/decode_speed.py)"
    )
    return 0


def _fields(opts: SearchOptions) -> dict:
    import dataclasses

    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if f.name != "nbest"}


if __name__ == "__main__":
    needs.run(main)

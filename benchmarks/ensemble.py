"""Ensembles: each model alone and all of them together, BLEU and speed on one test set.

For each row (every MODEL_DIR alone, then the ensemble of all of them) the test set is
translated with the same search (default: beam 5 from the first model's config) in this
process, after one warm-up batch, and scored with sacreBLEU. Prints a Markdown table:
BLEU, chrF, sentences per second and wall seconds. The ensemble's decoding step runs every
member's step, so its time is about the sum of the members'.

Usage (two seeds of the Multi30K demo model; the second trained with the first one's
SentencePiece model so that they share the vocabulary, e.g.
``seq2seq train ... --out runs/seed2 training.seed=2 data.spm_model=runs/demo/averaged``):

    python benchmarks/ensemble.py runs/demo/averaged runs/seed2 --mirror $SEQ2SEQ_MIRROR \\
        --threads 2
    python benchmarks/ensemble.py A B --src test.en --ref test.de --limit 100   # quick look
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needs  # noqa: E402  this folder: one line and exit 2 for a missing model or mirror

from seq2seq.config.loading import load_config  # noqa: E402
from seq2seq.decode.translator import Translator  # noqa: E402
from seq2seq.evaluate.evaluation import read_test_pair, resolve_test_set  # noqa: E402
from seq2seq.evaluate.metrics import score_corpus  # noqa: E402


def measure(translator: Translator, src: list[str], ref: list[str]) -> dict:
    translator.translate(src[:8])  # warm-up: allocator, thread pools
    start = time.perf_counter()
    hyps = translator.translate(src)
    seconds = time.perf_counter() - start
    scores = score_corpus(hyps, ref)
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "sent_s": len(src) / seconds,
        "seconds": seconds,
        "signature": scores["bleu_signature"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR", help="two or more model dirs")
    p.add_argument("--corpus", help="default: the first model's data.corpus")
    p.add_argument("--pair", help="default: the first model's data.pair")
    p.add_argument("--split", help="default: the first model's data.test_splits[0]")
    p.add_argument("--mirror", help="offline corpus mirror (root or corpus folder)")
    p.add_argument("--src", help="source file (instead of a corpus split)")
    p.add_argument("--ref", help="reference file")
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0: all)")
    p.add_argument("--beam", type=int, help="beam size (default: the first model's)")
    p.add_argument("--threads", type=int, help="torch threads")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    if len(args.model_dirs) < 2:
        p.error("give at least two model directories")
    for model_dir in args.model_dirs:
        needs.model_dir(model_dir)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(Path(args.model_dirs[0]) / "config.yaml")
    with tempfile.TemporaryDirectory(prefix="seq2seq-ensemble-") as tmp:
        if args.src and args.ref:
            src_path, ref_path = Path(args.src), Path(args.ref)
        else:
            src_path, ref_path, _ = resolve_test_set(
                cfg,
                corpus=args.corpus,
                pair=args.pair,
                split=args.split,
                variant=None,
                mirror=args.mirror,
                cache_dir=None,
                work_dir=Path(tmp),
            )
        src, ref = read_test_pair(src_path, ref_path)
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    overrides = {"method": "beam", "beam_size": args.beam} if args.beam else {}
    rows = [(str(d), [d]) for d in args.model_dirs]
    rows.append(("ensemble of all", list(args.model_dirs)))
    print(f"{len(src)} sentences of {src_path}, {torch.get_num_threads()} threads, {args.device}")
    print("| models | BLEU | chrF | sentences/s | seconds |")
    print("|---|---|---|---|---|")
    signature = None
    for name, dirs in rows:
        translator = Translator.load(dirs, device=args.device, **overrides)
        r = measure(translator, src, ref)
        signature = r["signature"]
        print(
            f"| {name} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['sent_s']:.1f} | "
            f"{r['seconds']:.1f} |",
            flush=True,
        )
    print(f"search: {translator.opts.method}, beam {translator.opts.beam_size}; {signature}")
    return 0


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""`make bench`: the benchmarks of docs/benchmarks.md, one after the other, as tables.

Needs the Multi30K corpus (``SEQ2SEQ_MIRROR`` offline). The benchmarks of a trained model need
a model directory: ``--model`` (default ``BENCH_MODEL``, else runs/demo/averaged, which
``make demo`` writes); without one they are skipped with a note. Each benchmark runs in its own
process with its default options; ``--only`` picks some. Not run here: ensemble.py (two
models), finetune.py (trains a new run), val_curves.py (draws logged runs) and mbr.py (a
quality experiment on a model's own validation and test files).

    python benchmarks/run_all.py                          # all of them (about an hour on 2 cores)
    python benchmarks/run_all.py --only decode_speed,export_parity --model runs/fast/averaged
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parent / "configs"

# name -> (needs a model directory, extra arguments)
BENCHMARKS = {
    "train_throughput": (False, []),
    "attention_paths": (False, []),
    "fused_loss": (False, []),
    "profile_train": (False, ["--rdrop"]),
    "precision_probe": (
        False,
        [str(CONFIGS / "multi30k_quick.yaml"), str(CONFIGS / "multi30k_fast.yaml")],
    ),
    "prepare_scale": (False, []),
    "decode_speed": (True, []),
    "export_parity": (True, []),
    "profile_step": (True, []),
    "constrained": (True, []),
    "termbase": (False, []),
    "glossary": (False, []),
    "engine_thread": (True, []),
    "serve_load": (True, []),
    "serve_overhead": (False, []),
    "serve_stall": (True, []),
    "document_speed": (False, []),
}


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default=os.environ.get("BENCH_MODEL", "runs/demo/averaged"),
                   help="model directory for the decoding benchmarks (runs/demo/averaged)")  # fmt: skip
    p.add_argument("--only", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else BENCHMARKS
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        p.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    have_model = (Path(args.model) / "manifest.json").is_file()
    failed = {}
    for name in names:
        needs_model, extra = BENCHMARKS[name]
        if needs_model and not have_model:
            print(f"\n== {name}: skipped (no model directory at {args.model}: run `make demo` "
                  "or give --model DIR)", flush=True)  # fmt: skip
            continue
        print(f"\n== {name}", flush=True)
        cmd = [sys.executable, str(HERE / f"{name}.py"), *([args.model] if needs_model else [])]
        status = subprocess.call(cmd + extra)
        if status:
            failed[name] = status
    if failed:
        listed = ", ".join(f"{n} (exit {s})" for n, s in failed.items())
        print(f"\nfailed: {listed}", file=sys.stderr)
        return 2 if 2 in failed.values() else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Continued training (``seq2seq train --init-from``): test BLEU before and after.

Evaluates PARENT on its test split, fine-tunes it for ``--steps`` updates at ``--lr``
(constant schedule after ``--warmup`` updates, a fresh optimizer, the parent's own data unless
``--set data.*=...`` points elsewhere), averages the last checkpoints of the second half
(training.average_last) and evaluates the new model the same way. Prints a Markdown table.
Same search for both (the parent's decoding section, beam 5 in the demo). The training runs
in this process; ``--out`` must not hold a run yet.

Usage (the ``make demo`` model, continued 300 updates at lr 1e-4):

    SEQ2SEQ_MIRROR=$SEQ2SEQ_MIRROR python benchmarks/finetune.py runs/demo/averaged \\
        --out runs/demo_ft --steps 300 --lr 1e-4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needs  # noqa: E402  this folder: one line and exit 2 for a missing model or mirror

from seq2seq.evaluate.evaluation import evaluate  # noqa: E402
from seq2seq.train.run_config import resolve_config  # noqa: E402
from seq2seq.train.trainer import train  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("parent", metavar="PARENT", help="the model directory to continue")
    p.add_argument("--out", required=True, help="the new run's directory")
    p.add_argument("--steps", type=int, default=300, help="updates (default: 300)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate (default: 1e-4)")
    p.add_argument("--warmup", type=int, default=50, help="warmup updates (default: 50)")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides"
    )
    p.add_argument("--src", help="test source file (default: the parent's test split)")
    p.add_argument("--ref", help="test reference file")
    p.add_argument("--device", default="cpu", help="evaluation device")
    args = p.parse_args(argv)

    needs.model_dir(args.parent)
    third = max(args.steps // 3, 1)
    overrides = [
        f"training.lr={args.lr}",
        "training.schedule=constant",
        f"training.warmup_steps={args.warmup}",
        f"training.max_steps={args.steps}",
        f"training.val_every_steps={third}",
        "training.keep_last=3",
        "training.average_last=3",
        *args.set,
    ]
    test = dict(src=args.src, ref=args.ref, mirror=args.mirror, device=args.device)
    before = evaluate(args.parent, out_dir=Path(args.out) / "eval-parent", **test)
    cfg = resolve_config(args.out, resume=False, overrides=overrides, init_from=args.parent)
    train(cfg, args.out, mirror=args.mirror)
    after = evaluate(args.out, **test)
    print(f"fine-tuning {args.parent} -> {args.out}: {args.steps} updates, lr {args.lr}")
    print("| model | BLEU | chrF | test set |")
    print("|---|---|---|---|")
    for name, r in ((args.parent, before), (args.out, after)):
        s = r["scores"]
        print(f"| {name} | {s['bleu']:.2f} | {s['chrf']:.2f} | {r['src']} |")
    print(before["scores"]["bleu_signature"])
    return 0


if __name__ == "__main__":
    needs.run(main)

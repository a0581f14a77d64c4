#!/usr/bin/env python
"""The fused projection + loss (``seq2seq/model/loss.py``) alone, forward and backward.

Times ``projected_label_smoothed_nll`` (one pass) and ``projected_rdrop_loss`` (two) on random
decoder states of the Tiny shape's size (3,600 target tokens, d_model 128, 8,000 pieces),
float32, with freed memory kept in the process as training does. ``--against DIR`` also times
the loss.py of another checkout (a ``git worktree`` of an earlier commit, say), the two taking
turns on every call in one process, so that a noisy machine's slow stretches fall on both.

    python benchmarks/fused_loss.py
    git worktree add ../before HEAD~1 && python benchmarks/fused_loss.py --against ../before
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import needs  # this folder: one line and exit 2 for a user mistake
from turns import in_turns


def _load(checkout: Path):
    path = checkout / "seq2seq" / "model" / "loss.py"
    if not path.is_file():
        raise needs.UserError(f"--against: no {path}")
    spec = importlib.util.spec_from_file_location("loss_against", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["loss_against"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=3600)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--calls", type=int, default=30, help="timed calls per way and loss")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--against", type=Path, help="a checkout whose loss.py to time as well")
    args = p.parse_args()

    import torch

    from seq2seq.core import keep_freed_memory
    from seq2seq.model import loss

    ways = {"this checkout": loss}
    if args.against:
        ways = {f"{args.against}": _load(args.against), **ways}
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    torch.manual_seed(0)
    n, d, v = args.tokens, args.d_model, args.vocab
    weight = (torch.randn(v, d) * 0.05).requires_grad_(True)
    h1, h2 = (torch.randn(n, d).requires_grad_(True) for _ in range(2))
    target = torch.randint(4, v, (n,))

    def call(module, kind: str) -> None:
        if kind == "R-Drop":
            out = module.projected_rdrop_loss(h1, h2, weight, target, epsilon=0.1, alpha=0.5)
        else:
            out = module.projected_label_smoothed_nll(h1, weight, target, epsilon=0.1)
        out.loss.backward()

    print(f"\nFused projection + loss, forward + backward, {n} tokens, d {d}, {v} pieces, "
          f"float32, {args.threads} threads, {args.calls} calls each (median)")  # fmt: skip
    print(f"{'loss':<10}{'code':<34}{'ms':>9}{'vs first':>10}")
    for kind in ("one pass", "R-Drop"):
        times = in_turns(
            list(ways), args.calls, args.warmup, lambda way, _i, kind=kind: call(ways[way], kind)
        )
        base = statistics.median(next(iter(times.values())))
        for way, ts in times.items():
            med = statistics.median(ts)
            print(f"{kind:<10}{way[-33:]:<34}{med * 1000:>9.1f}{med / base:>9.2f}x")
    return 0


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""What ``training.precision: auto`` would choose for each config on this machine, and why.

Runs the probe ``seq2seq train`` runs (seq2seq.train.precision.bf16_speedup over the config's own
training-step forward, seq2seq.train.trainer._probe_forward) ``--rounds`` times per config and prints
the measured bf16-mixed / float32 speed of the step, the choice and the probe's own time.
Compare the ratio with benchmarks/train_throughput.py's bf16 / fp32 column for the same shape.

    python benchmarks/precision_probe.py configs/multi30k_quick.yaml configs/multi30k_fast.yaml
"""

from __future__ import annotations

import argparse
import statistics
import time

import needs  # this folder: one line and exit 2 for a user mistake
import torch

from seq2seq.config.loading import load_config
from seq2seq.train.precision import bf16_speedup, resolve_precision
from seq2seq.train.trainer import _probe_forward


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("configs", nargs="+", help="YAML configs")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="probes per config (median)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    configs = {path: load_config(path) for path in args.configs}  # a typo stops before probing
    print(f"{'config':<34}{'bf16 / fp32':>13}{'range':>14}{'probe s':>9}  auto picks")
    for path, cfg in configs.items():
        forward = _probe_forward(cfg)
        ratios, seconds = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            ratios.append(bf16_speedup(forward))
            seconds.append(time.perf_counter() - t0)
        ratio = statistics.median(ratios)
        choice = resolve_precision(
            "auto", accelerator="cpu", forward=forward, speedup=lambda _f, r=ratio: r
        )
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{path:<34}{ratio:>12.2f}x{spread:>14}{statistics.median(seconds):>9.1f}  "
              f"{choice.precision} ({choice.reason})")  # fmt: skip


if __name__ == "__main__":
    needs.run(main)

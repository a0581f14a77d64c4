#!/usr/bin/env python
"""Validation BLEU against wall-clock minutes of training, for runs compared side by side.

Reads each run's CSV logs (``DIR/logs/csv/version_*/metrics.csv``, every launch of a resumed
run), where each validation logged ``val/bleu`` and ``val/wall_min`` (minutes of training
since the run began, validation included, summed over launches), and draws one line per run.

    python benchmarks/val_curves.py --run fast=runs/fast/model --run base=runs/base/model \\
        --limit 90 --out docs/multi30k_fast_curves.png

``--limit`` draws a vertical line at that many minutes (the 90-minute budget).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import needs  # this folder: one line and exit 2 for a user mistake
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from seq2seq.core.files import atomic_open


def read_curve(run: Path, metric: str = "val/bleu") -> list[tuple[float, float, int]]:
    """``(minutes, value, step)`` of every validation of ``run``, in step order."""
    logs = sorted(
        (run / "logs" / "csv").glob("version_*/metrics.csv"),
        key=lambda p: int(p.parent.name.split("_")[1]),
    )  # a launch killed before its first log line leaves a version folder without one
    if not logs:
        raise needs.UserError(f"{run}: no CSV logs (logs/csv/version_*/metrics.csv)")
    by_step: dict[int, dict[str, float]] = {}
    for log in logs:
        with open(log, encoding="utf-8") as f:
            for row in csv.DictReader(f):
                for key in (metric, "val/wall_min"):
                    if row.get(key):
                        by_step.setdefault(int(row["step"]), {})[key] = float(row[key])
    points = [
        (v["val/wall_min"], v[metric], step)
        for step, v in sorted(by_step.items())
        if metric in v and "val/wall_min" in v
    ]
    if not points:
        raise needs.UserError(f"{run}: no validation logged both {metric} and val/wall_min")
    return points


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="NAME=DIR")
    p.add_argument("--metric", default="val/bleu")
    p.add_argument("--limit", type=float, help="draw a line at this many minutes")
    p.add_argument("--title", default="Multi30K en-de: validation BLEU against training time")
    p.add_argument("--out", required=True, help="PNG file")
    args = p.parse_args()

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for item in args.run:
        name, sep, directory = item.partition("=")
        if not sep:
            raise needs.UserError(f"--run {item!r} must look like NAME=DIR")
        points = read_curve(Path(directory), args.metric)
        ax.plot([m for m, _, _ in points], [v for _, v, _ in points], marker="o", label=name)
        best = max(points, key=lambda t: t[1])
        print(f"{name}: best {args.metric} {best[1]:.2f} at step {best[2]} ({best[0]:.1f} min); "
              f"last {points[-1][1]:.2f} at {points[-1][0]:.1f} min")  # fmt: skip
    if args.limit:
        ax.axvline(args.limit, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("training time, minutes (validation included)")
    ax.set_ylabel(args.metric.replace("val/", "validation ").replace("bleu", "BLEU (greedy)"))
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_open(Path(args.out), "wb") as f:
        fig.savefig(f, format="png")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    needs.run(main)

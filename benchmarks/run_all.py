#!/usr/bin/env python
"""`make bench`: training throughput, then decoding speed of a trained model, as tables.

Needs the Multi30K corpus (SEQ2SEQ_MIRROR offline). Decoding needs a trained model directory:
BENCH_MODEL (default runs/demo/averaged, which `make demo` writes); without one that part is
skipped with a note.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    status = subprocess.call([sys.executable, str(HERE / "train_throughput.py")])
    model = Path(os.environ.get("BENCH_MODEL", "runs/demo/averaged"))
    if not (model / "manifest.json").is_file():
        print(f"\n(no trained model at {model}: run `make demo` or set BENCH_MODEL for decoding)")
        return status
    status |= subprocess.call([sys.executable, str(HERE / "decode_speed.py"), str(model)])
    status |= subprocess.call([sys.executable, str(HERE / "export_parity.py"), str(model)])
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Where the engine runs: the main thread, a worker thread, or a worker thread that loaded it.

Why ``seq2seq serve`` loads its model on its engine thread (seq2seq.serve.batcher.engine_thread):
PyTorch's GNU OpenMP gives each thread that runs a parallel operator a team of its own and
lets idle helpers sleep once the process holds more OpenMP threads than CPUs. Each placement
runs in a fresh process: load the model, then keep ``--live`` sentences in a continuous beam
search (seq2seq.decode.continuous, refilled from test_2016_flickr as sentences finish, as the server
does) for ``--steps`` steps, and print sentences/s.

    python benchmarks/engine_thread.py runs/demo/averaged --mirror $SEQ2SEQ_MIRROR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing model or mirror
from serve_load import read_test_source  # this folder: the Multi30K source side of a mirror

PLACEMENTS = {
    "main": "load and search on the main thread",
    "worker": "load on the main thread, search on a worker thread (the server before)",
    "engine": "load and search on one worker thread (seq2seq serve now)",
}


def child(model_dir: str, mirror: str, placement: str, live: int, steps: int, threads: int):
    import torch

    from seq2seq.decode.continuous import ContinuousSearch
    from seq2seq.decode.translator import Translator

    torch.set_num_threads(threads)
    sentences = read_test_source(Path(model_dir), mirror, "test_2016_flickr")
    state: dict = {}

    def load() -> None:
        translator = Translator.load(model_dir)
        translator.translate(sentences[:16])  # warm-up, as the server's
        state["translator"] = translator

    def search() -> None:
        translator = state["translator"]
        ids = translator.encode(sentences)
        run = ContinuousSearch.for_engine(translator.engine, translator.opts)
        added = 0

        def refill() -> None:
            nonlocal added
            need = live - run.active
            run.add([(added + i, ids[(added + i) % len(ids)]) for i in range(need)])
            added += need

        refill()
        for _ in range(20):  # warm-up steps
            run.step()
            refill()
        done, start = 0, time.perf_counter()
        for _ in range(steps):
            done += len(run.step())
            refill()
        state["rate"] = done / (time.perf_counter() - start)

    def on_thread(fn) -> None:
        t = threading.Thread(target=fn)
        t.start()
        t.join()

    if placement == "main":
        load()
        search()
    elif placement == "worker":
        load()
        on_thread(search)
    else:
        on_thread(lambda: (load(), search()))
    print(json.dumps({"sentences_per_s": state["rate"]}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--live", type=int, default=48, help="sentences kept in the search")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="interleaved repeats (median)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.model_dir, args.child[0], args.child[1], args.live, args.steps, args.threads)
        return
    needs.model_dir(args.model_dir)
    read_test_source(Path(args.model_dir), needs.mirror(args.mirror), "test_2016_flickr")
    rates: dict[str, list[float]] = {name: [] for name in PLACEMENTS}
    for _ in range(args.rounds):
        for name in PLACEMENTS:
            cmd = [sys.executable, __file__, args.model_dir, "--child", args.mirror, name,
                   "--live", str(args.live), "--steps", str(args.steps),
                   "--threads", str(args.threads)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rates[name].append(json.loads(out.strip().splitlines()[-1])["sentences_per_s"])
    print(f"continuous beam search, {args.live} sentences live, {args.steps} steps, "
          f"{args.threads} threads, median of {args.rounds} rounds")  # fmt: skip
    print(f"{'placement':<10}{'sent/s':>9}  what")
    for name, what in PLACEMENTS.items():
        print(f"{name:<10}{statistics.median(rates[name]):>9.1f}  {what}")


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""Where a cached beam-search step of the torch engine spends its time.

Translates one Translator batch (``decoding.max_tokens`` source tokens, the batch of the test
set's median-length sentences) with the torch engine exactly as ``seq2seq translate`` does,
once untimed, then several times timed without a profiler (the wall time per step) and once
under ``torch.profiler``. Every operator the profiler records at the top level (not inside
another operator) is put in one bucket, by its name and the code it was called from:

- linear layers: the decoder's Q/K/V, output and feed-forward projections;
- output projection: hidden states onto the vocabulary (the largest multiply);
- attention: SDPA over the self-attention cache and over the source, and its head reshapes;
- KV cache write: storing the step's keys and values;
- log-softmax, top-k (all of the search's top-k calls), layer norm;
- search rules: the rest of the per-step vocabulary work (the NaN guard, pad/BOS/EOS masks,
  adding the beam scores) and the search's own bookkeeping (finished hypotheses, prefixes);
- reorder: selecting the beams' caches (``DecoderState.reorder``), memory included;
- other operators: embeddings, residual adds, activations;
- Python: the wall time per step without the profiler minus the operators' time under it
  (the interpreter, argument parsing, dispatch). The profiler adds its own cost to each
  operator, so this is a lower bound.

Also printed: page faults and system CPU time per step (allocating fresh pages is system
time), and the per-step wall time with 1 and 2 intra-op threads if ``--threads-sweep``.

    python benchmarks/profile_step.py runs/demo/averaged --corpus multi30k --pair en-de
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

import seq2seq  # noqa: F401  before export_parity (which puts this checkout first on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import needs  # noqa: E402
from export_parity import load_test_set  # noqa: E402

BUCKETS = (
    "linear layers",
    "output projection",
    "attention",
    "KV cache write",
    "log-softmax",
    "top-k",
    "layer norm",
    "search rules",
    "reorder",
    "other operators",
    "Python",
)

# Scopes: functions whose operators are attributed to them (innermost scope wins).
SCOPES = {
    "seq2seq.model.transformer.Seq2SeqTransformer.project": "output projection",
    "seq2seq.model.decoder_state.DecoderState.reorder": "reorder",
    "seq2seq.model.attention.KVCache.write": "KV cache write",
    "seq2seq.model.attention.attend": "attention",
    "seq2seq.decode.beam.beam_candidates": "search rules",
}


def _wrap_scopes(scopes: dict[str, str] = SCOPES) -> None:
    """Wrap the functions of ``scopes`` (dotted path: label) in ``torch.profiler.record_function``
    labelled ``## label`` (this process only)."""
    import importlib

    for path, label in scopes.items():
        module_name, _, attr = path.rpartition(".")
        owner_name, _, cls_name = module_name.rpartition(".")
        try:
            owner = importlib.import_module(module_name)
            target, name = owner, attr
        except ModuleNotFoundError:  # a method: module.Class.method
            owner = getattr(importlib.import_module(owner_name), cls_name, None)
            target, name = owner, attr
        fn = getattr(target, name, None) if target is not None else None
        if fn is None:
            continue  # an older code base without this function

        def wrapped(*args, __fn=fn, __label=f"## {label}", **kwargs):
            with torch.profiler.record_function(__label):
                return __fn(*args, **kwargs)

        setattr(target, name, wrapped)  # module globals and class attributes are looked up


def _bucket(op: str, scope: str | None) -> str:
    """Bucket of a top-level operator ``op`` called inside the innermost scope ``scope``."""
    if scope in ("output projection", "reorder", "KV cache write", "attention"):
        return scope
    if op in ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul"):
        return "linear layers"
    if "scaled_dot_product" in op:
        return "attention"
    if op == "aten::_log_softmax" or op == "aten::log_softmax":
        return "log-softmax"
    if op == "aten::topk":
        return "top-k"
    if op in ("aten::layer_norm", "aten::native_layer_norm"):
        return "layer norm"
    if scope in ("search rules", None):  # None: outside the step (the search's bookkeeping)
        return "search rules"
    return "other operators"


def _scope_of(event) -> str | None:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("## "):
            return parent.name[3:]
        parent = parent.cpu_parent
    return None


def _top_level_ops(events):
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        nested = False
        while parent is not None:
            if parent.name.startswith("aten::"):
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            yield e


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("--corpus")
    p.add_argument("--pair")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--variant")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--cache-dir")
    p.add_argument("--src", type=Path)
    p.add_argument("--ref", type=Path)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3, help="timed runs without the profiler")
    p.add_argument("--threads-sweep", action="store_true", help="also time 1 and 2 threads")
    args = p.parse_args()

    from seq2seq.decode.batching import batch_by_tokens
    from seq2seq.decode.translator import Translator

    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model_dir, method="beam", beam_size=args.beam)
    opts = translator.opts
    with tempfile.TemporaryDirectory(prefix="profile-step-") as tmp:
        src_text, _, name = load_test_set(args, Path(tmp))
    src = [ids for ids in translator.encode(src_text) if ids]
    batches = batch_by_tokens([len(s) for s in src], opts.max_tokens)
    median = statistics.median_low(len(s) for s in src)
    batch = next(b for b in batches if max(len(src[i]) for i in b) >= median)
    ids = [src[i] for i in batch]

    steps = []  # decoder steps per search (counted through the model)
    model = translator.engine.model
    step_fn = model.decode_step

    def counting_step(*a, **kw):
        steps[-1] += 1
        with torch.profiler.record_function("## step"):
            return step_fn(*a, **kw)

    model.decode_step = counting_step

    def run() -> float:
        steps.append(0)
        start = time.perf_counter()
        translator.engine.translate_ids(ids, opts)
        return time.perf_counter() - start

    run()  # warm-up
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    walls = [run() for _ in range(args.repeats)]
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n_steps = steps[-1]
    wall = statistics.median(walls) / n_steps  # seconds per step
    faults = (r1.ru_minflt - r0.ru_minflt) / (args.repeats * n_steps)
    sys_share = (r1.ru_stime - r0.ru_stime) / max(
        (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), 1e-9
    )

    _wrap_scopes()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    totals: dict[str, float] = defaultdict(float)
    for e in _top_level_ops(prof.events()):
        totals[_bucket(e.name, _scope_of(e))] += e.cpu_time_total / 1e6  # seconds
    per_step = {k: v / n_steps for k, v in totals.items()}
    per_step["Python"] = max(wall - sum(per_step.values()), 0.0)

    n_rows = len(ids) * args.beam
    print(
        f"{name}: one batch of {len(ids)} sentences (max_tokens {opts.max_tokens}, source length "
        f"<= {max(len(s) for s in ids)}), beam {args.beam} (N <= {n_rows} rows), "
        f"{n_steps} steps, {args.threads} threads"
    )
    print(
        f"wall {wall * 1e3:.2f} ms per step (median of {args.repeats} runs: "
        f"{', '.join(f'{w / n_steps * 1e3:.2f}' for w in walls)}); "
        f"{faults:.0f} page faults per step, system time {100 * sys_share:.1f}% of CPU time"
    )
    print(f"{'part':<20}{'ms/step':>9}{'share':>8}")
    for bucket in BUCKETS:
        t = per_step.get(bucket, 0.0)
        print(f"{bucket:<20}{t * 1e3:>9.2f}{100 * t / wall:>7.1f}%")
    if args.threads_sweep:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            run()
            times = [run() / steps[-1] for _ in range(args.repeats)]
            print(f"{threads} thread(s): {statistics.median(times) * 1e3:.2f} ms per step")


if __name__ == "__main__":
    needs.run(main)

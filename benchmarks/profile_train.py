#!/usr/bin/env python
"""Where a training update spends its time, and how fast its matrix multiplies run.

Runs training updates of ``train_throughput.py``'s shapes (``--shape``) on the same Multi30K
batches as training (forward and backward of ``TranslationModule.compute_loss``, then the
optimizer's step; ``--rdrop``: R-Drop's two passes; ``--precision bf16-mixed``: under bf16
autocast), a few untimed, then several timed without a profiler (the wall time per update),
then several under ``torch.profiler``. Each operator's own time (not its callees') goes in
one bucket, by its name, its input shapes and the code it ran in:

- vocabulary projection: the multiplies onto, and back from, the vocabulary (a multiply with
  a dimension as large as the target vocabulary), forward and backward;
- loss, the rest: the fused loss's other work over each chunk of logits (softmax, gradients);
- linear layers: every other multiply (Q/K/V, output, cross-attention and feed-forward
  projections), forward and backward;
- attention: ``attention.attend`` forward (SDPA's kernel or the batched multiplies and
  softmax) and its backward;
- dropout: drawing the masks and applying them, forward (``layers.dropout``);
- layer norm, optimizer (the step), other operators (embeddings, residual adds, activations,
  dropout's backward multiply and every backward not named above);
- Python and autograd: the wall time per update without the profiler less the operators'
  time under it (the interpreter, dispatch, the autograd engine). The profiler adds its own
  cost to each operator, so this is a lower bound, and 0 where the profiled operators took
  longer than the unprofiled update (the shares are then of the operators' time).

For the two multiply buckets it also prints the GFLOP per update (2 x the multiply-adds, from
the shapes) and the rate they ran at, beside the rate of one 1,024 x 1,024 float32 multiply
on this machine with the same threads (the better of a measure before the profiled updates and
one after): how much of the update is multiplies, and how close
to this CPU's own multiply rate they run.

    SEQ2SEQ_MIRROR=... python benchmarks/profile_train.py --shape tiny --rdrop
    SEQ2SEQ_MIRROR=... python benchmarks/profile_train.py --shape tiny --precision bf16-mixed
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

import needs  # this folder: one line and exit 2 for a missing mirror
import train_throughput as tt
from profile_step import _wrap_scopes

BUCKETS = (
    "vocabulary projection",
    "loss, the rest",
    "linear layers",
    "attention",
    "dropout",
    "layer norm",
    "optimizer",
    "other operators",
    "Python and autograd",
)
MULTIPLIES = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm"}
SCOPES = {
    "seq2seq.model.attention.attend": "attention",
    "seq2seq.model.layers.dropout": "dropout",
}
_NODE = "autograd::engine::evaluate_function: "
# backward nodes of the attention's operators (SDPA's kernel, or bmm/softmax/masked_fill)
_ATTENTION_NODES = ("ScaledDotProduct", "Bmm", "Softmax", "MaskedFill")


def multiply_flops(name: str, shapes: list) -> float:
    """2 x the multiply-adds of one matrix multiply from its input shapes (0 if not one)."""
    if name in ("aten::mm", "aten::addmm", "aten::addmm_"):
        a, b = shapes[:2] if name == "aten::mm" else shapes[1:3]
        return 2.0 * a[0] * a[1] * b[1] if len(a) == 2 and len(b) == 2 else 0.0
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = shapes[:2] if name == "aten::bmm" else shapes[1:3]
        return 2.0 * a[0] * a[1] * a[2] * b[2] if len(a) == 3 and len(b) == 3 else 0.0
    return 0.0


def context(event) -> str | None:
    """The innermost labelled code an operator ran in: a ``## scope``, the fused loss
    (``_ProjectedLoss``, its forward, or its backward node), or a backward node's name."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name.startswith("## "):
            return name[3:]
        if name.startswith("_ProjectedLoss"):
            return "loss"
        if name.startswith(_NODE):
            node = name[len(_NODE) :]
            return "loss" if node.startswith("_ProjectedLoss") else node
        parent = parent.cpu_parent
    return None


def bucket(event, vocab: int) -> str:
    """The bucket of one operator event (see the module docstring)."""
    name, ctx = event.name, context(event)
    if name in MULTIPLIES:
        two_d = name in ("aten::mm", "aten::addmm", "aten::addmm_")
        if two_d and any(vocab in s for s in event.input_shapes if s):
            return "vocabulary projection"
        if ctx == "attention" or not two_d:
            return "attention"
        return "linear layers"
    if ctx == "loss":
        return "loss, the rest"
    if ctx == "attention" or (ctx and ctx.startswith(_ATTENTION_NODES)):
        return "attention"
    if ctx in ("dropout", "optimizer"):
        return ctx
    if "layer_norm" in name:
        return "layer norm"
    return "other operators"


def breakdown(events, vocab: int, n_updates: int) -> tuple[dict, dict]:
    """Seconds per update by bucket, and FLOPs per update of the two multiply buckets,
    from a profiler's events over ``n_updates`` updates."""
    seconds: dict[str, float] = defaultdict(float)
    flops: dict[str, float] = defaultdict(float)
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        b = bucket(e, vocab)
        seconds[b] += e.self_cpu_time_total / 1e6 / n_updates
        if b in ("vocabulary projection", "linear layers"):
            flops[b] += multiply_flops(e.name, [s for s in e.input_shapes if s]) / n_updates
    return seconds, flops


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(tt.SHAPES), default="tiny")
    p.add_argument("--rdrop", action="store_true", help="R-Drop updates (rdrop_alpha 5)")
    p.add_argument("--precision", choices=["32", "bf16-mixed"], default="32")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--timed", type=int, default=6, help="updates timed without the profiler")
    p.add_argument("--profiled", type=int, default=6, help="updates under the profiler")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    args = p.parse_args()
    mirror = needs.mirror(args.mirror)

    import torch

    from seq2seq.core import keep_freed_memory
    from seq2seq.train.module import TranslationModule

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as training does
    tt.prepare(args.shape, mirror)
    bf16 = args.precision == "bf16-mixed"
    impl = ("ours-bf16" if bf16 else "ours") + ("-rdrop" if args.rdrop else "")
    n = args.warmup + args.timed + args.profiled
    cfg, dm, batches = tt.batches(n, mirror, args.shape, impl)
    vocab = dm.tokenizer.tgt_vocab_size
    torch.manual_seed(1)
    module = TranslationModule(
        cfg=cfg, src_vocab_size=dm.tokenizer.src_vocab_size, tgt_vocab_size=vocab
    ).train()
    optimizer = module.configure_optimizers()["optimizer"]

    def update(batch) -> None:
        module.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = module.compute_loss(batch.src_ids, batch.tgt_ids)
        (out.loss / out.n_tokens).backward()
        with torch.profiler.record_function("## optimizer"):
            optimizer.step()

    for batch in batches[: args.warmup]:
        update(batch)
    walls = []
    for batch in batches[args.warmup : args.warmup + args.timed]:
        start = time.perf_counter()
        update(batch)
        walls.append(time.perf_counter() - start)
    wall = statistics.median(walls)

    peak = tt.matmul_flops(args.threads)  # before and after: the best of a noisy machine
    _wrap_scopes(SCOPES)
    profiled = batches[args.warmup + args.timed :]
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for batch in profiled:
            update(batch)
    seconds, flops = breakdown(prof.events(), vocab, len(profiled))
    operators = sum(seconds.values())
    seconds["Python and autograd"] = max(wall - operators, 0.0)
    whole = sum(seconds.values())  # the shares' base: the wall time, or the operators' if longer
    peak = max(peak, tt.matmul_flops(args.threads))

    tokens = statistics.mean(batch.n_tgt_tokens for batch in profiled)
    what = "R-Drop (two passes)" if args.rdrop else "one pass"
    print(f"\nA training update, {args.shape} shape, {args.precision}, {what}, "
          f"{args.threads} threads, ~{tokens:.0f} target tokens, vocabulary {vocab}")  # fmt: skip
    print(f"wall {wall * 1e3:.0f} ms per update (median of {args.timed}: "
          f"{', '.join(f'{w * 1e3:.0f}' for w in walls)}); {args.profiled} profiled; "
          f"a 1,024 x 1,024 float32 multiply: {peak / 1e9:.0f} GFLOP/s")  # fmt: skip
    print(f"{'part':<24}{'ms/update':>10}{'share':>8}{'GFLOP':>8}{'GFLOP/s':>9}")
    for b in BUCKETS:
        t = seconds.get(b, 0.0)
        rate = f"{flops[b] / 1e9:>8.1f}{flops[b] / t / 1e9:>9.0f}" if b in flops and t else ""
        print(f"{b:<24}{t * 1e3:>10.1f}{100 * t / whole:>7.1f}%{rate}")
    if operators > wall:
        print(f"(the operators took {operators * 1e3:.0f} ms an update under the profiler, "
              f"more than the wall time without it: shares are of the operators' time)")  # fmt: skip
    return 0


if __name__ == "__main__":
    needs.run(main)

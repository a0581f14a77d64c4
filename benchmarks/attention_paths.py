#!/usr/bin/env python
"""Attention on short sentences: SDPA's kernel against the explicit path, in training steps.

On the CPU, ``seq2seq.model.attention.attend`` runs calls with at most ``SHORT_KEYS`` keys as
two batched multiplies and a softmax instead of SDPA's kernel. This times the model's forward
and backward (``TranslationModule.compute_loss``, then ``backward``) on the same Multi30K
batches both ways, in one process, the two ways taking turns on every batch (the order
alternating), so that a noisy machine's slow stretches fall on both alike. The optimizer step,
the same either way, is left out. ``--rdrop`` times R-Drop updates (two passes).

    SEQ2SEQ_MIRROR=... python benchmarks/attention_paths.py --shape tiny
    SEQ2SEQ_MIRROR=... python benchmarks/attention_paths.py --shape tiny --rdrop
    SEQ2SEQ_MIRROR=... python benchmarks/attention_paths.py --shape tiny --precision bf16-mixed
    python benchmarks/attention_paths.py --sweep          # one attention call by key count
    python benchmarks/attention_paths.py --sweep --forward    # the same, forward only

The shapes and data are ``train_throughput.py``'s (``--shape``). Prints, per way, the median
milliseconds of a forward and backward, target tokens per second over all timed batches, and
the ratio of the medians. ``--sweep`` (no data needed) times one ``attend`` call forward and
backward on random float32 queries, keys and values, 4,096 tokens in sentences of 16 to 128
tokens, 4 heads of 32, a padding mask, both ways in turn: where ``SHORT_KEYS`` comes from.
"""

from __future__ import annotations

import argparse
import os
import statistics

import needs  # this folder: one line and exit 2 for a missing mirror
import train_throughput as tt
from turns import in_turns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(tt.SHAPES), default="tiny")
    p.add_argument("--steps", type=int, default=40, help="timed batches (each run both ways)")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rdrop", action="store_true", help="R-Drop updates (rdrop_alpha 5)")
    p.add_argument("--precision", choices=["32", "bf16-mixed"], default="32")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--sweep", action="store_true", help="one attention call by key count")
    p.add_argument("--forward", action="store_true",
                   help="--sweep: the forward alone, without gradients (inference)")  # fmt: skip
    args = p.parse_args()
    if args.sweep:
        return sweep(args.threads, args.steps, args.warmup, forward_only=args.forward)
    mirror = needs.mirror(args.mirror)

    import torch

    from seq2seq.core import keep_freed_memory
    from seq2seq.model import attention
    from seq2seq.train.module import TranslationModule

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as training does
    tt.prepare(args.shape, mirror)
    impl = ("ours-bf16" if args.precision == "bf16-mixed" else "ours") + (
        "-rdrop" if args.rdrop else ""
    )
    cfg, dm, batches = tt.batches(args.warmup + args.steps, mirror, args.shape, impl)
    torch.manual_seed(1)
    module = TranslationModule(
        cfg=cfg,
        src_vocab_size=dm.tokenizer.src_vocab_size,
        tgt_vocab_size=dm.tokenizer.tgt_vocab_size,
    ).train()
    bf16 = args.precision == "bf16-mixed"
    default = attention.SHORT_KEYS
    ways = {"SDPA's kernel": 0, f"explicit (up to {default} keys)": default}

    def run(way: str, i: int) -> None:
        attention.SHORT_KEYS = ways[way]
        module.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = module.compute_loss(batches[i].src_ids, batches[i].tgt_ids)
        (out.loss / out.n_tokens).backward()

    times = in_turns(list(ways), args.steps, args.warmup, run)
    attention.SHORT_KEYS = default
    tokens = sum(batch.n_tgt_tokens for batch in batches[args.warmup :])
    base = statistics.median(times[next(iter(ways))])
    what = "R-Drop (two passes)" if args.rdrop else "one pass"
    print(f"\nAttention paths, {args.shape} shape, {args.precision}, {what}, forward + backward, "
          f"{args.threads} threads, {args.steps} batches each way, taking turns")  # fmt: skip
    print(f"{'attention':<30}{'median ms':>11}{'tgt tok/s':>11}{'time vs SDPA':>14}")
    for way, ts in times.items():
        med = statistics.median(ts)
        print(f"{way:<30}{med * 1000:>11.1f}{tokens / sum(ts):>11.0f}{med / base:>13.2f}x")
    return 0


def sweep(threads: int, calls: int, warmup: int, *, forward_only: bool) -> int:
    """One attend call, forward and backward (or forward only), SDPA against explicit, by key
    count."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    what = "forward only, no gradients" if forward_only else "forward + backward"
    print(f"\nOne attention call, {what}, float32, 4,096 tokens, 4 heads of 32, "
          f"padding mask, {threads} threads, {calls} calls each way (median)")  # fmt: skip
    print(f"{'keys':>6}{'sentences':>11}{'SDPA ms':>10}{'explicit ms':>13}{'SDPA / explicit':>17}")
    for length in (16, 24, 32, 40, 48, 56, 64, 128):
        sdpa, explicit = _one_call(length, calls, warmup, forward_only=forward_only)
        batch = 4096 // length
        print(f"{length:>6}{batch:>11}{sdpa:>10.2f}{explicit:>13.2f}{sdpa / explicit:>16.2f}x")
    return 0


def _one_call(length: int, calls: int, warmup: int, *, forward_only: bool) -> tuple[float, float]:
    """Median milliseconds of one attend call over sentences of ``length`` tokens (4,096 in
    all, half of them padded): SDPA's kernel, then the explicit path."""
    import torch

    from seq2seq.model import attention

    batch = 4096 // length
    q, k, v = (torch.randn(batch, 4, length, 32, requires_grad=not forward_only) for _ in range(3))
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[: batch // 2, ..., length - length // 4 :] = False  # half the sentences padded
    grad = torch.randn(batch, 4, length, 32)
    default = attention.SHORT_KEYS

    def run(way: str, _i: int) -> None:
        attention.SHORT_KEYS = 0 if way == "SDPA" else 10**9
        out, _ = attention.attend(q, k, v, mask=mask)
        if not forward_only:
            out.backward(grad)

    times = in_turns(["SDPA", "explicit"], calls, warmup, run)
    attention.SHORT_KEYS = default
    return tuple(statistics.median(times[way]) * 1000 for way in ("SDPA", "explicit"))


if __name__ == "__main__":
    needs.run(main)

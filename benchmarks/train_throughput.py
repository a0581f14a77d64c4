#!/usr/bin/env python
"""Training throughput: seq2seq (Lightning) against a plain torch.nn.Transformer loop.

Both train the same model shape (``--shape``) on the same Multi30K en->de batches, in the same
run, each in its own subprocess (so each gets its own peak-memory reading), alternating for
``--rounds`` rounds; the table shows the median. Reference config (issue 9): 3+3 layers,
d_model 256, 4 heads, d_ff 1024, pre-norm, dropout 0.1, joint 8,000-piece SentencePiece BPE
over Multi30K en+de, tied embeddings, 4,096-token batches, float32, 2 CPU threads.

    SEQ2SEQ_MIRROR=$SEQ2SEQ_MIRROR python benchmarks/train_throughput.py --steps 30
    python benchmarks/train_throughput.py --shape tiny            # Transformer-Tiny vs plain
    python benchmarks/train_throughput.py --shape demo --impls ours,ours-bf16   # bf16 vs fp32
    python benchmarks/train_throughput.py --shape demo --impls ours,ours-rdrop,ours-simcut
    python benchmarks/train_throughput.py --shape tiny \
        --impls ours-bf16,ours-bf16-rdrop,ours-bf16-rdrop-unfused   # R-Drop's cost, fused or not
    python benchmarks/train_throughput.py --shape demo \
        --impls ours,ours-bf16,ours-bf16-rows,ours-bf16-attn,ours-bf16-off  # seq2seq.model.shape_buckets

``--shape`` picks the sizes (``reference``, ``tiny``: 4+4 layers, d_model 128, d_ff 256,
dropout 0.3, 8,000 pieces; ``demo``: configs/multi30k_quick.yaml's model and batches);
``--impls`` the implementations, the first being the baseline of the ratio column (taken
within each round, then the median). MFU is counted against the fp32 matmul rate, also for
bf16 runs.

Columns: target tokens/s (non-padding target tokens, EOS included, per second over the timed
steps), peak resident memory (the subprocess' max RSS), and MFU: model FLOPs per second
(6 x the forward multiply-adds of the real, non-padding tokens, x2 for FLOPs ... see
``forward_flops``) over the fp32 matrix-multiply rate this script measures on this machine
with the same threads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing mirror

WORK = Path(os.environ.get("SEQ2SEQ_BENCH_DIR", "runs/bench"))
COMMON = [
    "data.corpus=multi30k",
    "data.pair=en-de",
    "data.variant=raw",
    "data.joint_vocab=true",
    "model.norm_first=true",
    "model.share_embeddings=true",
    "model.tie_output=true",
    "training.lr=0.0005",
    "training.warmup_steps=4000",
    "training.label_smoothing=0.1",
]
# --shape: the model and its data (vocabulary, batch size); the plain loop gets the same sizes.
SHAPES = {
    # issue 9's reference config
    "reference": [
        "data.vocab_size=8000",
        "data.max_tokens=4096",
        "model.d_model=256",
        "model.n_heads=4",
        "model.d_ff=1024",
        "model.n_encoder_layers=3",
        "model.n_decoder_layers=3",
        "model.dropout=0.1",
    ],
    # Transformer-Tiny, the published Multi30K setting (configs/multi30k_tiny.yaml, _base, _fast)
    "tiny": [
        "data.vocab_size=8000",
        "data.max_tokens=4096",
        "model.d_model=128",
        "model.n_heads=4",
        "model.d_ff=256",
        "model.n_encoder_layers=4",
        "model.n_decoder_layers=4",
        "model.dropout=0.3",
    ],
    # the make demo model (configs/multi30k_quick.yaml)
    "demo": [
        "data.vocab_size=5000",
        "data.max_tokens=2500",
        "model.d_model=256",
        "model.n_heads=4",
        "model.d_ff=512",
        "model.n_encoder_layers=3",
        "model.n_decoder_layers=2",
        "model.dropout=0.1",
    ],
}
IMPLS = {
    "plain": "plain torch.nn.Transformer",
    "ours": "seq2seq (Lightning), fp32",
    "ours-bf16": "seq2seq (Lightning), bf16-mixed",
    # the shape_buckets ablation: bf16-mixed with one lever, or neither, on
    "ours-bf16-rows": "bf16, row buckets only",
    "ours-bf16-attn": "bf16, float32 attention only",
    "ours-bf16-off": "bf16, neither lever",
    # training.keep_freed_memory=false (seq2seq/core/memory.py): glibc's malloc as it comes
    "ours-sysmalloc": "fp32, system malloc",
    "ours-bf16-sysmalloc": "bf16-mixed, system malloc",
    # consistency regularisation (docs/training.md): two passes per update
    "ours-rdrop": "fp32, R-Drop (training.rdrop_alpha=5)",
    "ours-simcut": "fp32, SimCut (rdrop_alpha=3, rdrop_cutoff=0.05)",
    "ours-bf16-rdrop": "bf16-mixed, R-Drop (training.rdrop_alpha=5)",
    # the same with the loss unfused (full (N, V) logits, autograd through rdrop_loss)
    "ours-rdrop-unfused": "fp32, R-Drop, loss unfused",
    "ours-bf16-rdrop-unfused": "bf16-mixed, R-Drop, loss unfused",
    # every attention call through SDPA's kernel, short sentences too (attention.SHORT_KEYS 0)
    "ours-sdpa": "fp32, SDPA for short sentences",
    "ours-bf16-sdpa": "bf16-mixed, SDPA for short sentences",
    "ours-rdrop-sdpa": "fp32, R-Drop, SDPA for short sentences",
    "ours-bf16-rdrop-sdpa": "bf16-mixed, R-Drop, SDPA for short sentences",
}
REGULARISERS = {
    "ours-rdrop": ["training.rdrop_alpha=5"],
    "ours-simcut": ["training.rdrop_alpha=3", "training.rdrop_cutoff=0.05"],
    "ours-bf16-rdrop": ["training.rdrop_alpha=5"],
    "ours-rdrop-unfused": ["training.rdrop_alpha=5"],
    "ours-bf16-rdrop-unfused": ["training.rdrop_alpha=5"],
    "ours-rdrop-sdpa": ["training.rdrop_alpha=5"],
    "ours-bf16-rdrop-sdpa": ["training.rdrop_alpha=5"],
}
LEVERS = {"ours-bf16-rows": {"rows"}, "ours-bf16-attn": {"attention"}, "ours-bf16-off": set()}


EXTRA: list[str] = []  # --dropout: model.dropout for both implementations


def overrides(shape: str, impl: str = "ours") -> list[str]:
    precision = "bf16-mixed" if impl.startswith("ours-bf16") else "32"
    malloc = ["training.keep_freed_memory=false"] if impl.endswith("-sysmalloc") else []
    extra = REGULARISERS.get(impl, [])
    return [*COMMON, *SHAPES[shape], f"training.precision={precision}", *malloc, *extra, *EXTRA]


def work_dir(shape: str) -> Path:
    """One tokenizer + store per vocabulary (the shapes that share one share the data)."""
    vocab = next(o.split("=")[1] for o in SHAPES[shape] if o.startswith("data.vocab_size="))
    return WORK if vocab == "8000" else WORK / f"vocab{vocab}"


def matmul_flops(threads: int, n: int = 1024, reps: int = 20) -> float:
    """Measured fp32 matrix-multiply FLOP/s with ``threads`` threads (best of a few runs)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best


def forward_flops(src_lens, tgt_lens, *, d: int, ff: int, enc: int, dec: int, vocab: int) -> float:
    """Forward FLOPs of one batch counted on real (non-padding) tokens.

    Per source token and encoder layer: QKV + output projections 4*d*d, feed-forward 2*d*ff,
    attention 2*S*d (scores and weighted sum). Per target token and decoder layer: self QKV +
    out 4*d*d, cross Q + out 2*d*d, feed-forward 2*d*ff, attention 2*T*d + 2*S*d; plus the
    cross K/V projections 2*d*d per source token and decoder layer, and the output projection
    d*vocab per target token. Multiply-adds x2 = FLOPs.
    """
    macs = 0.0
    for s, t in zip(src_lens, tgt_lens):
        macs += enc * s * (4 * d * d + 2 * d * ff + 2 * s * d)
        macs += dec * t * (6 * d * d + 2 * d * ff + 2 * t * d + 2 * s * d)
        macs += dec * s * 2 * d * d
        macs += t * d * vocab
    return 2 * macs


def prepare(shape: str, mirror: str | None) -> None:
    """Build the tokenizer and the binarized stores once (shared by every subprocess)."""
    from seq2seq.config.loading import load_config
    from seq2seq.data.datamodule import TranslationDataModule

    cfg = load_config(None, overrides(shape))
    dm = TranslationDataModule(cfg, work_dir(shape), mirror=mirror)
    dm.prepare_data()


def batches(steps: int, mirror: str | None, shape: str, impl: str = "ours"):
    """The first ``steps`` training batches of the shape's config (same order everywhere)."""
    from seq2seq.config.loading import load_config
    from seq2seq.data.datamodule import TranslationDataModule

    cfg = load_config(None, overrides(shape, impl))
    dm = TranslationDataModule(cfg, work_dir(shape), mirror=mirror)
    dm.setup("fit")
    out = []
    for batch in dm.train_dataloader():
        out.append(batch)
        if len(out) == steps:
            break
    return cfg, dm, out


def run_ours(steps: int, warmup: int, threads: int, mirror: str | None, shape: str, impl: str):
    """seq2seq's TranslationModule under a Lightning Trainer (no validation, no checkpoints)."""
    import pytorch_lightning as pl
    import torch

    from seq2seq.model import attention, shape_buckets
    from seq2seq.train import module as module_code
    from seq2seq.train.module import TranslationModule

    torch.set_num_threads(threads)
    if impl.endswith("-unfused"):  # the projection and loss as autograd graphs (loss.py)
        module_code._fused_loss_dtype = lambda hidden: None
    if impl.endswith("-sdpa"):  # SDPA's kernel however short the sentences (attention.py)
        attention.SHORT_KEYS = 0
    if impl in LEVERS:
        shape_buckets.LEVERS.clear()
        shape_buckets.LEVERS.update(LEVERS[impl])
    cfg, dm, data = batches(steps, mirror, shape, impl)
    module = TranslationModule(
        cfg=cfg,
        src_vocab_size=dm.tokenizer.src_vocab_size,
        tgt_vocab_size=dm.tokenizer.tgt_vocab_size,
    )
    times: list[float] = []
    tokens: list[int] = []

    class Clock(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            times.append(time.perf_counter())
            tokens.append(batch.n_tgt_tokens)

        def on_train_end(self, trainer, pl_module):
            times.append(time.perf_counter())

    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        precision=cfg.training.precision,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[Clock()],
    )
    loader = torch.utils.data.DataLoader(data, batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    return _result(times, tokens, data, warmup, cfg, dm.tokenizer.tgt_vocab_size)


def run_plain(steps: int, warmup: int, threads: int, mirror: str | None, shape: str, impl: str):
    """A plain torch.nn.Transformer training loop on the same batches and sizes."""
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(threads)
    cfg, dm, data = batches(steps, mirror, shape)
    m, vocab = cfg.model, dm.tokenizer.tgt_vocab_size

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, m.d_model, padding_idx=0)
            self.pos = nn.Embedding(m.max_positions, m.d_model)
            self.transformer = nn.Transformer(
                d_model=m.d_model,
                nhead=m.n_heads,
                num_encoder_layers=m.n_encoder_layers,
                num_decoder_layers=m.n_decoder_layers,
                dim_feedforward=m.d_ff,
                dropout=m.dropout,
                batch_first=True,
                norm_first=True,
            )

        def forward(self, src, tgt_in):
            scale = math.sqrt(m.d_model)
            s = self.embed(src) * scale + self.pos.weight[: src.size(1)]
            t = self.embed(tgt_in) * scale + self.pos.weight[: tgt_in.size(1)]
            causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))
            h = self.transformer(
                s,
                t,
                tgt_mask=causal,
                src_key_padding_mask=src.eq(0),
                tgt_key_padding_mask=tgt_in.eq(0),
                memory_key_padding_mask=src.eq(0),
                tgt_is_causal=True,
            )
            return h @ self.embed.weight.t()  # tied output projection

    torch.manual_seed(1)
    model = Plain().train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98))
    times, tokens = [], []
    for batch in data:
        times.append(time.perf_counter())
        tokens.append(batch.n_tgt_tokens)
        tgt_in, tgt_out = batch.tgt_ids[:, :-1], batch.tgt_ids[:, 1:]
        logits = model(batch.src_ids, tgt_in)
        loss = F.cross_entropy(
            logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=0, label_smoothing=0.1
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    times.append(time.perf_counter())
    return _result(times, tokens, data, warmup, cfg, vocab)


def _result(times, tokens, data, warmup, cfg, vocab) -> dict:
    timed = slice(warmup, len(data))
    seconds = times[-1] - times[warmup]
    n_tokens = sum(tokens[timed])
    m = cfg.model
    flops = 0.0
    for batch in data[timed]:
        src_lens = batch.src_ids.ne(0).sum(1).tolist()
        tgt_lens = batch.tgt_ids[:, 1:].ne(0).sum(1).tolist()
        flops += 3 * forward_flops(
            src_lens, tgt_lens, d=m.d_model, ff=m.d_ff, enc=m.n_encoder_layers,
            dec=m.n_decoder_layers, vocab=vocab,
        )  # fmt: skip
    return {
        "tokens_per_s": n_tokens / seconds,
        "model_flops_per_s": flops / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "steps": len(data) - warmup,
        "seconds": seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="reference",
                   help="model and batch sizes (default: reference)")  # fmt: skip
    p.add_argument("--impls", default="plain,ours",
                   help=f"comma-separated, the first is the baseline of the ratios: "
                        f"{', '.join(IMPLS)} (default: plain,ours)")  # fmt: skip
    p.add_argument("--dropout", type=float,
                   help="model.dropout for both (default: the shape's). nn.Transformer also "
                        "drops attention weights and feed-forward activations at this rate, "
                        "seq2seq only the residual branches: --dropout 0 compares equal work")  # fmt: skip
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (after warm-up)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--impl", choices=list(IMPLS), help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the table's numbers to this file")
    args = p.parse_args()
    total = args.steps + args.warmup
    if args.dropout is not None:
        EXTRA.append(f"model.dropout={args.dropout}")
    impls = [x.strip() for x in args.impls.split(",") if x.strip()]
    unknown = [x for x in impls if x not in IMPLS]
    if unknown or not impls:
        p.error(f"--impls: unknown {', '.join(unknown) or '(none given)'}; choose from "
                f"{', '.join(IMPLS)}")  # fmt: skip

    if args.impl:  # a child: one measurement, JSON on the last stdout line
        run = run_plain if args.impl == "plain" else run_ours
        result = run(total, args.warmup, args.threads, args.mirror, args.shape, args.impl)
        print(json.dumps(result))
        return

    prepare(args.shape, args.mirror)
    peak = matmul_flops(args.threads)
    results: dict[str, list[dict]] = {impl: [] for impl in impls}
    for _ in range(args.rounds):
        for impl in impls:
            cmd = [sys.executable, __file__, "--impl", impl, "--shape", args.shape,
                   "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--threads", str(args.threads)]  # fmt: skip
            if args.dropout is not None:
                cmd += ["--dropout", str(args.dropout)]
            if args.mirror:
                cmd += ["--mirror", args.mirror]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode:
                sys.exit(f"{impl} run failed:\n{out.stderr[-3000:]}")
            results[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(impl: str, key: str) -> float:
        return statistics.median(r[key] for r in results[impl])

    def ratios(impl: str) -> list[float]:  # within each round, then the median
        return [r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(results[impl], results[impls[0]])]  # fmt: skip

    print(f"\nTraining throughput, {args.shape} shape ({' '.join(SHAPES[args.shape] + EXTRA)}), "
          f"{args.threads} threads, {args.steps} timed steps x {args.rounds} rounds (median); "
          f"measured fp32 matmul peak {peak / 1e9:.1f} GFLOP/s")  # fmt: skip
    print(f"{'implementation':<34}{'tgt tok/s':>11}{'peak RSS MiB':>14}{'MFU':>8}"
          f"{'x ' + impls[0]:>14}")  # fmt: skip
    rows = {}
    for impl in impls:
        tps, rss = med(impl, "tokens_per_s"), med(impl, "peak_rss_mib")
        mfu = med(impl, "model_flops_per_s") / peak
        ratio = statistics.median(ratios(impl))
        rows[impl] = {"tokens_per_s": tps, "peak_rss_mib": rss, "mfu": mfu, "ratio": ratio,
                      "round_ratios": ratios(impl)}  # fmt: skip
        print(f"{IMPLS[impl]:<34}{tps:>11.0f}{rss:>14.0f}{mfu:>8.1%}{ratio:>13.2f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"shape": args.shape, "rows": rows, "peak_flops": peak}), encoding="utf-8"
        )


if __name__ == "__main__":
    needs.run(main)

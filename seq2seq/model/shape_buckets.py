"""bf16 on the CPU without a new kernel per batch: few distinct shapes, attention in float32.

Under CPU autocast to bf16 a matrix multiply runs on oneDNN, which builds (JIT-compiles) a
kernel for each new shape and keeps it in a cache; float32 multiplies go to MKL, which
builds nothing. Training batches hold a new number of tokens almost every step, so every
linear layer of every step would ask oneDNN for a kernel of a new shape, and building one
costs several times as much as running it (``ONEDNN_VERBOSE=profile_create`` shows both).
And SDPA's bf16 kernel runs one small oneDNN multiply per (sentence, head, block), each a
kernel-cache lookup; in float32 those are MKL calls.

So, only under CPU bf16 autocast (:func:`cpu_bf16`):

- :func:`bucketed` runs a linear layer (or a feed-forward block) on its input's rows padded with zeros up to
  :func:`bucket_rows` (under 1/16 more rows, 16 sizes per doubling of the batch): after
  the first batches every shape has its kernel. Zero rows add nothing to the weight's
  gradient and their outputs are dropped, so the result is that of the unpadded rows.
- :func:`float32_attention` says attention should take float32 queries, keys and values
  (and run with autocast off): SDPA's float32 kernel on MKL.

Everywhere else (float32 training, GPUs, decoding) these are plain calls.

:data:`LEVERS` names the levers that are on (both, by default); the throughput benchmark
switches them off one at a time to measure each (``benchmarks/train_throughput.py --impls
ours,ours-bf16,ours-bf16-rows,ours-bf16-attn,ours-bf16-off``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["LEVERS", "bucket_rows", "bucketed", "cpu_bf16", "float32_attention", "padded_rows"]

MIN_BUCKET = 16
"""Row counts are padded to a multiple of at least this."""

LEVERS = {"rows", "attention"}
"""The levers that are on: ``rows`` (:func:`padded_rows`) and ``attention``
(:func:`float32_attention`)."""


def cpu_bf16(x: Tensor) -> bool:
    """True when ``x`` is on the CPU and CPU autocast to bf16 is on (training's bf16-mixed)."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )


def bucket_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of ``max(16, 2**(bit_length - 5))``.

    That adds under 1/16 of the rows (1/32 on average) and leaves 16 sizes per doubling
    from 512 rows up: 1,500-2,600-token batches fall into ~20 sizes.
    """
    if rows <= 0:
        return rows
    step = max(MIN_BUCKET, 1 << max(rows.bit_length() - 5, 0))
    return -(-rows // step) * step


def padded_rows(rows: int) -> int:
    """The row count a bf16 CPU multiply over ``rows`` rows runs on: :func:`bucket_rows`,
    or ``rows`` itself while the ``rows`` lever is off."""
    return bucket_rows(rows) if "rows" in LEVERS else rows


def bucketed(rows_fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``rows_fn(x)`` for a function that maps each row of ``x`` (..., D_in) on its own.

    Under CPU bf16 autocast, the rows of ``x`` (all dimensions but the last, flattened) are
    cast to bf16 and padded with zero rows to :func:`padded_rows`, and the padding rows of
    the output are dropped; otherwise ``rows_fn(x)``. The padding rows' outputs get a zero
    gradient, so they add nothing to any weight's gradient: a linear layer, or a whole
    feed-forward block (its dropout draws a mask for the padding rows too).
    """
    if not cpu_bf16(x):
        return rows_fn(x)
    width = x.size(-1)
    rows = x.numel() // width if width else 0
    padded = padded_rows(rows)
    if padded == rows:
        return rows_fn(x)
    flat = F.pad(x.reshape(rows, width).to(torch.bfloat16), (0, 0, 0, padded - rows))
    out = rows_fn(flat)[:rows]
    return out.view(*x.shape[:-1], out.size(-1))


def float32_attention(q: Tensor) -> bool:
    """Whether attention over ``q`` should run in float32 with autocast off (see module doc)."""
    return "attention" in LEVERS and cpu_bf16(q)

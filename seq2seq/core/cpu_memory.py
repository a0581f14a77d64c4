"""Keep freed CPU memory in the process for reuse, instead of handing it back to the kernel.

A cached beam-search step allocates several tensors of tens of megabytes (the (N, V) logits
and log-probs of a 1,000-row beam over a 5,000-piece vocabulary are 25 MB each) and frees them
a step later. glibc's malloc serves blocks that large with ``mmap`` and returns them with
``munmap``, or returns the top of its heap to the kernel once enough of it is free, so the next
step touches fresh pages again: a page fault per 4 KiB page, each with the kernel zeroing the
page. On the 2-core VMs here a fault costs about 3 microseconds of system time (more on a
freshly booted VM, whose memory the hypervisor has not backed yet), and a beam step of the demo
model's size faulted in about 6,500 pages: milliseconds per step. CTranslate2 caches its allocations and
pays none of this.

:func:`keep_freed_memory` sets glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (the
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` environment variables do the same at
process start), so that such blocks come from the heap and freed ones stay there. The cost: the
process keeps up to ``max_free`` bytes of freed memory mapped (its RSS does not shrink back
after a large batch). It is process-wide, which is why only the inference loaders call it
(:func:`seq2seq.decode.engines.load_torch`), not the model or the training loop. Elsewhere (not glibc)
it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_applied: int | None = None


def keep_freed_memory(max_free: int = 1 << 30) -> bool:
    """Make glibc's malloc keep up to ``max_free`` bytes of freed memory for reuse.

    Blocks below ``max_free`` are then taken from the heap rather than mapped anew, and the
    heap is trimmed only once more than ``max_free`` bytes at its top are free. Calling it
    again with the same or a smaller value does nothing.

    Returns:
        Whether the settings are in force (False where the C library is not glibc).
    """
    global _applied
    if _applied is not None and _applied >= max_free:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    value = min(max_free, 2**31 - 1)
    ok = mallopt(_M_MMAP_THRESHOLD, value) == 1 and mallopt(_M_TRIM_THRESHOLD, value) == 1
    if ok:
        _applied = max_free
    return ok

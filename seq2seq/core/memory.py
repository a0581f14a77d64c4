"""Keep freed CPU memory in the process for reuse, instead of handing it back to the kernel.

Both a training step and a cached beam-search step allocate and free the same large buffers
again and again (activations, the loss's logits chunks and gradients; a beam's (N, V) logits
and log-probs). glibc's malloc serves large blocks with ``mmap`` and returns them with
``munmap`` on ``free``, and trims the top of its heap once enough of it is free, so each new
buffer starts as fresh pages: one page fault per 4 KiB page, each with the kernel zeroing the
page. The results are the same either way, only sooner with this.

:func:`keep_freed_memory` sets glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (the
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` environment variables do the same at
process start), so that such blocks come from the heap and freed ones stay there. The cost: the
process keeps up to ``max_free`` bytes of freed memory mapped (its RSS does not shrink back after
a large batch). It is process-wide, which is why only the entry points call it, CPU training
(``training.keep_freed_memory``, :meth:`seq2seq.train.module.TranslationModule.on_fit_start`)
and the inference loaders (``load_torch`` in :mod:`seq2seq.decode`), not the model. Elsewhere
(not glibc) it does nothing.
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

    Args:
        max_free: The largest block taken from the heap, and the free bytes at the heap's top
            kept before trimming (capped at the largest C ``int``).

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
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    value = min(max_free, 2**31 - 1)
    ok = mallopt(_M_MMAP_THRESHOLD, value) == 1 and mallopt(_M_TRIM_THRESHOLD, value) == 1
    if ok:
        _applied = max_free
    return ok

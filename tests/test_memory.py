"""seq2seq.core.memory: freed blocks stay in the process, so reusing one faults no new pages
(a raw glibc block, torch tensors of a beam step's size, and training's setting)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from seq2seq.config.loading import load_config
from seq2seq.train.module import TranslationModule

# A 20 MB block, allocated, written and freed three times: the page faults of each round.
MALLOC_PROBE = """
import ctypes, resource, sys
from seq2seq.core.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    p = libc.malloc(20_000_000)
    libc.memset(p, 1, 20_000_000)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    libc.free(p)
print(*faults)
"""


def _malloc_faults(mode: str) -> list[int]:
    # glibc as it comes: no malloc tunables, no preloaded allocator
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(
        [sys.executable, "-c", MALLOC_PROBE, mode], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    return [int(x) for x in out.stdout.split()]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_a_freed_block_is_reused_without_new_page_faults():
    pages = 20_000_000 // 4096
    system, keep = _malloc_faults("system"), _malloc_faults("keep")
    # glibc as it comes: the first block is mmap'ed and unmapped on free, so the second
    # faults all its pages again (its threshold adapts only then)
    assert system[1] > pages // 2
    # kept: the second and third rounds reuse the first one's pages
    assert keep[0] > pages // 2 and max(keep[1:]) < pages // 20


def test_training_starts_with_the_allocator_setting(monkeypatch):
    import seq2seq.train.module as system

    calls = []
    monkeypatch.setattr(system, "keep_freed_memory", lambda: calls.append(1) or True)
    for keep, want in ((True, [1]), (False, [])):
        calls.clear()
        cfg = load_config(None, [f"training.keep_freed_memory={str(keep).lower()}"])
        TranslationModule(cfg=cfg, src_vocab_size=20, tgt_vocab_size=20).on_fit_start()
        assert calls == want


TENSOR_PROBE = """
import resource, sys, torch
from seq2seq.core.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
# 48 MB: a beam step's (N, V) log-probs, 1,500 rows x 8,000 pieces. glibc maps blocks above
# 32 MB anew each time by default; its heap takes a few rounds to settle.
n = 48 * 2**20 // 4
for _ in range(15):
    torch.empty(n).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.empty(n).fill_(1.0)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _tensor_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", TENSOR_PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.slow  # two fresh processes writing 1 GB each: a few seconds
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_reused_without_page_faults():
    applied, kept = _tensor_faults("keep")
    if applied != "True":
        pytest.skip("not glibc")
    _, default = _tensor_faults("default")
    assert default > 5000  # 5 x 12,288 pages mapped and faulted in anew (fewer with huge pages)
    assert kept < 100  # the same five blocks from the heap, already faulted in


def test_a_second_call_keeps_the_setting():
    from seq2seq.core.memory import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory(1 << 20) is first  # a smaller request changes nothing

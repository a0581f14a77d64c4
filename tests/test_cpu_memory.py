"""seq2seq.core.cpu_memory: freed blocks are reused instead of faulted in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from seq2seq.core.cpu_memory import keep_freed_memory
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


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.slow  # two fresh processes writing 1 GB each: a few seconds
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_reused_without_page_faults():
    applied, kept = _faults("keep")
    if applied != "True":
        pytest.skip("not glibc")
    _, default = _faults("default")
    assert default > 5000  # 5 x 12,288 pages mapped and faulted in anew (fewer with huge pages)
    assert kept < 100  # the same five blocks from the heap, already faulted in


def test_a_second_call_keeps_the_setting():
    from seq2seq.core.cpu_memory import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory(1 << 20) is first  # a smaller request changes nothing

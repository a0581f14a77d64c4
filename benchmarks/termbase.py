#!/usr/bin/env python
"""Loading a terminology file (``--terminology``): time and memory against its size.

For each size (``--sizes``, default 10k, 100k and 1M entries) a synthetic termbase is written
(unique source terms of one to three random words, a target of one or two; about 19 bytes a
line, so 1M entries is about 19 MB) and loaded with
:meth:`seq2seq.decode.terminology.Terminology.load` in a fresh process, which reports the
load time and the rise of its peak resident memory (``ru_maxrss``) over its resident memory
just before the load (after loading a one-entry termbase: what any load costs once is not
what the size costs). Then that process looks up ``--sentences`` (1000) random sentences of 12
words, half of them holding a term, and reports the time per sentence.

Columns: entries, file MB, load seconds, peak RSS delta (MB), that delta over the file size
(the target: at most 10x), lookup microseconds per sentence. Numbers are from one run on a
shared machine; compare ratios within a run.

    python benchmarks/termbase.py
    python benchmarks/termbase.py --sizes 10000,100000 --sentences 200
"""

from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, random, resource, sys, time
sys.path.insert(0, sys.argv[1])
from seq2seq.decode.terminology import Terminology

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

path, sentences = sys.argv[2], json.loads(sys.argv[3])
# A one-entry termbase first: what any load costs once (code paths, allocator pools) is not
# what a termbase's size costs.
with open(path + ".one", "w", encoding="utf-8") as f:
    f.write("a\tb\n")
Terminology.load(path + ".one").targets_for("a b")
before = rss_kib()
t0 = time.perf_counter()
terms = Terminology.load(path)
load_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
t0 = time.perf_counter()
found = sum(len(terms.targets_for(s)) for s in sentences)
lookup_s = time.perf_counter() - t0
print(json.dumps({"entries": len(terms), "load_s": load_s, "peak_delta_kib": peak - before,
                  "lookup_s": lookup_s, "found": found}))
"""


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 6)))


def write_termbase(path: Path, n: int, *, seed: int = 0) -> list[str]:
    """Write ``n`` entries with unique source terms; return a sample of the source terms."""
    rng = random.Random(seed)
    seen: set[str] = set()
    with open(path, "w", encoding="utf-8") as f:
        while len(seen) < n:
            source = " ".join(_word(rng) for _ in range(rng.choice((1, 1, 2, 3))))
            if source in seen:
                continue
            seen.add(source)
            target = " ".join(_word(rng) for _ in range(rng.choice((1, 2))))
            f.write(f"{source}\t{target}\n")
    return rng.sample(sorted(seen), min(n, 1000))


def sentences_with(sample: list[str], count: int, *, seed: int = 1) -> list[str]:
    """Sentences of 12 random words; every other one holds a term of ``sample``."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        words = [_word(rng) for _ in range(12)]
        if i % 2 == 0:
            words.insert(rng.randint(0, 12), rng.choice(sample))
        out.append(" ".join(words) + " .")
    return out


def measure(path: Path, sentences: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), str(path), json.dumps(sentences)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="10000,100000,1000000", help="entries per termbase")
    p.add_argument("--sentences", type=int, default=1000, help="sentences looked up (1000)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="seq2seq-termbase-") as tmp:
        for n in sizes:
            path = Path(tmp) / f"terms{n}.tsv"
            sample = write_termbase(path, n)
            r = measure(path, sentences_with(sample, args.sentences))
            mb = path.stat().st_size / 1e6
            delta = r["peak_delta_kib"] * 1024 / 1e6
            rows.append(
                (
                    f"{r['entries']:,}",
                    f"{mb:.1f}",
                    f"{r['load_s']:.2f}",
                    f"{delta:.0f}",
                    f"{delta / mb:.1f}x",
                    f"{r['lookup_s'] / args.sentences * 1e6:.0f}",
                )
            )
            path.unlink()
    head = ("entries", "file MB", "load s", "peak RSS delta MB", "delta / file", "lookup us/sent")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

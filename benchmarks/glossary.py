#!/usr/bin/env python
"""What a glossary and the repetition guard cost per sentence, before any decoding.

For each glossary size (``--sizes``: entries; unique source terms of one to three random
lowercase words, so they match in any case) plus ``--keep`` do-not-translate terms, times over
``--sentences`` random sentences of 12 words (half of them holding a term, a quarter a
do-not-translate term, some capitalized):

- ``build s``: making the :class:`~seq2seq.decode.glossary.Glossary` (what the server does
  once per request for an inline glossary, once per version for a named one);
- ``matches us``: :meth:`Glossary.matches` (what every sentence of a request with a glossary
  costs, matched or not);
- ``apply us``: :meth:`Glossary.apply` (masking and the terms to constrain; placeholders from a
  stub, as the model's are cached);
- ``exact-case us``: :meth:`Terminology.find` without ``smart_case`` (``--terminology``'s rule),
  for comparison.

Then the repetition guard's check (:func:`seq2seq.decode.repetition.loop_size`) on pairs of
30-token source and output, in microseconds a sentence. No model, no decoding: constrained
decoding's own cost is benchmarks/constrained.py's.

    python benchmarks/glossary.py
    python benchmarks/glossary.py --sizes 1000,100000 --sentences 2000
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2seq.decode.glossary import Glossary  # noqa: E402
from seq2seq.decode.repetition import loop_size  # noqa: E402
from seq2seq.decode.terminology import Terminology  # noqa: E402


def word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="100,10000,100000", help="glossary entries")
    p.add_argument("--keep", type=int, default=100, help="do-not-translate terms (100)")
    p.add_argument("--sentences", type=int, default=5000, help="sentences timed (5000)")
    args = p.parse_args()
    rng = random.Random(0)
    keep = [f"{word(rng).upper()}-{rng.randint(0, 9999)}" for _ in range(args.keep)]
    print("| entries | build s | matches us/sent | apply us/sent | exact-case us/sent |")
    print("|---|---|---|---|---|")
    for size in [int(x) for x in args.sizes.split(",")]:
        terms: dict[str, str] = {}
        while len(terms) < size:
            terms.setdefault(" ".join(word(rng) for _ in range(rng.randint(1, 3))), word(rng))
        sources = list(terms)
        sentences = []
        for i in range(args.sentences):
            words = [word(rng) for _ in range(12)]
            if i % 2 == 0:
                words[rng.randrange(12)] = rng.choice(sources)
            if i % 4 == 0:
                words[rng.randrange(12)] = rng.choice(keep)
            text = " ".join(words)
            sentences.append(text.capitalize() if i % 3 == 0 else text)
        t0 = time.perf_counter()
        glossary = Glossary(terms.items(), keep)
        build = time.perf_counter() - t0
        exact = Terminology(terms.items())

        def stub(_s: str, n: int) -> list[str]:
            return [f"QXZ{i}" for i in range(n)]

        timings = []
        for fn in (
            glossary.matches,
            lambda s, g=glossary: g.apply(s, stub),
            exact.find,
        ):
            t0 = time.perf_counter()
            for s in sentences:
                fn(s)
            timings.append((time.perf_counter() - t0) / len(sentences) * 1e6)
        print(f"| {size:,} | {build:.2f} | " + " | ".join(f"{t:.0f}" for t in timings) + " |")
    pairs = []
    for _ in range(args.sentences):
        src = [rng.randrange(8000) for _ in range(30)]
        out = [rng.randrange(8000) for _ in range(30)]
        pairs.append((src, out))
    t0 = time.perf_counter()
    for src, out in pairs:
        loop_size(src, out)
    guard = (time.perf_counter() - t0) / len(pairs) * 1e6
    print(f"\nrepetition guard check (30-token source and output): {guard:.0f} us/sentence")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

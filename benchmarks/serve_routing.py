#!/usr/bin/env python
"""What routing across several models costs: ``seq2seq serve`` with three models against one
model serving its own pair alone, at the same load.

Servers (each a process on a free port of 127.0.0.1, torch engine, greedy search, ``--threads``):

- ``alone``: ``seq2seq serve A``;
- ``three``: ``seq2seq serve A --model B --model C`` (three models, each with its own batcher).

Loads (``--clients`` concurrent clients, each sending 1-3 sentences per ``POST /translate`` on
its own keep-alive connection for ``--seconds`` after a warm-up):

- ``alone``: every client asks for A's pair on the ``alone`` server;
- ``three/A``: the same clients, the same pair, on the ``three`` server: the cost of the
  routing itself (the pair looked up, the model held and released);
- ``three/spread``: the clients spread evenly over the three pairs on the ``three`` server: each
  model's batches are a third as full, and the models take turns on the engine thread.

Every answer is checked against its model translating the same sentences offline; ``--rounds``
repeats the three loads in a rotating order and the ratios are taken within each round.

The models: ``--models A B C`` (model directories of three different pairs), or by default three
tiny copy-task models of ``tests/factories.py`` (en-de, en-fr, en-es; 150 training steps each)
and its synthetic sentences: a model this small makes the server's own work, routing included,
the largest part of a request, so the ratio is a bound for larger models.

    python benchmarks/serve_routing.py --rounds 3 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing model or mirror
from serve_client import Connection, Server, percentile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def tiny_models(root: Path) -> list[Path]:
    from factories import make_model_dir

    pairs = ["en-de", "en-fr", "en-es"]
    return [
        make_model_dir(root / p, cfg_overrides=(f"data.pair={p}",), train_steps=150, seed=i)
        for i, p in enumerate(pairs, 1)
    ]


def sentences(n: int = 400) -> list[str]:
    from factories import synthetic_pairs

    return list(dict.fromkeys(s for s, _ in synthetic_pairs(n, seed=7)))


def wait_ready(port: int, timeout: float = 300) -> None:
    async def poll() -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            conn = Connection(port)
            try:
                status, _ = await conn.get("/ready")
            finally:
                conn.close()
            if status == 200:
                return
            await asyncio.sleep(0.1)
        raise needs.UserError(f"the server on port {port} did not get ready")

    asyncio.run(poll())


async def drive(port, src, want, pairs, *, clients, seconds, warmup, seed) -> dict:
    """``clients`` clients, client i asking for ``pairs[i % len(pairs)]``."""
    rng = random.Random(seed)
    latencies: list[float] = []
    counts = {"requests": 0, "sentences": 0, "errors": 0, "wrong": 0}
    t0 = time.perf_counter() + warmup
    end = t0 + seconds

    async def client(cid: int) -> None:
        source, target = pairs[cid % len(pairs)]
        conn = Connection(port)
        pos = rng.randrange(len(src))
        try:
            while time.perf_counter() < end:
                n = rng.randint(1, 3)
                q = [src[(pos + j) % len(src)] for j in range(n)]
                pos = (pos + n) % len(src)
                sent = time.perf_counter()
                try:
                    status, data = await asyncio.wait_for(
                        conn.post("/translate", {"q": q, "source": source, "target": target}), 120
                    )
                except (OSError, asyncio.TimeoutError, ValueError, ConnectionError):
                    status, data = 0, None
                    conn.close()
                if sent < t0:
                    continue
                counts["requests"] += 1
                if status != 200:
                    counts["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - sent)
                counts["sentences"] += n
                if data.get("translatedText") != [want[target][s] for s in q]:
                    counts["wrong"] += 1
        finally:
            conn.close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = min(time.perf_counter(), end) - t0
    return {
        **counts,
        "sentences_per_s": counts["sentences"] / elapsed,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs=3, metavar="DIR", help="three model directories (A B C)")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--rounds", type=int, default=3)
    # one thread: for models this small, two OpenMP threads on busy cores mostly wait for
    # each other (docs/benchmarks.md, "Routing across models")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    from seq2seq.decode import Translator

    tmp = tempfile.TemporaryDirectory(prefix="serve-routing-")
    dirs = [needs.model_dir(d) for d in args.models] if args.models else tiny_models(Path(tmp.name))
    src = sentences()
    translators = [Translator.load(d, method="greedy") for d in dirs]
    pairs = [t.directions[0] for t in translators]
    if len(set(pairs)) != 3:
        raise needs.UserError(f"the three models must translate three pairs, not {pairs}")
    # the server rejoins a text's sentences without their edge spaces (seq2seq.decode.paragraphs)
    want = {
        t.directions[0][1]: {s: x.strip() for s, x in zip(src, t.translate(src))}
        for t in translators
    }
    del translators
    servers = {
        "alone": Server(dirs[0], "torch", args.threads, ["--greedy"]),
        "three": Server(
            dirs[0],
            "torch",
            args.threads,
            ["--greedy", "--model", str(dirs[1]), "--model", str(dirs[2])],
        ),
    }
    try:
        for s in servers.values():
            wait_ready(s.port)
        loads = {
            "alone": (servers["alone"], [pairs[0]]),
            "three/A": (servers["three"], [pairs[0]]),
            "three/spread": (servers["three"], pairs),
        }
        names = list(loads)
        per_round: dict[str, list[dict]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                server, which = loads[name]
                result = asyncio.run(
                    drive(server.port, src, want, which, clients=args.clients,
                          seconds=args.seconds, warmup=args.warmup, seed=r)
                )  # fmt: skip
                per_round[name].append(result)
                print(f"round {r + 1} {name:>13}: {result['sentences_per_s']:.1f} sent/s, "
                      f"p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
                      f"errors {result['errors']}, wrong {result['wrong']}", flush=True)  # fmt: skip
    finally:
        for s in servers.values():
            s.stop()
        tmp.cleanup()

    print(f"\n{args.clients} clients, {args.seconds:.0f} s a load, {args.rounds} rounds, medians")
    print(f"{'load':>14}{'sent/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'vs alone':>10}  rounds")
    for name in names:
        rows = per_round[name]
        ratios = [
            row["sentences_per_s"] / a["sentences_per_s"]
            for row, a in zip(rows, per_round["alone"])
        ]
        med = {
            k: statistics.median(row[k] for row in rows)
            for k in ("sentences_per_s", "p50_ms", "p99_ms")
        }
        errors = sum(row["errors"] + row["wrong"] for row in rows)
        print(f"{name:>14}{med['sentences_per_s']:>10.1f}{med['p50_ms']:>9.0f}{med['p99_ms']:>9.0f}"
              f"{statistics.median(ratios):>10.3f}  {', '.join(f'{x:.3f}' for x in ratios)}"
              f"{'' if not errors else f'  ({errors} errors or wrong answers)'}")  # fmt: skip


if __name__ == "__main__":
    needs.run(main)

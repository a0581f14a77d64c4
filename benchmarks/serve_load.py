#!/usr/bin/env python
"""Load test of ``seq2seq serve``: throughput and latency under 1-128 concurrent clients, the
torch and CTranslate2 int8 engines side by side, with API keys and metrics on.

Starts servers on 127.0.0.1 (free ports) and drives each with N concurrent clients, each
sending Multi30K test_2016_flickr sentences, 1 to 3 per ``POST /translate`` request
(LibreTranslate's API) with an API key, one request after the other on its own keep-alive
connection. The servers of one run:

- ``torch`` and ``ct2``: ``--engine torch`` and the model directory's CTranslate2 export
  (``--engine ctranslate2``: int8 after ``make demo``), both with ``--api-keys`` (every client
  sends one of 8 keys, each with a limit of 100,000 per minute: counted, never reached) and
  metrics, at ``--levels``;
- ``ct2-bare``: the CTranslate2 server without keys and with ``--no-metrics``, at
  ``--overhead-levels`` (32): what key checking and metrics cost;
- ``ct2-one-lane`` (``--lanes 1``: one batch at a time), at ``--one-lane-levels``;
- ``torch-unbatched`` (``--no-batching``) and ``torch-continuous`` (``--continuous``), at
  ``--unbatched-levels`` and ``--continuous-levels`` (off unless given);
- offline: each engine translating the same sentences in batches in its own process (the
  ceiling: no HTTP, no waiting for requests).

Each level runs for ``--seconds`` (and at most ``--max-requests`` requests) after a short
warm-up; ``--rounds`` repeats every measurement in turn (the servers in a rotating order) and
reports medians, and every ratio is taken within a round (on a shared machine one minute can be
markedly slower than the next).
Every answer is checked against its engine's offline translation of its sentences: an HTTP
error, a timeout or a wrong translation counts as an error.

``--flood SECONDS``: on the ct2 server, ``--flood-clients`` clients with one key whose limit is
``--flood-limit`` per minute hammer it (from a process of their own) while 8 clients with other
keys translate; reports the 429s each key got and the other keys' p99 latency against the same
8 clients alone.
``--redis-levels`` (e.g. 32): a ``ct2-redis`` server, the ct2 server with ``--redis`` (keys and
rate-limit counts in a ``redis-server`` this script starts on a free port, nothing saved) in
place of the key file, at those levels beside ``ct2``; reports the latency Redis adds per
request (p50 and p99, ``ct2-redis`` minus ``ct2`` within a round).
``--redis-flood SECONDS`` (at most 50): two ct2 replicas sharing that Redis; ``--flood-clients``
clients with one key limited to ``--flood-limit`` per minute hammer both (from a process of
their own) while 8 clients with other keys translate, 4 on each replica; reports how many of
the flooding key's requests were admitted (exactly the limit: the flood lasts under a minute)
and the other keys' p99 against the same 8 clients on one replica without a flood.
``--soak SECONDS`` then runs ``--soak-clients`` clients on the ct2 server that long (keys and
metrics on) and reports the server's RSS (sampled every 10 s).

    python benchmarks/serve_load.py runs/demo/averaged --mirror $SEQ2SEQ_MIRROR --rounds 2
    python benchmarks/serve_load.py MODEL --levels "" --overhead-levels "" --rounds 1 --soak 600
    python benchmarks/serve_load.py MODEL --levels "" --overhead-levels "" --redis-levels 32 \
        --redis-flood 40 --flood-limit 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing model or mirror
from serve_client import Server, load, offline, read_test_source

N_KEYS = 8
LABELS = {
    "torch": "--engine torch, keys and metrics on",
    "ct2": "--engine ctranslate2, the held export, keys and metrics on",
    "ct2-bare": "--engine ctranslate2, no keys, --no-metrics",
    "ct2-one-lane": "--engine ctranslate2 --lanes 1 (one batch at a time), keys and metrics on",
    "torch-unbatched": "--engine torch --no-batching, keys and metrics on",
    "torch-continuous": "--engine torch --continuous, keys and metrics on",
    "ct2-redis": "--engine ctranslate2 --redis URL (keys and counts in Redis), metrics on",
}


def make_keys(store: list[str], n: int, req_limit: int | None = None) -> list[str]:
    """``n`` new keys (``seq2seq keys add``) in ``store`` (``["--db", FILE]`` or ``["--redis",
    URL]``), each with ``req_limit`` per minute."""
    keys = []
    for _ in range(n):
        cmd = [sys.executable, "-m", "seq2seq.cli", "keys", "add", *store]
        if req_limit:
            cmd += ["--req-limit", str(req_limit)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        keys.append(out.stdout.splitlines()[-1])
    return keys


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'clients':>8}{'sent/s':>10}{'range':>14}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
          f"{'requests':>10}{'errors':>8}{'wrong':>7}{'RSS MiB':>9}{'batch':>7}{'busy':>6}")  # fmt: skip
    # errors: HTTP errors (429 included), timeouts, broken connections; wrong: an answer that
    # is not the offline translation of its sentences
    for r in rows:
        spread = f"{min(r['rounds']):.1f}-{max(r['rounds']):.1f}"
        print(f"{r['clients']:>8}{r['sentences_per_s']:>10.1f}{spread:>14}{r['p50_ms']:>9.0f}"
              f"{r['p95_ms']:>9.0f}{r['p99_ms']:>9.0f}{r['requests']:>10}{r['errors']:>8}"
              f"{r['wrong']:>7}{r['rss_mib']:>9.0f}{r['mean_batch']:>7.1f}{r['engine_busy']:>6.0%}")  # fmt: skip
        for e in r["first_errors"]:
            print(f"{'':>8}  error: {e}")


def summarize(per_round: list[list[dict]]) -> list[dict]:
    """One row per level: medians over the rounds, counts summed."""
    rows = []
    for level in zip(*per_round):
        rows.append({
            "clients": level[0]["clients"],
            "sentences_per_s": statistics.median(r["sentences_per_s"] for r in level),
            "rounds": [r["sentences_per_s"] for r in level],
            "p50_ms": statistics.median(r["p50_ms"] for r in level),
            "p95_ms": statistics.median(r["p95_ms"] for r in level),
            "p99_ms": statistics.median(r["p99_ms"] for r in level),
            "requests": sum(r["requests"] for r in level),
            "errors": sum(r["errors"] for r in level),
            "wrong": sum(r["wrong"] for r in level),
            "rss_mib": max(r["rss_mib"] for r in level),
            "mean_batch": statistics.median(r["mean_batch"] for r in level),
            "engine_busy": statistics.median(r["engine_busy"] for r in level),
            "first_errors": [e for r in level for e in r["first_errors"]][:5],
        })  # fmt: skip
    return rows


def run_offline(args, folder: Path, engine: str, src_file: Path, out_file: Path) -> dict:
    cmd = [sys.executable, __file__, str(args.model_dir), "--threads", str(args.threads),
           "--child-offline", str(folder), engine, str(src_file), str(out_file)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"offline baseline failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path, help="model directory that holds a CTranslate2 export")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (offline and servers)")
    p.add_argument("--levels", default="1,8,32,128", help="clients, torch and ct2 servers")
    p.add_argument("--overhead-levels", default="32", help="clients, ct2 without keys/metrics")
    p.add_argument("--one-lane-levels", default="", help="clients, ct2 with --lanes 1")
    p.add_argument("--unbatched-levels", default="", help="clients, torch --no-batching")
    p.add_argument("--continuous-levels", default="", help="clients, torch --continuous")
    p.add_argument("--seconds", type=float, default=20, help="timed seconds per level")
    p.add_argument("--warmup", type=float, default=3, help="untimed seconds before each level")
    p.add_argument("--max-requests", type=int, default=20000, help="cap per level")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repeats (medians)")
    p.add_argument("--flood", type=float, default=0, help="seconds of the one-key flood")
    p.add_argument("--flood-clients", type=int, default=32)
    p.add_argument("--flood-limit", type=int, default=600, help="the flooding key's limit/min")
    p.add_argument("--redis-levels", default="", help="clients, ct2 with --redis (and ct2)")
    p.add_argument("--redis-flood", type=float, default=0,
                   help="seconds of the one-key flood on two replicas sharing Redis (<= 50)")  # fmt: skip
    p.add_argument("--soak", type=float, default=0, help="seconds of soak after the rounds")
    p.add_argument("--soak-clients", type=int, default=32)
    p.add_argument("--server-args", default="", help="extra `seq2seq serve` options")
    p.add_argument("--json", help="also write the numbers to this file")
    p.add_argument("--child-offline", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--child-flood", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child_offline:
        offline(*args.child_offline[:2], args.threads, *args.child_offline[2:])
        return
    try:  # the client loop costs less CPU on uvloop
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.child_flood:
        child_flood(args)
        return

    from seq2seq.serve.served_model import held_export

    needs.model_dir(args.model_dir)
    export = held_export(args.model_dir)
    if export is None:
        raise needs.UserError(
            f"{args.model_dir} holds no CTranslate2 export of its weights (make demo makes one: "
            f"seq2seq export {args.model_dir} --format ctranslate2 --quantization int8 --out "
            f"{args.model_dir}/export/ctranslate2-int8)"
        )
    src = read_test_source(args.model_dir, args.mirror, args.split)
    levels = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    if args.redis_flood > 50:
        raise needs.UserError("--redis-flood must be at most 50 s (the flood must fit a minute)")
    ct2_levels = sorted(set(levels(args.levels)) | set(levels(args.redis_levels)))
    redis = start_redis() if args.redis_levels or args.redis_flood else None
    extra = args.server_args.split()
    folders = {"torch": args.model_dir, "ctranslate2": export}
    results: dict = {"model": str(args.model_dir), "export": str(export), "threads": args.threads,
                     "sentences": len(src), "split": args.split, "rounds": args.rounds}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        db = Path(tmp) / "keys.db"
        keys = make_keys(["--db", str(db)], N_KEYS, 100_000)  # never reached: counted, not refused
        on = ["--api-keys", str(db), *extra]
        in_redis = ["--redis", redis.url, *extra] if redis else []
        redis_keys = make_keys(["--redis", redis.url], N_KEYS, 100_000) if redis else None
        # name -> (engine, server options, levels, the keys its clients send)
        plan = {
            "torch": ("torch", on, levels(args.levels), keys),
            "ct2": ("ctranslate2", on, ct2_levels, keys),
            "ct2-bare": ("ctranslate2", ["--no-metrics", *extra], levels(args.overhead_levels), None),
            "ct2-one-lane": ("ctranslate2", [*on, "--lanes", "1"], levels(args.one_lane_levels), keys),
            "torch-unbatched": ("torch", [*on, "--no-batching"], levels(args.unbatched_levels), keys),
            "torch-continuous": ("torch", [*on, "--continuous"], levels(args.continuous_levels), keys),
            "ct2-redis": ("ctranslate2", in_redis, levels(args.redis_levels), redis_keys),
        }  # fmt: skip
        plan = {k: v for k, v in plan.items()
                if v[2] or (k == "ct2" and (args.flood or args.soak))
                or (k == "ct2-redis" and args.redis_flood)}  # fmt: skip
        engines = sorted({v[0] for v in plan.values()})
        # Every server stays up for the whole run (an idle one costs memory, not CPU), so that
        # each round measures them one after the other.
        servers = {name: Server(args.model_dir, engine, args.threads, opts)
                   for name, (engine, opts, _lv, _k) in plan.items()}  # fmt: skip
        if args.redis_flood:  # the second replica of the flood
            servers["ct2-redis-2"] = Server(args.model_dir, "ctranslate2", args.threads, in_redis)
        for name, server in servers.items():
            print(f"  {name}: {server.engine_line}", flush=True)
        runs: dict = {name: [] for name in plan}
        offline_runs: dict = {e: [] for e in engines}
        want: dict = {}
        try:
            src_file, out_file = Path(tmp) / "src.txt", Path(tmp) / "hyp.json"
            src_file.write_text("".join(s + "\n" for s in src), encoding="utf-8")
            for rnd in range(args.rounds):
                for engine in engines:
                    off = run_offline(args, folders[engine], engine, src_file, out_file)
                    want[engine] = dict(zip(src, json.loads(out_file.read_text(encoding="utf-8"))))
                    offline_runs[engine].append(off)
                    print(f"  round {rnd + 1}: offline {engine} {off['sentences_per_s']:.1f} sent/s",
                          flush=True)  # fmt: skip
                # The servers take turns in a rotating order: none is always the one that runs
                # right after another's load.
                names = list(plan)
                shift = rnd % len(names)
                for name in names[shift:] + names[:shift]:
                    engine, _opts, run_levels, its_keys = plan[name]
                    rows = []
                    for clients in run_levels:
                        row = asyncio.run(load(
                            servers[name].port, src, want[engine], clients=clients,
                            seconds=args.seconds, warmup=args.warmup,
                            max_requests=args.max_requests, seed=clients + rnd,
                            key_of=(lambda c, k=its_keys: k[c % N_KEYS] if k else None)))  # fmt: skip
                        row["rss_mib"] = servers[name].rss_mib()
                        rows.append(row)
                        print(f"  round {rnd + 1}: {name} {clients:>3} clients: "
                              f"{row['sentences_per_s']:.1f} sent/s, p50 {row['p50_ms']:.0f} ms, "
                              f"p99 {row['p99_ms']:.0f} ms, errors {row['errors']}, wrong "
                              f"{row['wrong']}, engine busy {row['engine_busy']:.0%}, mean batch "
                              f"{row['mean_batch']:.1f}", flush=True)  # fmt: skip
                    runs[name].append(rows)
            if args.flood > 0:
                results["flood"] = flood(args, servers["ct2"], db, keys, src, want["ctranslate2"])
            if args.redis_flood > 0:
                results["redis_flood"] = redis_flood(
                    args, [servers["ct2-redis"], servers["ct2-redis-2"]], redis.url, redis_keys,
                    src, want["ctranslate2"])  # fmt: skip
            if args.soak > 0:
                results["soak"] = soak(args, servers["ct2"], keys, src, want["ctranslate2"])
        finally:
            for name, server in servers.items():
                code = server.stop()
                if code != 0:
                    print(f"  ({name} server exited with {code})\n" + "".join(server.log[-20:]))
            if redis is not None:
                redis.stop()

    report(args, results, plan, runs, offline_runs, len(src))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")


def flood(args, server: Server, db: Path, keys: list[str], src, want) -> dict:
    """One key floods; 8 clients with other keys translate, alone and then during the flood.

    The flooding clients run in a process of their own, as an abuser runs on a machine of its
    own: in this process they would share the measured clients' event loop, and every one of
    their 429s would delay the measured clients' answers here, not in the server.
    """
    (flooder,) = make_keys(["--db", str(db)], 1, args.flood_limit)
    common = dict(seconds=args.flood, warmup=args.warmup, max_requests=10**9)
    others = lambda c: keys[c % N_KEYS]  # noqa: E731
    alone = asyncio.run(load(server.port, src, want, clients=8, seed=5, key_of=others, **common))
    cmd = [sys.executable, __file__, str(args.model_dir), "--mirror", str(args.mirror),
           "--split", args.split, "--flood-clients", str(args.flood_clients), "--warmup", "0",
           "--child-flood", str(server.port), flooder, str(args.flood + args.warmup + 1)]  # fmt: skip
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "flooding":
        sys.exit(f"the flooding process failed (exit {child.wait()})")
    during = asyncio.run(load(server.port, src, want, clients=8, seed=5, key_of=others, **common))
    flooding = json.loads(child.stdout.read().strip().splitlines()[-1])
    if child.wait():
        sys.exit(f"the flooding process failed (exit {child.returncode})")
    out = {"alone": alone, "flooder": flooding, "others": during,
           "p99_ratio": during["p99_ms"] / alone["p99_ms"]}  # fmt: skip
    print(f"flood: the flooding key ({args.flood_clients} clients in another process, limit "
          f"{args.flood_limit}/min) got {flooding['limited']} 429s and {flooding['requests']} "
          f"answers; the other keys got {during['limited']} 429s, {during['errors']} errors, "
          f"{during['wrong']} wrong; their p99 {during['p99_ms']:.0f} ms during the flood against "
          f"{alone['p99_ms']:.0f} ms alone ({out['p99_ratio']:.2f}x), throughput "
          f"{during['sentences_per_s']:.1f} against {alone['sentences_per_s']:.1f} sent/s",
          flush=True)  # fmt: skip
    return out


def start_redis():
    """A ``redis-server`` on a free port (tests/redis_server.py), nothing saved to disk."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from redis_server import RedisServer, redis_server_binary

    binary = redis_server_binary()
    if binary is None:
        raise needs.UserError(
            "--redis-levels and --redis-flood need redis-server (apt-get install redis-server)"
        )
    return RedisServer(binary)


def redis_flood(args, servers: list[Server], url: str, keys: list[str], src, want) -> dict:
    """Two replicas sharing one Redis: one key floods both; 8 clients with other keys translate,
    first on one replica without a flood, then 4 on each during it."""
    (flooder,) = make_keys(["--redis", url], 1, args.flood_limit)
    common = dict(seconds=args.redis_flood, warmup=args.warmup, max_requests=10**9)
    others = lambda c: keys[c % N_KEYS]  # noqa: E731
    ports = [s.port for s in servers]
    alone = asyncio.run(load(ports[0], src, want, clients=8, seed=5, key_of=others, **common))
    cmd = [sys.executable, __file__, str(args.model_dir), "--mirror", str(args.mirror),
           "--split", args.split, "--flood-clients", str(args.flood_clients), "--warmup", "0",
           "--child-flood", ",".join(map(str, ports)), flooder,
           str(args.redis_flood + args.warmup + 1)]  # fmt: skip
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "flooding":
        sys.exit(f"the flooding process failed (exit {child.wait()})")
    during = asyncio.run(load(ports, src, want, clients=8, seed=5, key_of=others, **common))
    flooding = json.loads(child.stdout.read().strip().splitlines()[-1])
    if child.wait():
        sys.exit(f"the flooding process failed (exit {child.returncode})")
    admitted = flooding["requests"] - flooding["errors"]
    out = {"alone": alone, "flooder": flooding, "others": during, "flood_admitted": admitted,
           "flood_limit": args.flood_limit, "p99_ratio": during["p99_ms"] / alone["p99_ms"]}  # fmt: skip
    print(f"redis flood: two replicas sharing Redis; the flooding key ({args.flood_clients} "
          f"clients in another process, over both replicas, limit {args.flood_limit}/min, "
          f"{args.redis_flood + args.warmup + 1:.0f} s) was admitted {admitted} times and got "
          f"{flooding['limited']} 429s ({flooding['errors']} errors); the other keys (4 clients "
          f"on each replica) got {during['limited']} 429s, {during['errors']} errors, "
          f"{during['wrong']} wrong; their p99 {during['p99_ms']:.0f} ms during the flood against "
          f"{alone['p99_ms']:.0f} ms on one replica without it ({out['p99_ratio']:.2f}x), "
          f"throughput {during['sentences_per_s']:.1f} against {alone['sentences_per_s']:.1f} "
          f"sent/s", flush=True)  # fmt: skip
    return out


def child_flood(args) -> None:
    """``--child-flood PORTS KEY SECONDS``: ``--flood-clients`` clients with KEY over the
    comma-separated PORTS, unchecked."""
    port, key, seconds = args.child_flood
    src = read_test_source(args.model_dir, args.mirror, args.split)
    print("flooding", flush=True)
    row = asyncio.run(load([int(p) for p in port.split(",")], src, {}, clients=args.flood_clients, seconds=float(seconds),
                           warmup=0, max_requests=10**9, seed=6, key_of=lambda _c: key,
                           check=False))  # fmt: skip
    print(json.dumps(row), flush=True)


def soak(args, server: Server, keys: list[str], src, want) -> dict:
    """``--soak-clients`` clients for ``--soak`` seconds; the server's RSS every 10 s."""
    samples: list[tuple[float, float]] = [(0.0, server.rss_mib())]

    def sample(t: float) -> None:
        samples.append((t, server.rss_mib()))
        print(f"  soak {t:5.0f} s: RSS {samples[-1][1]:.1f} MiB", flush=True)

    row = asyncio.run(load(server.port, src, want, clients=args.soak_clients, seconds=args.soak,
                           max_requests=10**9, warmup=args.warmup, seed=1, on_tick=sample,
                           key_of=lambda c: keys[c % N_KEYS]))  # fmt: skip
    samples.append((row["seconds"], server.rss_mib()))
    first, last = samples[0][1], samples[-1][1]
    # Under load the RSS swings with the batch in flight; the growth that would be a leak is
    # the steady state's: the peak of the last minute against the first's (after warm-up).
    loaded = samples[1:]
    head = [x for t, x in loaded if t <= 60] or [loaded[0][1]]
    tail = [x for t, x in loaded if t >= row["seconds"] - 60] or [last]
    row.update(rss_start_mib=first, rss_end_mib=last, rss_max_mib=max(x for _, x in samples),
               rss_first_min_peak_mib=max(head), rss_last_min_peak_mib=max(tail),
               rss_steady_growth_pct=100 * (max(tail) - max(head)) / max(head),
               rss_samples=samples)  # fmt: skip
    print(f"soak: {row['clients']} clients for {row['seconds']:.0f} s, {row['requests']} "
          f"requests, {row['sentences_per_s']:.1f} sent/s, p99 {row['p99_ms']:.0f} ms, errors "
          f"{row['errors']}, wrong {row['wrong']}; RSS {first:.1f} MiB idle, peak of the first "
          f"minute {max(head):.1f}, of the last {max(tail):.1f} "
          f"({row['rss_steady_growth_pct']:+.2f}%)")  # fmt: skip
    return row


def report(args, results: dict, plan: dict, runs: dict, offline_runs: dict, n_src: int) -> None:
    """Print the tables and the ratios (each taken within a round, then the median)."""
    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "1 round"
    print(f"\nseq2seq serve load test: {args.model_dir} ({args.threads} threads), {n_src} "
          f"{args.split} sentences, 1-3 per request, {args.seconds:g} s per level, {rounds}")  # fmt: skip
    for engine, off in offline_runs.items():
        med = statistics.median(r["sentences_per_s"] for r in off)
        results[f"offline_{engine}"] = {"sentences_per_s": med, "rounds": off}
        print(f"offline batched translation, {engine}: {med:.1f} sentences/s")
    for name, rows in runs.items():
        if rows and rows[0]:
            results[name] = summarize(rows)
            print_table(f"server {name} ({LABELS[name]}):", results[name])
    ratios: dict = {}

    def at(name: str, rnd: int) -> dict:
        rows = runs.get(name) or []
        return {r["clients"]: r["sentences_per_s"] for r in rows[rnd]} if rows else {}

    for rnd in range(args.rounds):
        # the latency Redis adds per request: ct2-redis against ct2 (the key file) in a round
        with_file = {r["clients"]: r for r in (runs.get("ct2") or [[]] * (rnd + 1))[rnd]}
        for r in (runs.get("ct2-redis") or [[]] * (rnd + 1))[rnd]:
            if r["clients"] in with_file:
                for q in ("p50", "p99"):
                    added = r[f"{q}_ms"] - with_file[r["clients"]][f"{q}_ms"]
                    ratios.setdefault(f"redis_added_{q}_ms_{r['clients']}", []).append(added)
        torch_, ct2, bare = at("torch", rnd), at("ct2", rnd), at("ct2-bare", rnd)
        for c, v in ct2.items():
            if torch_.get(c):
                ratios.setdefault(f"ct2_over_torch_{c}", []).append(v / torch_[c])
            ratios.setdefault(f"ct2_of_offline_{c}", []).append(
                v / offline_runs["ctranslate2"][rnd]["sentences_per_s"]
            )
            if bare.get(c):
                ratios.setdefault(f"keys_metrics_cost_{c}", []).append(1 - v / bare[c])
            one = at("ct2-one-lane", rnd)
            if one.get(c):
                ratios.setdefault(f"ct2_over_one_lane_{c}", []).append(v / one[c])
        for c, v in torch_.items():
            ratios.setdefault(f"torch_of_offline_{c}", []).append(
                v / offline_runs["torch"][rnd]["sentences_per_s"]
            )
            for other in ("torch-unbatched", "torch-continuous"):
                o = at(other, rnd)
                if o.get(c):
                    ratios.setdefault(f"torch_over_{other}_{c}", []).append(v / o[c])
    results["ratios"] = ratios
    print()
    for name, each in ratios.items():
        shown = ", ".join(f"{x:.3f}" for x in each)
        print(f"{name}: {statistics.median(each):.3f} (rounds: {shown})")


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""Load test of ``seq2seq serve``: throughput and latency under 1-128 concurrent clients.

Starts the server on 127.0.0.1 (a free port) and drives it with N concurrent clients, each
sending Multi30K test_2016_flickr sentences, 1 to 3 per ``POST /translate`` request
(LibreTranslate's API), one request after the other on its own keep-alive connection. In the
same run, two baselines:

- offline: the same engine translating the same sentences in batches, in its own process
  (the ceiling: no HTTP, no waiting for requests);
- unbatched: the same server with ``--no-batching`` (one request at a time), at the same
  numbers of clients;
- continuous: the same server with ``--continuous`` (sentences join a running beam search
  between its steps instead of waiting for the next static batch), at
  ``--continuous-levels``.

Each level runs for ``--seconds`` (and at most ``--max-requests`` requests) after a short
warm-up; ``--rounds`` repeats offline, batched and unbatched measurements in turn and reports
medians, and every ratio is taken within a round (on a shared machine one minute can be
markedly slower than the next). Every answer is checked against the offline translation of its sentences: an HTTP
error, a timeout or a wrong translation counts as an error. ``--soak SECONDS`` then runs
``--soak-clients`` clients that long and reports the server's RSS (sampled every 10 s) at
the start and the end.

    python benchmarks/serve_load.py runs/demo/averaged --mirror $SEQ2SEQ_MIRROR
    python benchmarks/serve_load.py MODEL --levels "" --unbatched-levels "" --rounds 1 --soak 600

The clients are a minimal HTTP/1.1 client over asyncio streams (one process, uvloop if
installed), so that the load generator takes as little as possible of the CPU it shares with
the server. All traffic goes to 127.0.0.1; every loop is bounded in requests and time.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing model or mirror

HOST = "127.0.0.1"


# ---- the server process -----------------------------------------------------------------------


class Server:
    """``seq2seq serve`` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, model_dir: Path, engine: str, threads: int, extra: list[str]) -> None:
        cmd = [sys.executable, "-m", "seq2seq.cli", "serve", str(model_dir), "--engine", engine,
               "--host", HOST, "--port", "0", "--threads", str(threads), "--no-access-log",
               *extra]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.log: list[str] = []
        self.port = self._wait_for_port(timeout=300)
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for_port(self, timeout: float) -> int:
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        for line in self.proc.stdout:
            self.log.append(line)
            if m := re.search(r"on http://127\.0\.0\.1:(\d+)", line):
                return int(m.group(1))
            if time.monotonic() > end:
                break
        self.proc.kill()
        sys.exit("the server did not start:\n" + "".join(self.log[-40:]))

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


# ---- a minimal HTTP/1.1 keep-alive client -------------------------------------------------------


class Connection:
    """One keep-alive connection; ``post(path, body)`` -> (status, parsed JSON body)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict) -> tuple[int, object]:
        body = json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
        return await self._send(head.encode() + body)

    async def get(self, path: str) -> tuple[int, object]:
        return await self._send(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n\r\n".encode())

    async def _send(self, request: bytes) -> tuple[int, object]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        self.writer.write(request)
        assert self.reader is not None
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        data = json.loads(await self.reader.readexactly(length)) if length else None
        if close:
            self.close()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


async def load(
    port: int,
    src: list[str],
    want: dict[str, str],
    *,
    clients: int,
    seconds: float,
    max_requests: int,
    warmup: float,
    seed: int,
    on_tick=None,
) -> dict:
    """``clients`` concurrent clients for ``seconds`` (after ``warmup``); counts and latency."""
    rng = random.Random(seed)
    latencies: list[float] = []
    counts = {"requests": 0, "sentences": 0, "errors": 0, "wrong": 0}
    errors: list[str] = []
    start = time.perf_counter()
    t0 = start + warmup
    end = t0 + seconds
    issued = 0

    async def client(cid: int) -> None:
        nonlocal issued
        conn = Connection(port)
        pos = rng.randrange(len(src))
        try:
            while time.perf_counter() < end and issued < max_requests:
                issued += 1
                n = rng.randint(1, 3)
                q = [src[(pos + j) % len(src)] for j in range(n)]
                pos = (pos + n) % len(src)
                sent = time.perf_counter()
                try:
                    status, data = await asyncio.wait_for(
                        conn.post("/translate", {"q": q, "source": SOURCE, "target": TARGET}),
                        timeout=120,
                    )
                    ok = status == 200
                    if not ok:
                        errors.append(f"HTTP {status}: {data}")
                except (OSError, asyncio.TimeoutError, ValueError, ConnectionError) as e:
                    ok, data = False, None
                    errors.append(f"{type(e).__name__}: {e}")
                    conn.close()
                done = time.perf_counter()
                if sent < t0:
                    continue  # warm-up
                counts["requests"] += 1
                if not ok:
                    counts["errors"] += 1
                    continue
                counts["sentences"] += n
                latencies.append(done - sent)
                got = data.get("translatedText") if isinstance(data, dict) else None
                if got != [want[s] for s in q]:
                    counts["wrong"] += 1
        finally:
            conn.close()

    async def engine_stats() -> dict:
        """The server's counters (GET /health) at the start of the timed window."""
        await asyncio.sleep(max(t0 - time.perf_counter(), 0))
        conn = Connection(port)
        try:
            return (await conn.get("/health"))[1]
        finally:
            conn.close()

    stats_at_start = asyncio.create_task(engine_stats())
    ticker = None
    if on_tick is not None:

        async def tick() -> None:
            while time.perf_counter() < end:
                await asyncio.sleep(10)
                on_tick(time.perf_counter() - t0)

        ticker = asyncio.create_task(tick())
    await asyncio.gather(*(client(i) for i in range(clients)))
    if ticker is not None:
        ticker.cancel()
    elapsed = min(time.perf_counter(), end) - t0
    first = await stats_at_start
    conn = Connection(port)
    last = (await conn.get("/health"))[1]
    conn.close()
    batches = last["batches"] - first["batches"]
    steps = last["stream_steps"] - first["stream_steps"]
    # the share of the window the engine worker spent translating, and its mean batch: the
    # sentences in the continuous search per step, or else per static batch
    mean = ((last["stream_rows"] - first["stream_rows"]) / steps if steps
            else (last["sentences"] - first["sentences"]) / max(batches, 1))  # fmt: skip
    engine = {"engine_busy": (last["busy_seconds"] - first["busy_seconds"]) / elapsed,
              "mean_batch": mean}  # fmt: skip
    return {
        "clients": clients,
        "seconds": elapsed,
        **counts,
        **engine,
        "sentences_per_s": counts["sentences"] / elapsed,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p95_ms": 1000 * percentile(latencies, 95),
        "p99_ms": 1000 * percentile(latencies, 99),
        "first_errors": errors[:5],
    }


# ---- the offline baseline (its own process) ----------------------------------------------------


def offline(model_dir: str, engine: str, threads: int, src_file: str, out_file: str) -> None:
    import torch

    from seq2seq.decode.translator import Translator

    torch.set_num_threads(threads)
    src = Path(src_file).read_text(encoding="utf-8").split("\n")[:-1]
    translator = Translator.load(model_dir, engine=engine)
    translator.translate(src[:16])  # warm-up, as the server's
    start = time.perf_counter()
    hyps = translator.translate(src)
    seconds = time.perf_counter() - start
    Path(out_file).write_text(json.dumps(hyps), encoding="utf-8")
    print(json.dumps({"sentences_per_s": len(src) / seconds, "seconds": seconds}))


# ---- main --------------------------------------------------------------------------------------

SOURCE, TARGET = "en", "de"  # set from the model's data.pair


def read_test_source(model_dir: Path, mirror: str | None, split: str) -> list[str]:
    from seq2seq.config.loading import load_config

    mirror = needs.mirror(mirror)
    cfg = load_config(model_dir / "config.yaml")
    src_lang, tgt_lang = cfg.data.pair.split("-")
    global SOURCE, TARGET
    SOURCE, TARGET = src_lang, tgt_lang
    # A mirror root holds one folder per source (multi30k/); a Multi30K mirror is that folder.
    rel = Path("data") / "task1" / "raw" / f"{split}.{src_lang}.gz"
    path = Path(mirror) / "multi30k" / rel
    if not path.is_file():
        path = Path(mirror) / rel
    if not path.is_file():
        raise needs.UserError(f"the mirror {mirror} has no multi30k/{rel}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'clients':>8}{'sent/s':>10}{'range':>14}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
          f"{'requests':>10}{'errors':>8}{'wrong':>7}{'RSS MiB':>9}{'batch':>7}{'busy':>6}")  # fmt: skip
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


def run_offline(args, src_file: Path, out_file: Path) -> dict:
    cmd = [sys.executable, __file__, str(args.model_dir), "--threads", str(args.threads),
           "--child-offline", str(args.model_dir), args.engine, str(src_file), str(out_file)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"offline baseline failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path, help="model directory (or export folder, --engine)")
    p.add_argument("--engine", default="torch", choices=["torch", "ctranslate2", "onnx"])
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (offline and servers)")
    p.add_argument("--server-threads", type=int, help="the servers' threads (default: --threads)")
    p.add_argument("--levels", default="1,8,32,128", help="numbers of concurrent clients")
    p.add_argument("--unbatched-levels", default="1,8,32", help="levels of the unbatched server")
    p.add_argument("--continuous-levels", default="32", help="levels of the --continuous server")
    p.add_argument("--seconds", type=float, default=20, help="timed seconds per level")
    p.add_argument("--warmup", type=float, default=3, help="untimed seconds before each level")
    p.add_argument("--max-requests", type=int, default=20000, help="cap per level")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repeats (medians)")
    p.add_argument("--soak", type=float, default=0, help="seconds of soak after the rounds")
    p.add_argument("--soak-clients", type=int, default=32)
    p.add_argument("--server-args", default="", help="extra `seq2seq serve` options")
    p.add_argument("--json", help="also write the numbers to this file")
    p.add_argument("--child-offline", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child_offline:
        offline(*args.child_offline[:2], args.threads, *args.child_offline[2:])
        return
    try:  # the client loop costs less CPU on uvloop
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    if args.engine == "torch":
        needs.model_dir(args.model_dir)
    src = read_test_source(args.model_dir, args.mirror, args.split)
    levels = [int(x) for x in args.levels.split(",") if x]
    unbatched_levels = [int(x) for x in args.unbatched_levels.split(",") if x]
    continuous_levels = [int(x) for x in args.continuous_levels.split(",") if x]
    results: dict = {"model": str(args.model_dir), "engine": args.engine, "threads": args.threads,
                     "sentences": len(src), "split": args.split, "rounds": args.rounds}  # fmt: skip
    extra = args.server_args.split()
    server_threads = args.server_threads or args.threads
    results["server_threads"] = server_threads
    offline_runs, batched, unbatched, continuous = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        src_file, out_file = Path(tmp) / "src.txt", Path(tmp) / "hyp.json"
        src_file.write_text("".join(s + "\n" for s in src), encoding="utf-8")
        # Both servers stay up for the whole run (an idle one costs memory, not CPU), so that
        # each round measures offline, batched and unbatched one after the other.
        servers = {"batched": Server(args.model_dir, args.engine, server_threads, extra)}
        if unbatched_levels:
            servers["unbatched"] = Server(
                args.model_dir, args.engine, server_threads, [*extra, "--no-batching"]
            )
        if continuous_levels:
            servers["continuous"] = Server(
                args.model_dir, args.engine, server_threads, [*extra, "--continuous"]
            )
        try:
            want: dict[str, str] = {}
            for rnd in range(args.rounds):
                off = run_offline(args, src_file, out_file)
                hyps = json.loads(out_file.read_text(encoding="utf-8"))
                if want and [want[s] for s in src] != hyps:
                    print("  (note: the offline translations changed between rounds)")
                want = dict(zip(src, hyps))
                offline_runs.append(off)
                print(f"  round {rnd + 1}: offline {off['sentences_per_s']:.1f} sent/s", flush=True)
                for name, run_levels, out in (("batched", levels, batched),
                                              ("unbatched", unbatched_levels, unbatched),
                                              ("continuous", continuous_levels, continuous)):  # fmt: skip
                    rows = []
                    for clients in run_levels:
                        row = asyncio.run(load(servers[name].port, src, want, clients=clients,
                                               seconds=args.seconds, warmup=args.warmup,
                                               max_requests=args.max_requests, seed=clients + rnd))  # fmt: skip
                        row["rss_mib"] = servers[name].rss_mib()
                        rows.append(row)
                        print(f"  round {rnd + 1}: {name} {clients:>3} clients: "
                              f"{row['sentences_per_s']:.1f} sent/s, p50 {row['p50_ms']:.0f} ms, "
                              f"errors {row['errors']}, wrong {row['wrong']}, engine busy "
                              f"{row['engine_busy']:.0%}, mean batch {row['mean_batch']:.1f}",
                              flush=True)  # fmt: skip
                    out.append(rows)
            if args.soak > 0:
                server = servers["batched"]
                samples: list[tuple[float, float]] = [(0.0, server.rss_mib())]

                def sample(t: float) -> None:
                    samples.append((t, server.rss_mib()))
                    print(f"  soak {t:5.0f} s: RSS {samples[-1][1]:.1f} MiB", flush=True)

                row = asyncio.run(load(server.port, src, want, clients=args.soak_clients,
                                       seconds=args.soak, max_requests=10**9, warmup=args.warmup,
                                       seed=1, on_tick=sample))  # fmt: skip
                samples.append((row["seconds"], server.rss_mib()))
                first, last = samples[0][1], samples[-1][1]
                # Under load the RSS swings with the batch in flight; the growth that would be a
                # leak is the steady state's: the peak of the last minute against the first's.
                loaded = samples[1:]
                head = [x for t, x in loaded if t <= 60] or [loaded[0][1]]
                tail = [x for t, x in loaded if t >= row["seconds"] - 60] or [last]
                row.update(rss_start_mib=first, rss_end_mib=last,
                           rss_max_mib=max(x for _, x in samples),
                           rss_growth_pct=100 * (last - first) / first,
                           rss_first_min_peak_mib=max(head), rss_last_min_peak_mib=max(tail),
                           rss_steady_growth_pct=100 * (max(tail) - max(head)) / max(head),
                           rss_samples=samples)  # fmt: skip
                results["soak"] = row
        finally:
            for name, server in servers.items():
                code = server.stop()
                if code != 0:
                    print(f"  ({name} server exited with {code})\n" + "".join(server.log[-20:]))

    off = statistics.median(r["sentences_per_s"] for r in offline_runs)
    results["offline"] = {"sentences_per_s": off, "rounds": offline_runs}
    results["batched"] = summarize(batched) if levels else []
    results["unbatched"] = summarize(unbatched) if unbatched_levels else []
    results["continuous"] = summarize(continuous) if continuous_levels else []
    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "1 round"
    print(f"\nseq2seq serve load test: {args.model_dir} ({args.engine}, {args.threads} threads"
          f"{'' if server_threads == args.threads else f', the servers {server_threads}'}), "
          f"{len(src)} {args.split} sentences, 1-3 per request, {args.seconds:g} s per level, "
          f"{rounds}")  # fmt: skip
    spread = [r["sentences_per_s"] for r in offline_runs]
    print(f"offline batched translation (the ceiling): {off:.1f} sentences/s "
          f"(range {min(spread):.1f}-{max(spread):.1f})")  # fmt: skip
    if results["batched"]:
        print_table("server, dynamic batching:", results["batched"])
    if results["unbatched"]:
        print_table("server, --no-batching (one request at a time):", results["unbatched"])
    if results["continuous"]:
        print_table("server, --continuous (continuous batching):", results["continuous"])
    ratios = {}
    for rnd in range(args.rounds):  # ratios within a round, then the median
        b = {r["clients"]: r["sentences_per_s"] for r in batched[rnd]} if levels else {}
        u = {r["clients"]: r["sentences_per_s"] for r in unbatched[rnd]} if unbatched_levels else {}
        st = (
            {r["clients"]: r["sentences_per_s"] for r in continuous[rnd]}
            if continuous_levels
            else {}
        )
        o = offline_runs[rnd]["sentences_per_s"]
        for c, v in b.items():
            ratios.setdefault(f"offline_{c}", []).append(v / o)
            if u.get(c):  # a level too short to answer one request has no ratio
                ratios.setdefault(f"unbatched_{c}", []).append(v / u[c])
            if st.get(c):
                ratios.setdefault(f"continuous_{c}", []).append(v / st[c])
    results["ratios"] = ratios
    for c in levels:
        line = f"\nat {c} clients: " if c == 32 else f"at {c} clients: "
        each = ratios.get(f"offline_{c}", [])
        line += f"{statistics.median(each):.0%} of offline throughput ({', '.join(f'{x:.0%}' for x in each)})"
        if f"unbatched_{c}" in ratios:
            each = ratios[f"unbatched_{c}"]
            line += f", {statistics.median(each):.1f}x the unbatched server ({', '.join(f'{x:.1f}' for x in each)})"
        if f"continuous_{c}" in ratios:
            each = ratios[f"continuous_{c}"]
            line += f", {statistics.median(each):.2f}x the continuous server ({', '.join(f'{x:.2f}' for x in each)})"
        print(line)
    if "soak" in results:
        s = results["soak"]
        print(f"soak: {s['clients']} clients for {s['seconds']:.0f} s, {s['requests']} requests, "
              f"{s['sentences_per_s']:.1f} sent/s, p99 {s['p99_ms']:.0f} ms, errors {s['errors']}, "
              f"wrong {s['wrong']}; server RSS {s['rss_start_mib']:.1f} -> {s['rss_end_mib']:.1f} MiB "
              f"({s['rss_growth_pct']:+.2f}% from the idle server, max {s['rss_max_mib']:.1f}); "
              f"under load, peak of the last minute {s['rss_last_min_peak_mib']:.1f} against the "
              f"first minute's {s['rss_first_min_peak_mib']:.1f} MiB "
              f"({s['rss_steady_growth_pct']:+.2f}%)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""Load test of ``seq2seq serve``: throughput and latency under 1-128 concurrent clients.

Starts the server on 127.0.0.1 (a free port) and drives it with N concurrent clients, each
sending Multi30K test_2016_flickr sentences, 1 to 3 per ``POST /translate`` request
(LibreTranslate's API), one request after the other on its own keep-alive connection. In the
same run, two baselines:

- offline: the same engine translating the same sentences in batches, in its own process
  (the ceiling: no HTTP, no waiting for requests);
- unbatched: the same server with ``--no-batching`` (one request at a time), at the same
  numbers of clients.

Each level runs for ``--seconds`` (and at most ``--max-requests`` requests) after a short
warm-up. Every answer is checked against the offline translation of its sentences: an HTTP
error, a timeout or a wrong translation counts as an error. ``--soak SECONDS`` then runs
``--soak-clients`` clients that long and reports the server's RSS (sampled every 10 s) at
the start and the end.

    python benchmarks/serve_load.py /work/models/demo/averaged --mirror ../shared/data/multi30k
    python benchmarks/serve_load.py MODEL --levels 32 --soak 600

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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        body = json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
        self.writer.write(head.encode() + body)
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
    return {
        "clients": clients,
        "seconds": elapsed,
        **counts,
        "sentences_per_s": counts["sentences"] / elapsed,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p95_ms": 1000 * percentile(latencies, 95),
        "p99_ms": 1000 * percentile(latencies, 99),
        "first_errors": errors[:5],
    }


# ---- the offline baseline (its own process) ----------------------------------------------------


def offline(model_dir: str, engine: str, threads: int, src_file: str, out_file: str) -> None:
    import torch

    from seq2seq.translate import Translator

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
    from seq2seq.config import load_config

    cfg = load_config(model_dir / "config.yaml")
    src_lang, tgt_lang = cfg.data.pair.split("-")
    global SOURCE, TARGET
    SOURCE, TARGET = src_lang, tgt_lang
    if not mirror:
        sys.exit("give --mirror DIR (or SEQ2SEQ_MIRROR): the Multi30K mirror")
    path = Path(mirror) / "data" / "task1" / "raw" / f"{split}.{src_lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'clients':>8}{'sent/s':>10}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}"
          f"{'requests':>10}{'errors':>8}{'wrong':>7}")  # fmt: skip
    for r in rows:
        print(f"{r['clients']:>8}{r['sentences_per_s']:>10.1f}{r['p50_ms']:>10.0f}"
              f"{r['p95_ms']:>10.0f}{r['p99_ms']:>10.0f}{r['requests']:>10}"
              f"{r['errors']:>8}{r['wrong']:>7}")  # fmt: skip
        for e in r["first_errors"]:
            print(f"{'':>8}  error: {e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path, help="model directory (or export folder, --engine)")
    p.add_argument("--engine", default="torch", choices=["torch", "ctranslate2", "onnx"])
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--levels", default="1,8,32,128", help="numbers of concurrent clients")
    p.add_argument("--unbatched-levels", default="1,8,32", help="levels of the unbatched run")
    p.add_argument("--seconds", type=float, default=30, help="timed seconds per level")
    p.add_argument("--warmup", type=float, default=3, help="untimed seconds before each level")
    p.add_argument("--max-requests", type=int, default=20000, help="cap per level")
    p.add_argument("--soak", type=float, default=0, help="seconds of soak after the levels")
    p.add_argument("--soak-clients", type=int, default=32)
    p.add_argument("--skip-levels", action="store_true", help="only the soak")
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

    src = read_test_source(args.model_dir, args.mirror, args.split)
    levels = [int(x) for x in args.levels.split(",") if x]
    unbatched_levels = [int(x) for x in args.unbatched_levels.split(",") if x]
    results: dict = {"model": str(args.model_dir), "engine": args.engine, "threads": args.threads,
                     "sentences": len(src), "split": args.split}  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        src_file, out_file = Path(tmp) / "src.txt", Path(tmp) / "hyp.json"
        src_file.write_text("".join(s + "\n" for s in src), encoding="utf-8")
        cmd = [sys.executable, __file__, str(args.model_dir), "--threads", str(args.threads),
               "--child-offline", str(args.model_dir), args.engine, str(src_file), str(out_file)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode:
            sys.exit(f"offline baseline failed:\n{out.stderr[-3000:]}")
        results["offline"] = json.loads(out.stdout.strip().splitlines()[-1])
        want = dict(zip(src, json.loads(out_file.read_text(encoding="utf-8"))))
    off = results["offline"]["sentences_per_s"]
    print(f"offline: {off:.1f} sentences/s ({len(src)} sentences, {args.engine}, "
          f"{args.threads} threads)", flush=True)  # fmt: skip

    extra = args.server_args.split()
    runs = [("batched", extra, levels)]
    if unbatched_levels and not args.skip_levels:
        runs.append(("unbatched", [*extra, "--no-batching"], unbatched_levels))
    if args.skip_levels:
        runs = [("batched", extra, [])]
    for name, server_args, run_levels in runs:
        server = Server(args.model_dir, args.engine, args.threads, server_args)
        rows = []
        try:
            for clients in run_levels:
                row = asyncio.run(load(server.port, src, want, clients=clients,
                                       seconds=args.seconds, max_requests=args.max_requests,
                                       warmup=args.warmup, seed=clients))  # fmt: skip
                row["rss_mib"] = server.rss_mib()
                rows.append(row)
                print(f"  {name} {clients:>3} clients: {row['sentences_per_s']:.1f} sent/s, "
                      f"p50 {row['p50_ms']:.0f} ms, errors {row['errors']}, wrong {row['wrong']}",
                      flush=True)  # fmt: skip
            results[name] = rows
            if name == "batched" and args.soak > 0:
                samples: list[tuple[float, float]] = [(0.0, server.rss_mib())]

                def sample(t: float, server=server, samples=samples) -> None:
                    samples.append((t, server.rss_mib()))
                    print(f"  soak {t:5.0f} s: RSS {samples[-1][1]:.1f} MiB", flush=True)

                row = asyncio.run(load(server.port, src, want, clients=args.soak_clients,
                                       seconds=args.soak, max_requests=10**9, warmup=args.warmup,
                                       seed=1, on_tick=sample))  # fmt: skip
                samples.append((row["seconds"], server.rss_mib()))
                first, last = samples[0][1], samples[-1][1]
                row.update(rss_start_mib=first, rss_end_mib=last,
                           rss_max_mib=max(s for _, s in samples),
                           rss_growth_pct=100 * (last - first) / first, rss_samples=samples)  # fmt: skip
                results["soak"] = row
        finally:
            code = server.stop()
            if code != 0:
                print(f"  (server exited with {code})\n" + "".join(server.log[-20:]))

    print(f"\nseq2seq serve load test: {args.model_dir} ({args.engine}, {args.threads} threads), "
          f"{len(src)} {args.split} sentences, 1-3 per request, {args.seconds:g} s per level")  # fmt: skip
    print(f"offline batched translation (the ceiling): {off:.1f} sentences/s")
    if "batched" in results and results["batched"]:
        print_table("server, dynamic batching:", results["batched"])
    if "unbatched" in results:
        print_table("server, --no-batching (one request at a time):", results["unbatched"])
    by = {r["clients"]: r for r in results.get("batched", [])}
    unb = {r["clients"]: r for r in results.get("unbatched", [])}
    if 32 in by:
        print(f"\nat 32 clients: {by[32]['sentences_per_s'] / off:.0%} of offline throughput",
              end="")  # fmt: skip
        if 32 in unb:
            print(f", {by[32]['sentences_per_s'] / unb[32]['sentences_per_s']:.1f}x the "
                  "unbatched server", end="")  # fmt: skip
        print()
    if "soak" in results:
        s = results["soak"]
        print(f"soak: {s['clients']} clients for {s['seconds']:.0f} s, {s['requests']} requests, "
              f"{s['sentences_per_s']:.1f} sent/s, errors {s['errors']}, wrong {s['wrong']}; "
              f"RSS {s['rss_start_mib']:.1f} -> {s['rss_end_mib']:.1f} MiB "
              f"({s['rss_growth_pct']:+.2f}%, max {s['rss_max_mib']:.1f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

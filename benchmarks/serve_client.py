"""The pieces of ``benchmarks/serve_load.py``: the server process, a minimal HTTP/1.1 keep-alive
client, the load loop and the offline baseline.

The clients are a minimal HTTP/1.1 client over asyncio streams (one process, uvloop if
installed), so that the load generator takes as little as possible of the CPU it shares with
the server. All traffic goes to 127.0.0.1; every loop is bounded in requests and time.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import needs  # this folder: one line and exit 2 for a missing model or mirror

HOST = "127.0.0.1"
LANGS = {"source": "en", "target": "de"}  # set from the model's data.pair (read_test_source)


# ---- the server process -----------------------------------------------------------------------


class Server:
    """``seq2seq serve`` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, model_dir: Path, engine: str, threads: int, extra: list[str]) -> None:
        cmd = [sys.executable, "-m", "seq2seq.cli", "serve", str(model_dir), "--engine", engine,
               "--host", HOST, "--port", "0", "--threads", str(threads), "--no-access-log",
               *extra]  # fmt: skip
        self.engine_line = ""
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
                self.engine_line = line.strip()
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
    port: int | list[int],
    src: list[str],
    want: dict[str, str],
    *,
    clients: int,
    seconds: float,
    max_requests: int,
    warmup: float,
    seed: int,
    on_tick=None,
    key_of: Callable[[int], str | None] = lambda _cid: None,
    check: bool = True,
) -> dict:
    """``clients`` concurrent clients for ``seconds`` (after ``warmup``); counts and latency.

    ``key_of(client)``: the API key client number ``client`` sends (None: none). ``check``:
    False for a flood, whose 429 answers are expected (counted as ``limited``, not errors).
    Several ports (replicas): client number ``c`` talks to ``port[c % len(port)]``; the engine
    columns are the first replica's.
    """
    ports = port if isinstance(port, list) else [port]
    port = ports[0]
    rng = random.Random(seed)
    latencies: list[float] = []
    counts = {"requests": 0, "sentences": 0, "errors": 0, "wrong": 0, "limited": 0}
    errors: list[str] = []
    start = time.perf_counter()
    t0 = start + warmup
    end = t0 + seconds
    issued = 0

    async def client(cid: int) -> None:
        nonlocal issued
        conn = Connection(ports[cid % len(ports)])
        key = key_of(cid)
        extra = {"api_key": key} if key else {}
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
                        conn.post("/translate", {"q": q, **LANGS, **extra}),
                        timeout=120,
                    )
                    ok = status == 200
                    if status == 429:
                        counts["limited"] += 1 if sent >= t0 else 0
                        continue
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
                if check and got != [want[s] for s in q]:
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
    """Translate ``src_file`` in batches with ``engine`` and print sentences/s (JSON)."""
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


def read_test_source(model_dir: Path, mirror: str | None, split: str) -> list[str]:
    """The Multi30K ``split`` source sentences of the model's pair (sets :data:`LANGS`)."""
    from seq2seq.config.loading import load_config

    mirror = needs.mirror(mirror)
    cfg = load_config(model_dir / "config.yaml")
    src_lang, tgt_lang = cfg.data.pair.split("-")
    LANGS.update(source=src_lang, target=tgt_lang)
    # A mirror root holds one folder per source (multi30k/); a Multi30K mirror is that folder.
    rel = Path("data") / "task1" / "raw" / f"{split}.{src_lang}.gz"
    path = Path(mirror) / "multi30k" / rel
    if not path.is_file():
        path = Path(mirror) / rel
    if not path.is_file():
        raise needs.UserError(f"the mirror {mirror} has no multi30k/{rel}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]

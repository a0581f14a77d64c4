#!/usr/bin/env python
"""What API keys and metrics cost a request of ``seq2seq serve``, in microseconds.

``serve_load.py`` measures the cost end to end (the CTranslate2 server with keys and metrics
against one with neither), and a 3% target sits within the noise of a shared 2-core machine, so
this times the parts alone, in one process, with no HTTP, each call timed on its own with a
millisecond's pause between calls (as requests arrive):

- the key check, :meth:`seq2seq.serve.state_local.LocalState.check` (what
  :meth:`seq2seq.serve.access.Access.admit` awaits without Redis) with 8 keys in an SQLite key file
  (each key's limit high enough never to refuse), as served (the file checked at most once a
  second, ``KeyTable(max_age_s=1)``) and with the file checked at every lookup
  (``max_age_s=0``);
- the metrics the app counts for one request (the per-key counter, the route counter and the
  latency histogram);
- where the ``limits`` library is installed, its in-memory moving window (what
  :mod:`seq2seq.serve.access` counted with before its own :class:`MovingWindow`), for
  comparison.

With ``--redis``, also the whole admission (:meth:`seq2seq.serve.access.Access.admit`: key
check and rate-limit count) awaited on an event loop as the server awaits it, with keys in
the key file and memory (no ``--redis``) and with keys and counts in a ``redis-server`` this
script starts on a free port (one Lua script per admission), one at a time and 32 at once (32
clients' requests arriving together; each admission timed from its start to its end).

Each is timed alone and then with a busy pure-Python thread beside it, as the server's batch
threads are while they tokenize and detokenize: a call that releases the GIL (a system call, an
SQLite query) may then wait for that thread's switch interval (5 ms) to get it back.

    python benchmarks/serve_overhead.py
    python benchmarks/serve_overhead.py --redis --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a user mistake

from seq2seq.serve.access import Access, MovingWindow
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.keys import KeyStore, KeyTable
from seq2seq.serve.metrics import ServerMetrics
from seq2seq.serve.state_local import LocalState


def timings_us(fn, n: int) -> list[float]:
    """``fn(i)`` for i < n, each call timed alone (µs), a millisecond apart."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1e6)
        time.sleep(0.001)
    return sorted(out)


def admission_timings_us(access: Access, keys: list[str], n: int, at_once: int) -> list[float]:
    """``n`` admissions awaited on a fresh event loop, ``at_once`` concurrently (each batch a
    millisecond after the last), each timed from its start to its end (µs)."""

    async def one(i: int) -> float:
        start = time.perf_counter()
        await access.admit(keys[i % len(keys)], "127.0.0.1")
        return (time.perf_counter() - start) * 1e6

    async def run() -> list[float]:
        await access.state.start()
        try:
            for i in range(at_once):  # connect (Redis' pool opens up to at_once connections)
                await one(i)
            out: list[float] = []
            for b in range(max(1, n // at_once)):
                out += await asyncio.gather(*(one(b * at_once + j) for j in range(at_once)))
                await asyncio.sleep(0.001)
            return sorted(out)
        finally:
            await access.state.close()

    return asyncio.run(run())


class Busy:
    """A thread that runs pure Python until stopped (it wants the GIL all the time)."""

    def __enter__(self) -> Busy:
        self.stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()
        return self

    def _spin(self) -> None:
        x = 0
        while not self.stop:
            for i in range(1000):
                x += i

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.thread.join()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=500, help="timed calls per row")
    p.add_argument("--redis", action="store_true", help="also time admissions with Redis")
    args = p.parse_args()
    if args.calls < 10:
        raise needs.UserError("--calls must be at least 10")

    with tempfile.TemporaryDirectory(prefix="serve-overhead-") as tmp:
        db = Path(tmp) / "keys.db"
        store = KeyStore(db, create=True)
        keys = [store.add(10**9) for _ in range(8)]
        served = LocalState(ServeConfig(api_keys=str(db)))
        every = LocalState(ServeConfig(api_keys=str(db)))
        every.keys = KeyTable(db, max_age_s=0)
        metrics = ServerMetrics(queued=lambda: 0)
        window = MovingWindow()

        def counted(i: int) -> None:
            metrics.key_request(keys[i % 8])
            metrics.request("/translate", 200, 0.1)

        parts = {
            "key check, as served (file checked <= 1/s)": lambda i: served.check(
                keys[i % 8], "127.0.0.1", 0
            ),
            "key check, file checked at every lookup": lambda i: every.check(
                keys[i % 8], "127.0.0.1", 0
            ),
            "metrics of one request": counted,
            "rate limit: MovingWindow.hit": lambda i: window.hit(f"key:{keys[i % 8]}", 10**9),
        }
        try:
            from limits import RateLimitItemPerMinute
            from limits.storage import MemoryStorage
            from limits.strategies import MovingWindowRateLimiter

            limiter, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerMinute(10**9)
            parts["rate limit: limits MemoryStorage"] = lambda i: limiter.hit(item, keys[i % 8])
        except ImportError:
            pass
        rows = []
        for beside in ("alone", "busy thread"):
            for name, fn in parts.items():
                if beside == "alone":
                    t = timings_us(fn, args.calls)
                else:
                    with Busy():
                        t = timings_us(fn, args.calls)
                rows.append((name, beside, statistics.fmean(t), t[len(t) // 2], t[-len(t) // 100]))
        store.close()
        if args.redis:
            rows += redis_rows(db, keys, args.calls)

    print(f"\n{'part':<52}{'beside':>13}{'mean µs':>10}{'p50 µs':>9}{'p99 µs':>9}")
    for name, beside, mean, p50, p99 in rows:
        print(f"{name:<52}{beside:>13}{mean:>10.1f}{p50:>9.1f}{p99:>9.1f}")


def redis_rows(db: Path, keys: list[str], calls: int) -> list[tuple]:
    """Admissions with the key file and memory against Redis, 1 and 32 at once."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from redis_server import RedisServer, redis_server_binary

    from seq2seq.serve.state_redis import RedisKeyStore, RedisState

    binary = redis_server_binary()
    if binary is None:
        raise needs.UserError("--redis needs redis-server (apt-get install redis-server)")
    server = RedisServer(binary)
    rows = []
    try:
        store = RedisKeyStore(server.url)
        redis_keys = [store.add(10**9) for _ in range(8)]
        store.close()
        backends = {
            "admission, key file and memory": lambda: (
                Access(LocalState(ServeConfig(api_keys=str(db))), require_key=False, req_limit=0),
                keys,
            ),
            "admission, Redis (one script call)": lambda: (
                Access(
                    RedisState(server.url, file_expiry_s=60, max_file_bytes=1),
                    require_key=False,
                    req_limit=0,
                ),
                redis_keys,
            ),  # fmt: skip
        }
        for beside in ("alone", "busy thread"):
            for at_once in (1, 32):
                for name, make in backends.items():
                    access, its_keys = make()
                    if beside == "alone":
                        t = admission_timings_us(access, its_keys, calls, at_once)
                    else:
                        with Busy():
                            t = admission_timings_us(access, its_keys, calls, at_once)
                    label = f"{name}, {at_once} at once"
                    rows.append((label, beside, statistics.fmean(t), t[len(t) // 2],
                                 t[-max(1, len(t) // 100)]))  # fmt: skip
    finally:
        server.stop()
    return rows


if __name__ == "__main__":
    needs.run(main)

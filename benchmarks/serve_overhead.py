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

Each is timed alone and then with a busy pure-Python thread beside it, as the server's batch
threads are while they tokenize and detokenize: a call that releases the GIL (a system call, an
SQLite query) may then wait for that thread's switch interval (5 ms) to get it back.

    python benchmarks/serve_overhead.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a user mistake

from seq2seq.serve.access import MovingWindow
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

    print(f"\n{'part':<44}{'beside':>13}{'mean µs':>10}{'p50 µs':>9}{'p99 µs':>9}")
    for name, beside, mean, p50, p99 in rows:
        print(f"{name:<44}{beside:>13}{mean:>10.1f}{p50:>9.1f}{p99:>9.1f}")


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""Does one client's heavy request stall everyone else? ``GET /health`` latency while one
client sends, back to back, the heaviest requests ``seq2seq serve``'s default limits allow.

A server process serves MODEL_DIR on 127.0.0.1 (``--engine torch``, default limits). A probe
sends ``GET /health`` every 50 ms on its own keep-alive connection and times each answer,
first with the server idle, then while one client (a process of its own) repeats each
workload for ``--seconds`` (the probe runs until its last request is answered):

- ``html``: ``POST /translate`` with ``format: html``, a body of about 280 KB: 40 paragraphs of
  :data:`~seq2seq.documents.html.MAX_INLINE_ELEMENTS` empty ``<b></b>`` each (the most a paragraph
  may hold; the text stays far below ``--max-chars``);
- ``html-over``: the issue #44 request, 40,000 ``<b></b>`` in one paragraph (now a 400);
- ``html-file``: ``POST /translate_file`` of a ``.html`` file near ``--max-file-bytes``, built the
  same way;
- ``txt-file``: ``POST /translate_file`` of a ``.txt`` file near ``--max-file-bytes`` (short
  lines: many sentences, queued in parts);
- ``keys-locked``: with ``--api-keys``, a keyed ``POST /translate`` while another process holds
  the key file locked (each such request waits its 1 s and gets 503).

The table gives, per workload, the heavy client's requests and statuses, and the probe's
answers with their median, 99th percentile and largest latency. ``--pythonpath DIR`` runs the
server from another source tree (the code before a change) for a comparison.

    python benchmarks/serve_stall.py MODEL_DIR --seconds 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import needs  # this folder: one line and exit 2 for a missing model

PER_PARAGRAPH = 1_000  # seq2seq.documents.html.MAX_INLINE_ELEMENTS
GOOD = {"source": "en", "target": "de"}


def _paragraphs(n: int) -> str:
    return "".join("<p>A man runs." + "<b></b>" * PER_PARAGRAPH + "</p>" for _ in range(n))


def _txt_file(size: int) -> bytes:
    line = "Two dogs play with a red ball in the park.\n"
    return (line * (size // len(line))).encode()


class Server:
    """``seq2seq serve`` in a subprocess (its URL read from the log)."""

    def __init__(self, model_dir: str, args: list[str], pythonpath: str | None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        model_dir = os.path.abspath(model_dir)
        cmd = [sys.executable, "-m", "seq2seq.cli", "serve", model_dir, "--port", "0"]
        cmd += ["--engine", "torch", "--threads", "1", "--no-access-log", *args]
        self.proc = subprocess.Popen(  # (cwd: the tree's own seq2seq comes first on the path)
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            cwd=pythonpath,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(x) for x in self.proc.stdout], daemon=True
        ).start()
        end = time.monotonic() + 120
        self.url = ""
        while time.monotonic() < end and not self.url:
            try:
                m = re.search(r"on (http://127\.0\.0\.1:\d+)", lines.get(timeout=1))
            except queue.Empty:
                continue
            self.url = m.group(1) if m else ""
        if not self.url:
            self.proc.kill()
            raise SystemExit("the server did not start")
        while httpx.get(f"{self.url}/health", timeout=60).status_code != 200:
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _probe(url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get("/health")
            out.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)


def _heavy(url: str, send, seconds: float, out) -> None:
    """The heavy client (in a process of its own: its encoding of large bodies must not hold
    the probe's GIL)."""
    statuses: Counter = Counter()
    end = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=600) as client:
        while time.monotonic() < end:
            statuses[send(client).status_code] += 1
    out.put(dict(statuses))


def run(url: str, send, seconds: float) -> tuple[Counter, list[float]]:
    stop, latencies = threading.Event(), []
    probe = threading.Thread(target=_probe, args=(url, stop, latencies))
    heavy, results = None, None
    if send is not None:
        context = multiprocessing.get_context("fork")  # the workload's closures go along
        results = context.Queue()
        heavy = context.Process(target=_heavy, args=(url, send, seconds, results))
        heavy.start()
    probe.start()
    statuses: Counter = Counter()
    if heavy is not None:
        statuses.update(results.get())  # once its last request is answered
        heavy.join()
    else:
        time.sleep(seconds)
    stop.set()
    probe.join()
    return statuses, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="a model directory (a tiny one will do)")
    parser.add_argument("--seconds", type=float, default=20, help="per workload")
    parser.add_argument("--pythonpath", help="serve from this source tree instead")
    parser.add_argument("--only", help="comma-separated workloads")
    args = parser.parse_args()
    needs.model_dir(args.model_dir)

    html_body = {"q": _paragraphs(40), "format": "html", **GOOD}
    over_body = {"q": "<p>A man runs." + "<b></b>" * 40_000 + "</p>", "format": "html", **GOOD}
    html_file = _paragraphs(1_000_000 // (len(_paragraphs(1)) + 1)).encode()
    txt_file = _txt_file(990_000)
    tmp = Path(tempfile.mkdtemp(prefix="serve-stall-"))
    db = tmp / "keys.db"
    subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "keys", "add", "--db", str(db)],
        check=True,
        capture_output=True,
    )
    key = sqlite3.connect(db).execute("SELECT api_key FROM api_keys").fetchone()[0]

    def locked_send(client):
        return client.post("/translate", json={"q": "A dog.", "api_key": key, **GOOD})

    workloads = {
        "idle": None,
        "html": lambda c: c.post("/translate", json=html_body),
        "html-over": lambda c: c.post("/translate", json=over_body),
        "html-file": lambda c: c.post(
            "/translate_file", data=GOOD, files={"file": ("page.html", html_file)}
        ),
        "txt-file": lambda c: c.post(
            "/translate_file", data=GOOD, files={"file": ("notes.txt", txt_file)}
        ),
        "keys-locked": locked_send,
    }
    if args.only:
        workloads = {k: v for k, v in workloads.items() if k in args.only.split(",")}
    server = Server(args.model_dir, ["--api-keys", str(db)], args.pythonpath)
    rows = []
    try:
        for name, send in workloads.items():
            holder = None
            if name == "keys-locked":
                holder = sqlite3.connect(db, timeout=1)
                holder.execute("BEGIN EXCLUSIVE")
            try:
                statuses, lat = run(server.url, send, args.seconds)
            finally:
                if holder is not None:
                    holder.rollback()
                    holder.close()
            lat.sort()
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
            shown = ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items())) or "-"
            rows.append((name, shown, len(lat), statistics.median(lat), p99, lat[-1]))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    print("| workload | heavy client's answers | /health probes | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for name, shown, n, p50, p99, most in rows:
        print(f"| {name} | {shown} | {n} | {p50:.1f} | {p99:.1f} | {most:.1f} |")


if __name__ == "__main__":
    needs.run(main)

#!/usr/bin/env python
"""What naming uvicorn's h11 parser costs ``seq2seq serve`` against httptools.

``seq2seq serve`` runs uvicorn with ``http="h11"`` so that request headers are bounded
(seq2seq.serve.launcher.MAX_HEADER_BYTES) whichever parsers are installed; uvicorn's default
picks httptools where installed, which buffers headers of any size. Each parser serves the same
model in a fresh process on 127.0.0.1; one keep-alive client sends ``--requests`` sequential
``GET /health`` (the parser and the app, no engine) and ``POST /v1/translate`` requests (one
sentence, greedy) in interleaved rounds, and the table gives the median requests/s.

    python benchmarks/serve_http_parser.py runs/demo/averaged
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import time

import needs  # this folder: one line and exit 2 for a missing model

PARSERS = ("httptools", "h11")
SENTENCE = "Two dogs play with a red ball in the park."


def _serve(model_dir: str, parser: str, port: int, threads: int) -> None:
    import torch
    import uvicorn

    from seq2seq.serve.app import create_app
    from seq2seq.serve.batcher import engine_thread
    from seq2seq.serve.launcher import MAX_HEADER_BYTES
    from seq2seq.serve.served_model import load_translator

    torch.set_num_threads(threads)
    executor = engine_thread()
    translator, info = load_translator(
        model_dir, engine="torch", device="cpu", search={}, executor=executor
    )
    app = create_app(translator, info=info, executor=executor)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=parser,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(model_dir: str, parser: str, requests: int, threads: int) -> dict[str, float]:
    import httpx

    port = _free_port()
    proc = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(model_dir, parser, port, threads), daemon=True
    )
    proc.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            end = time.monotonic() + 120
            while True:
                try:
                    client.get("/health")
                    break
                except httpx.TransportError:
                    if time.monotonic() > end or not proc.is_alive():
                        raise needs.UserError(f"the {parser} server did not start") from None
                    time.sleep(0.1)
            body = {"text": SENTENCE, "method": "greedy"}
            out = {}
            for name, call in (
                ("health", lambda: client.get("/health")),
                ("translate", lambda: client.post("/v1/translate", json=body)),
            ):
                for _ in range(requests // 10):  # warm-up
                    call().raise_for_status()
                start = time.perf_counter()
                for _ in range(requests):
                    call().raise_for_status()
                out[name] = requests / (time.perf_counter() - start)
            return out
    finally:
        proc.terminate()
        proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="a model directory (make demo writes runs/demo/averaged)")
    ap.add_argument("--requests", type=int, default=1000, help="requests per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    args = ap.parse_args()
    model_dir = str(needs.model_dir(args.model_dir))
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in PARSERS}
    for _ in range(args.rounds):
        for parser in PARSERS:
            runs[parser].append(measure(model_dir, parser, args.requests, args.threads))
    print("| parser | GET /health req/s | POST /v1/translate req/s (1 sentence, greedy) |")
    print("|---|---|---|")
    for parser in PARSERS:
        health = statistics.median(r["health"] for r in runs[parser])
        translate = statistics.median(r["translate"] for r in runs[parser])
        print(f"| {parser} | {health:.0f} | {translate:.1f} |")


if __name__ == "__main__":
    needs.run(main)

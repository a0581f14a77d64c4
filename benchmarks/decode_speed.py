#!/usr/bin/env python
"""Decoding speed and memory: greedy and beam 5, per engine, on a real test set.

Engines: ``torch`` (KV cache), ``torch-nocache`` (recomputes the whole prefix every step: the
baseline the cache is measured against), and the exports ``ctranslate2`` (float32),
``ctranslate2-int8`` and ``onnx`` (made from MODEL_DIR into a temporary folder). Not run unless
named in ``--engines``: ``torch-int8`` and ``torch-bf16`` (the torch engine's precisions). Each (engine, search) runs in its own subprocess, so
each peak-memory reading (max RSS) is its own; the time covers translating the test set after
loading and a short warm-up (detokenization included). ``--rounds`` repeats the whole set of
measurements, engines interleaved, and reports medians: on a shared machine one run of an
engine can be well off its neighbour.

    python benchmarks/decode_speed.py runs/demo/averaged --mirror $SEQ2SEQ_MIRROR

Columns: sentences/s (median, and the range over rounds), target tokens/s (SentencePiece
pieces of the outputs, EOS included), peak RSS in MiB. Then how many outputs of each engine are
those of the torch engine, word for word.

``--baseline DIR`` adds the engine ``torch-baseline``: the torch engine of another checkout of
seq2seq (DIR holds its ``seq2seq`` package, e.g. ``git worktree add ../base main``), run in the
same rounds, so that a change's speed-up and whether it changed any output are measured in one
run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import seq2seq  # noqa: F401  before export_parity (which puts this checkout first on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import needs  # noqa: E402
from export_parity import export_for, load_test_set  # noqa: E402

ENGINES = ("torch", "torch-nocache", "ctranslate2", "ctranslate2-int8", "onnx")
SEARCHES = {"greedy": {"method": "greedy"}, "beam5": {"method": "beam", "beam_size": 5}}


def measure(
    engine_dir: Path, engine: str, search: str, src: list[str], threads: int, out_file: Path | None
) -> dict:
    """One timed translation of ``src`` (run inside the child process)."""
    import torch

    from seq2seq.decode.translator import Translator

    torch.set_num_threads(threads)
    translator = Translator.load(engine_dir, engine=engine, **SEARCHES[search])
    translator.translate(src[:16])  # warm-up
    start = time.perf_counter()
    hyps = translator.translate(src)
    seconds = time.perf_counter() - start
    tokens = sum(len(ids) + 1 for ids in translator.tokenizer.encode_tgt(hyps))
    if out_file is not None:
        out_file.write_text(json.dumps(hyps), encoding="utf-8")
    return {
        "sentences_per_s": len(src) / seconds,
        "tokens_per_s": tokens / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("--corpus")
    p.add_argument("--pair")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--variant")
    p.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    p.add_argument("--cache-dir")
    p.add_argument("--src", type=Path)
    p.add_argument("--ref", type=Path)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0 = all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="interleaved repeats (median reported)")
    p.add_argument("--json", help="also write the numbers to this file")
    p.add_argument("--baseline", type=Path, help="another checkout's root: adds torch-baseline")
    p.add_argument("--child", nargs=3, metavar=("DIR", "ENGINE", "SEARCH"), help=argparse.SUPPRESS)
    p.add_argument("--src-file", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child:  # one measurement; JSON on the last stdout line
        src = args.src_file.read_text(encoding="utf-8").split("\n")[:-1]
        engine_dir, engine, search = args.child
        result = measure(Path(engine_dir), engine, search, src, args.threads, args.out_file)
        print(json.dumps(result))
        return

    engines = args.engines.split(",")
    if args.baseline is not None:
        engines.insert(engines.index("torch") + 1 if "torch" in engines else 0, "torch-baseline")
    outputs: dict[tuple[str, str], list[str]] = {}  # (engine, search) -> first round's output
    runs: dict[tuple[str, str], list[dict]] = {}  # (engine, search) -> one result per round
    with tempfile.TemporaryDirectory(prefix="decode-speed-") as tmp:
        tmp = Path(tmp)
        src, _refs, name = load_test_set(args, tmp)
        if args.limit:
            src = src[: args.limit]
        src_file = tmp / "src.txt"
        src_file.write_text("".join(s + "\n" for s in src), encoding="utf-8")
        dirs = {}
        for engine in engines:
            if engine == "torch-baseline":
                dirs[engine] = (args.model_dir, "torch")
            elif engine.startswith("torch"):
                dirs[engine] = (args.model_dir, engine)
            else:
                engine_dir, runtime, _ = export_for(engine, args.model_dir, tmp / engine)
                dirs[engine] = (engine_dir, runtime)
        # Rounds interleave the engines, so a slow spell of a shared machine hits every engine
        # of a round alike; each ratio below is taken within a round, then the median.
        for rnd in range(args.rounds):
            for engine in engines:
                engine_dir, runtime = dirs[engine]
                for search in SEARCHES:
                    out_file = tmp / f"{engine}-{search}.json"
                    cmd = [sys.executable, __file__, str(args.model_dir), "--threads", str(args.threads),
                           "--child", str(engine_dir), runtime, search, "--src-file", str(src_file),
                           "--out-file", str(out_file)]  # fmt: skip
                    env = dict(os.environ)
                    if engine == "torch-baseline":  # the other checkout's seq2seq first
                        env["PYTHONPATH"] = os.pathsep.join(
                            [str(args.baseline.resolve()), env.get("PYTHONPATH", "")]
                        ).rstrip(os.pathsep)
                    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
                    if out.returncode:
                        sys.exit(f"{engine} {search} failed:\n{out.stderr[-3000:]}")
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    runs.setdefault((engine, search), []).append(result)
                    if rnd == 0:
                        outputs[engine, search] = json.loads(out_file.read_text("utf-8"))
                    print(f"  round {rnd + 1}: {engine} {search}: "
                          f"{result['sentences_per_s']:.1f} sent/s", flush=True)  # fmt: skip

    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "1 round"
    print(f"\nDecoding {name}, {len(src)} sentences, {args.threads} threads, {rounds}")
    print(f"{'engine':<18}{'search':<8}{'sent/s':>9}{'range':>14}{'tok/s':>9}{'peak RSS MiB':>14}")
    rows = []
    for (engine, search), results in runs.items():
        speeds = [r["sentences_per_s"] for r in results]
        row = {
            "engine": engine,
            "search": search,
            "sentences_per_s": statistics.median(speeds),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in results),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
            "rounds": results,
        }
        rows.append(row)
        spread = f"{min(speeds):.0f}-{max(speeds):.0f}"
        print(f"{engine:<18}{search:<8}{row['sentences_per_s']:>9.1f}{spread:>14}"
              f"{row['tokens_per_s']:>9.0f}{row['peak_rss_mib']:>14.0f}")  # fmt: skip

    def ratio(a: str, b: str) -> str | None:
        if (a, "beam5") not in runs or (b, "beam5") not in runs:
            return None
        each = [
            x["sentences_per_s"] / y["sentences_per_s"]
            for x, y in zip(runs[a, "beam5"], runs[b, "beam5"], strict=True)
        ]
        spread = f" (rounds: {', '.join(f'{r:.2f}' for r in each)})" if len(each) > 1 else ""
        return f"{statistics.median(each):.2f}x{spread}"

    if speedup := ratio("torch", "torch-nocache"):
        print(f"KV cache speed-up, beam 5: {speedup}")
    if speedup := ratio("torch", "torch-baseline"):
        print(f"torch / torch-baseline, beam 5: {speedup}")
    for engine in ("ctranslate2", "ctranslate2-int8", "torch-int8", "torch-bf16"):
        if r := ratio(engine, "torch"):
            print(f"{engine} / torch, beam 5: {r}")
    for (engine, search), hyps in outputs.items():
        ref = outputs.get(("torch", search))
        if engine != "torch" and ref is not None:
            same = sum(a == b for a, b in zip(hyps, ref))
            print(f"{engine} {search}: {same} of {len(ref)} outputs identical to torch's")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    needs.run(main)

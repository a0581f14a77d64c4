#!/usr/bin/env python
"""Decoding speed and memory: greedy and beam 5, per engine, on a real test set.

Engines: ``torch`` (KV cache), ``torch-nocache`` (recomputes the whole prefix every step: the
baseline the cache is measured against), and the exports ``ctranslate2`` (float32),
``ctranslate2-int8`` and ``onnx`` (made from MODEL_DIR into a temporary folder). Each (engine, search) runs in its own subprocess, so
each peak-memory reading (max RSS) is its own; the time covers translating the test set after
loading and a short warm-up (detokenization included).

    python benchmarks/decode_speed.py runs/demo/averaged --mirror ../shared/data/multi30k

Columns: sentences/s, target tokens/s (SentencePiece pieces of the outputs, EOS included),
peak RSS in MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_parity import export_for, load_test_set  # noqa: E402

ENGINES = ("torch", "torch-nocache", "ctranslate2", "ctranslate2-int8", "onnx")
SEARCHES = {"greedy": {"method": "greedy"}, "beam5": {"method": "beam", "beam_size": 5}}


def measure(engine_dir: Path, engine: str, search: str, src: list[str], threads: int) -> dict:
    """One timed translation of ``src`` (run inside the child process)."""
    import torch

    from seq2seq.translate import Translator

    torch.set_num_threads(threads)
    translator = Translator.load(engine_dir, engine=engine, **SEARCHES[search])
    translator.translate(src[:16])  # warm-up
    start = time.perf_counter()
    hyps = translator.translate(src)
    seconds = time.perf_counter() - start
    tokens = sum(len(ids) + 1 for ids in translator.tokenizer.encode_tgt(hyps))
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
    p.add_argument("--json", help="also write the numbers to this file")
    p.add_argument("--child", nargs=3, metavar=("DIR", "ENGINE", "SEARCH"), help=argparse.SUPPRESS)
    p.add_argument("--src-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child:  # one measurement; JSON on the last stdout line
        src = args.src_file.read_text(encoding="utf-8").split("\n")[:-1]
        engine_dir, engine, search = args.child
        print(json.dumps(measure(Path(engine_dir), engine, search, src, args.threads)))
        return

    rows = []
    with tempfile.TemporaryDirectory(prefix="decode-speed-") as tmp:
        tmp = Path(tmp)
        src, _refs, name = load_test_set(args, tmp)
        if args.limit:
            src = src[: args.limit]
        src_file = tmp / "src.txt"
        src_file.write_text("".join(s + "\n" for s in src), encoding="utf-8")
        for engine in args.engines.split(","):
            if engine in ("torch", "torch-nocache"):
                engine_dir, runtime = args.model_dir, engine
            else:
                engine_dir, runtime, _ = export_for(engine, args.model_dir, tmp / engine)
            for search in SEARCHES:
                cmd = [sys.executable, __file__, str(args.model_dir), "--threads", str(args.threads),
                       "--child", str(engine_dir), runtime, search, "--src-file", str(src_file)]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if out.returncode:
                    sys.exit(f"{engine} {search} failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"engine": engine, "search": search, **result})
                print(f"  {engine} {search}: {result['sentences_per_s']:.1f} sent/s", flush=True)

    print(f"\nDecoding {name}, {len(src)} sentences, {args.threads} threads")
    print(f"{'engine':<18}{'search':<8}{'sent/s':>9}{'tok/s':>9}{'peak RSS MiB':>14}")
    for r in rows:
        print(f"{r['engine']:<18}{r['search']:<8}{r['sentences_per_s']:>9.1f}"
              f"{r['tokens_per_s']:>9.0f}{r['peak_rss_mib']:>14.0f}")  # fmt: skip
    by = {(r["engine"], r["search"]): r for r in rows}
    if ("torch", "beam5") in by and ("torch-nocache", "beam5") in by:
        speedup = (
            by["torch", "beam5"]["sentences_per_s"]
            / by["torch-nocache", "beam5"]["sentences_per_s"]
        )
        print(f"KV cache speed-up, beam 5: {speedup:.2f}x")
    for engine in ("ctranslate2", "ctranslate2-int8"):
        if ("torch", "beam5") in by and (engine, "beam5") in by:
            ratio = by[engine, "beam5"]["sentences_per_s"] / by["torch", "beam5"]["sentences_per_s"]
            print(f"{engine} / torch, beam 5: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""How the data path scales: prepare -> SentencePiece -> clean + binarize -> first batch.

    python benchmarks/prepare_scale.py                          # 0.45M, 1.5M, 4.5M pairs
    python benchmarks/prepare_scale.py --sizes 450000 --work runs/scale

Builds synthetic corpora of WMT14 size from the Multi30K mirror's training pairs (``--mirror``
or ``SEQ2SEQ_MIRROR``): each pair is
two random Multi30K pairs joined (about 26 words a side, WMT-like), a fixed seed. Each corpus
is written once, gzipped, as a one-file corpus of a mirror (not timed). Then, per size, in a
fresh process:

- prepare: ``prepare_corpus`` (verify the sha256, gunzip into OUT/train.{en,de});
- spm: SentencePiece on the training text (``ensure_tokenizer``, the datamodule's call:
  data.vocab_size, data.spm_max_sentences sampled);
- binarize: ``build_store`` with the cleaning stage (empty, duplicate pairs, length, ratio)
  streaming into the token store;
- first batch: open the store, build the token-bucket sampler, collate the first batch.

It prints one row per size: seconds per stage, the total, the peak RSS of that process and
the microseconds per pair, whose constancy across sizes is the "grows linearly" check.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import needs  # noqa: E402  this folder: one line and exit 2 for a missing mirror


def _mirror_multi30k(mirror: str | None) -> Path:
    """The Multi30K folder of a mirror: ``ROOT/multi30k`` or the folder itself."""
    root = Path(needs.mirror(mirror))
    for folder in (root / "multi30k", root):
        if (folder / "data/task1/raw/train.en.gz").is_file():
            return folder
    raise needs.UserError(f"the mirror {root} has no multi30k/data/task1/raw/train.en.gz")


def build_corpus(n: int, work: Path, mirror: str | None) -> Path:
    """``work/mirror-N/synthetic/train.{en,de}.gz`` (cached); returns the mirror root."""
    root = work / f"mirror-{n}"
    done = root / "synthetic" / "done.json"
    if done.is_file():
        return root
    m30k = _mirror_multi30k(mirror) / "data/task1/raw"
    en = gzip.decompress((m30k / "train.en.gz").read_bytes()).decode().split("\n")[:-1]
    de = gzip.decompress((m30k / "train.de.gz").read_bytes()).decode().split("\n")[:-1]
    rng = random.Random(n)
    (root / "synthetic").mkdir(parents=True, exist_ok=True)
    sums = {}
    with gzip.open(root / "synthetic/train.en.gz", "wt", encoding="utf-8", compresslevel=1) as fe, \
         gzip.open(root / "synthetic/train.de.gz", "wt", encoding="utf-8", compresslevel=1) as fd:  # fmt: skip
        k = len(en)
        for _ in range(n):
            i, j = rng.randrange(k), rng.randrange(k)
            fe.write(f"{en[i].strip()} {en[j].strip()}\n")
            fd.write(f"{de[i].strip()} {de[j].strip()}\n")
    for lang in ("en", "de"):
        h = hashlib.sha256((root / f"synthetic/train.{lang}.gz").read_bytes()).hexdigest()
        sums[lang] = h
    done.write_text(json.dumps(sums))
    return root


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(n: int, work: Path, vocab_size: int) -> dict:
    """The timed pipeline for one size (run in its own process)."""
    from seq2seq.data.batching import TokenBucketSampler, collate
    from seq2seq.data.cleaning import CleaningRules
    from seq2seq.data.corpus import Corpus, Part, RemoteFile
    from seq2seq.data.prepare import prepare_corpus
    from seq2seq.data.store import TokenStore, build_store
    from seq2seq.data.tokenizer import ensure_tokenizer

    root = work / f"mirror-{n}"
    sums = json.loads((root / "synthetic/done.json").read_text())
    corpus = Corpus(
        name="synthetic", description="Multi30K pairs joined", base_url="http://127.0.0.1:9/",
        languages=("en", "de"), variants=("raw",), splits=("train",),
        layout={("raw", "train", lang): (Part(RemoteFile(f"train.{lang}.gz", sums[lang])),)
                for lang in ("en", "de")},
    )  # fmt: skip
    run = work / f"run-{n}"
    if run.exists():
        subprocess.run(["rm", "-rf", str(run)], check=True)
    times, cpu = {}, {}
    c = time.process_time()
    t = time.perf_counter()
    files = prepare_corpus(corpus, "en-de", run / "text", mirror=root, splits=["train"])
    times["prepare"] = time.perf_counter() - t
    cpu["prepare"], c = time.process_time() - c, time.process_time()
    src, tgt = files["train"]

    t, c = time.perf_counter(), time.process_time()
    tok = ensure_tokenizer(run, src, tgt, vocab_size=vocab_size, model_type="bpe", joint=True)
    times["spm"] = time.perf_counter() - t
    cpu["spm"], c = time.process_time() - c, time.process_time()
    peak_spm = _peak_mib()

    t, c = time.perf_counter(), time.process_time()
    rules = CleaningRules(dedup="pairs", max_len=256, max_ratio=3.0)
    lines: list[str] = []
    build_store(run / "train", src, tgt, tok, split="train", train=True, cleaning=rules,
                log=lines.append)  # fmt: skip
    times["binarize"] = time.perf_counter() - t
    cpu["binarize"], c = time.process_time() - c, time.process_time()

    t, c = time.perf_counter(), time.process_time()
    store = TokenStore(run / "train")
    sampler = TokenBucketSampler(store.src_lens + 1, store.tgt_lens + 2, max_tokens=4096, seed=1)
    first = next(iter(sampler))
    batch = collate([store[i] for i in first])
    times["first_batch"] = time.perf_counter() - t
    cpu["first_batch"], c = time.process_time() - c, time.process_time()
    times["total"] = sum(times.values())
    return {
        "pairs": n,
        **times,
        "cpu": cpu,
        "peak_mib": _peak_mib(),
        "peak_spm_mib": peak_spm,
        "report": lines[0],
        "batch": list(batch.src_ids.shape),
        "n_batches": len(sampler),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="450000,1500000,4500000")
    parser.add_argument("--work", default="runs/prepare-scale", help="corpora and stores")
    parser.add_argument(
        "--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"), help="Multi30K mirror"
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    work = Path(args.work)
    if args.one:
        print(json.dumps(run_one(args.one, work, args.vocab_size)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        build_corpus(n, work, args.mirror)
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(n), "--work", str(work),
             "--vocab-size", str(args.vocab_size)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if out.returncode:
            sys.exit(f"the {n:,}-pair run failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1]["report"], json.dumps(rows[-1]["cpu"]), file=sys.stderr)
    print(f"\nprepare -> SentencePiece (vocab {args.vocab_size}) -> clean + binarize -> first batch, "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    print(
        "| pairs | prepare | SentencePiece | clean + binarize | first batch | total | peak RSS | µs per pair |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['pairs']:,} | {r['prepare']:.1f} s | {r['spm']:.1f} s | {r['binarize']:.1f} s | "
            f"{r['first_batch']:.1f} s | **{r['total'] / 60:.1f} min** | {r['peak_mib'] / 1024:.2f} GiB | "
            f"{r['total'] / r['pairs'] * 1e6:.0f} |"
        )


if __name__ == "__main__":
    needs.run(main)

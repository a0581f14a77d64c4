"""Peak memory of converting and loading a pretrained model of NLLB-600M's size.

Builds a folder with transformers' own classes in NLLB-200-distilled-600M's shape (12+12
layers, d_model 1024, 16 heads, ffn 4096, 256,206 embedding rows; random weights, float32:
about 2.5 GB of weights), then, each in a fresh process that reports its own peak RSS
(VmHWM):

- ``convert``: ``seq2seq convert FAMILY HF_DIR --out MODEL_DIR``;
- ``translate``: ``seq2seq translate MODEL_DIR`` of a few sentences at beam 4 (a short
  length limit: the weights are random, and loading is what is measured).

Prints the weights file's size, each peak and its ratio to the file (targets: convert at most
1.5x, translate at most 1.3x). ``--family m2m100`` builds an ``M2M100ForConditionalGeneration``
folder with an NLLB tokenizer (its SentencePiece model padded to NLLB's 256,000 pieces);
``--family marian`` a MarianMTModel folder of the same shape and row count (the loading and
conversion paths they share are the same code).

    SEQ2SEQ_MIRROR=/path/to/mirror python benchmarks/pretrained_memory.py --family m2m100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from needs import mirror, run
from pretrained import _lines, _padded_spm, _peak_rss_mib, build_m2m100, layer_sizes

ROWS = 256_206  # NLLB-200's embedding rows (its tokenizer has 256,204 ids)
SHAPE = dict(d_model=1024, layers=12, heads=16, ffn=4096)


def build_marian(root: Path, out: Path) -> None:
    """A random MarianMTModel folder of the same shape and row count, saved at ``out``."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel

    out.mkdir(parents=True)
    work = out.parent / "spm"
    work.mkdir(exist_ok=True)
    model_file = _padded_spm(root, work, 8000)
    for side in ("source", "target"):
        shutil.copyfile(model_file, out / f"{side}.spm")
    vocab = {"</s>": 0, "<unk>": 1}
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < ROWS - 1:
        vocab[f"\u2581filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = ROWS - 1
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de", "separate_vocabs": False})
    )
    config = MarianConfig(
        vocab_size=ROWS,
        decoder_vocab_size=ROWS,
        **layer_sizes(SHAPE),
        activation_function="relu",
        max_position_embeddings=1024,
        pad_token_id=ROWS - 1,
        eos_token_id=0,
        decoder_start_token_id=ROWS - 1,
        forced_eos_token_id=0,
        scale_embedding=True,
    )
    torch.manual_seed(0)
    MarianMTModel(config).eval().save_pretrained(out)


def _weights_bytes(hf_dir: Path) -> int:
    files = list(hf_dir.glob("*.safetensors")) + list(hf_dir.glob("*.bin"))
    return sum(p.stat().st_size for p in files)


def measure(argv: list[str]) -> None:
    """Run ``seq2seq ARGV`` in this process; print its peak RSS (MiB) and seconds as JSON."""
    from seq2seq.cli import main

    start = time.perf_counter()
    status = main(argv)
    seconds = time.perf_counter() - start
    if status:
        raise SystemExit(status)
    print(json.dumps({"peak_rss_mib": _peak_rss_mib(), "seconds": seconds}))


def _child(*argv: str) -> dict:
    cmd = [sys.executable, __file__, "--measure", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        measure(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    ap.add_argument("--family", choices=("m2m100", "marian"), default="m2m100")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", help="keep the built folder here and reuse it")
    args = ap.parse_args()
    root = Path(mirror(args.mirror))
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="pretrained-memory-") as tmp:
        tmp = Path(args.work) if args.work else Path(tmp)
        hf_dir, model_dir = tmp / f"hf-{args.family}", tmp / f"converted-{args.family}"
        if not hf_dir.is_dir():
            if args.family == "m2m100":
                build_m2m100(root, hf_dir, dict(SHAPE, rows=ROWS))
            else:
                build_marian(root, hf_dir)
        shutil.rmtree(model_dir, ignore_errors=True)
        size = _weights_bytes(hf_dir)
        convert = _child("convert", args.family, str(hf_dir), "--out", str(model_dir))
        text = tmp / "src.txt"
        text.write_text("\n".join(_lines(root, "test_2016_flickr", "en", 4)) + "\n")
        lang = ["--source-lang", "eng_Latn", "--target-lang", "deu_Latn"]
        translate = _child(
            "translate", str(model_dir), "-i", str(text), "-o", str(tmp / "out.txt"),
            "--beam", "4", "--max-len-a", "0", "--max-len-b", "4", "--threads", str(args.threads),
            *(lang if args.family == "m2m100" else []),
        )  # fmt: skip
        mib = size / 2**20
        model_mib = (model_dir / "model.safetensors").stat().st_size / 2**20
        print(f"{args.family}, NLLB-600M's shape (12+12 layers, d_model 1024, {ROWS:,} rows)")
        print(f"weights file {mib:.0f} MiB; converted model.safetensors {model_mib:.0f} MiB")
        print("| step | peak RSS (MiB) | vs weights file | target | seconds |")
        print("|---|---|---|---|---|")
        for name, row, target in (("convert", convert, 1.5), ("translate", translate, 1.3)):
            ratio = row["peak_rss_mib"] / mib
            print(
                f"| {name} | {row['peak_rss_mib']:.0f} | {ratio:.2f}x | <= {target}x | "
                f"{row['seconds']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    run(main)

#!/usr/bin/env python
"""Constrained decoding on a real test set: BLEU, constraint satisfaction and speed.

Per sentence, 1 to 3 phrases (1 or 2 words each, seeded) are drawn from its reference and
given as (unordered) constraints. Rows, all beam search (``--beam``, 5), in one process,
rounds interleaved (medians of ``--rounds``):

- ``unconstrained``: plain beam search.
- ``constrained``: the same with the constraints (dynamic beam allocation).
- ``prefix (own output)``: each sentence's unconstrained output, its first half (words) given
  as the prefix: the same output costs no more than finding it unconstrained.
- ``prefix (reference)``: the reference's first ``--prefix-words`` (2) words as the prefix.

Columns: BLEU and chrF (sacreBLEU), share of sentences whose output holds every constraint
(as SentencePiece pieces: the searched ones in the constrained row, the output re-encoded in
the others; and as text), seconds, sentences/s and the time relative to the
unconstrained row (issue 23's targets: 100% satisfaction, BLEU up, constrained at most 2x,
prefix at most 1x).

    python benchmarks/constrained.py runs/demo/averaged \\
        --mirror $SEQ2SEQ_MIRROR --threads 2 --rounds 3
    python benchmarks/constrained.py runs/m --src test.en --ref test.de --limit 100
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import needs  # noqa: E402
from export_parity import add_test_set_args, load_test_set  # noqa: E402

from seq2seq.decode.translator import Translator  # noqa: E402
from seq2seq.evaluate.metrics import score_corpus  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_test_set_args(p)
    p.add_argument("--engine", default="torch", help="torch, torch-nocache or onnx (torch)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (2)")
    p.add_argument("--beam", type=int, default=5, help="beam size (5)")
    p.add_argument("--limit", type=int, default=0, help="use the first N sentences (0: all)")
    p.add_argument("--rounds", type=int, default=1, help="timed rounds; medians reported (1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the phrase draw (0)")
    p.add_argument("--prefix-words", type=int, default=2, help="reference prefix words (2)")
    return p.parse_args(argv)


_WORD = re.compile(r"\w[\w'-]*")


def draw_phrases(ref: str, rng: random.Random) -> list[str]:
    """1-3 distinct, non-overlapping phrases of 1-2 consecutive words of ``ref``."""
    words = _WORD.findall(ref)
    if not words:
        return []
    want = rng.randint(1, 3)
    taken: set[int] = set()
    phrases: list[str] = []
    for _ in range(20):
        if len(phrases) == want:
            break
        n = rng.randint(1, 2)
        start = rng.randrange(0, max(len(words) - n + 1, 1))
        span = set(range(start, min(start + n, len(words))))
        phrase = " ".join(words[i] for i in sorted(span))
        if span & taken or phrase in phrases:
            continue
        taken |= span
        phrases.append(phrase)
    return phrases


def holds(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


class Recorder:
    """Wraps the Translator's engine: the searched tokens of every (source, constraints)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.tokens: dict[tuple, list[int]] = {}

    def translate_ids(self, src, opts, constraints=None):
        out = self.engine.translate_ids(src, opts, constraints=constraints)
        for s, c, hyps in zip(src, constraints or [None] * len(src), out):
            self.tokens[(tuple(s), c)] = hyps[0].tokens if hyps else []
        return out


def first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        src, ref, name = load_test_set(args, Path(tmp))
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    rng = random.Random(args.seed)
    translator = Translator.load(
        args.model_dir, device=args.device, engine=args.engine, method="beam", beam_size=args.beam
    )
    tok = translator.tokenizer
    # Phrases with characters outside the target vocabulary cannot be output as such: skipped.
    constraints = [
        [p for p in draw_phrases(r, rng) if 1 not in tok.encode_tgt([p])[0]] for r in ref
    ]
    translator.translate(src[:16])  # warm-up
    translator.translate(src[:16], constraints=constraints[:16])

    free = translator.translate(src)  # the outputs the prefix rows start from

    def covered(text: str) -> str:  # "" for a prefix the target vocabulary cannot spell
        return text if text and 1 not in tok.encode_tgt([text])[0] else ""

    own_prefix = [covered(first_words(t, max(len(t.split()) // 2, 1))) for t in free]
    ref_prefix = [covered(first_words(r, args.prefix_words)) for r in ref]
    rows = {
        "unconstrained": {},
        "constrained": {"constraints": constraints},
        "prefix (own output)": {"prefix": own_prefix},
        "prefix (reference)": {"prefix": ref_prefix},
    }
    times: dict[str, list[float]] = {k: [] for k in rows}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for label, kw in rows.items():
            start = time.perf_counter()
            outputs[label] = translator.translate(src, **kw)
            times[label].append(time.perf_counter() - start)
    # The searched tokens of the constrained row (a re-encoded output may segment otherwise).
    recorder = Recorder(translator.engine)
    translator.engine = recorder
    translator.translate(src, constraints=constraints)
    src_ids = translator.encode(src)
    cons = translator.constraints_for(src, constraints=constraints)
    searched = [recorder.tokens.get((tuple(s), c), []) for s, c in zip(src_ids, cons)]

    base = statistics.median(times["unconstrained"])
    print(
        f"{name}: {len(src)} sentences, {sum(map(len, constraints))} constraint phrases, "
        f"beam {args.beam}, engine {args.engine}, {args.threads} threads, "
        f"{args.rounds} round(s)\n"
    )
    print(
        "| decoding | BLEU | chrF | constraints held (pieces / text) | seconds | sent/s | "
        "time vs unconstrained |"
    )
    print("|---|---|---|---|---|---|---|")
    for label in rows:
        hyps = outputs[label]
        s = score_corpus(hyps, ref)
        ids = searched if label == "constrained" else tok.encode_tgt(hyps)
        piece_ok = text_ok = 0
        for h, h_ids, phrases in zip(hyps, ids, constraints):
            enc = tok.encode_tgt(phrases) if phrases else []
            piece_ok += all(holds(h_ids, p) for p in enc)
            text_ok += all(p in h for p in phrases)
        sec = statistics.median(times[label])
        print(
            f"| {label} | {s['bleu']:.2f} | {s['chrf']:.2f} | "
            f"{100 * piece_ok / len(src):.1f}% / {100 * text_ok / len(src):.1f}% | "
            f"{sec:.2f} | {len(src) / sec:.1f} | {sec / base:.2f}x |"
        )
    same = sum(a == b for a, b in zip(outputs["prefix (own output)"], free))
    print(f"\nprefix (own output): {same} of {len(src)} outputs are the unconstrained output")
    print(f"BLEU signature: {score_corpus(free, ref)['bleu_signature']}")
    return 0


if __name__ == "__main__":
    needs.run(main)

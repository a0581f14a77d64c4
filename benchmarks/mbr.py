"""Minimum Bayes risk reranking of the beam's n-best: does it beat the beam's best on BLEU?

For each beam size, every source sentence gets the beam's n best translations (n = the beam
size); the row then scores two choices among them with sacreBLEU on the whole set: the beam's
best (the highest length-normalized log-probability, what ``seq2seq translate`` outputs) and
the MBR choice, the hypothesis with the highest summed sentence BLEU (sacreBLEU, effective
order) against the other hypotheses of its list, each taken as a pseudo-reference (Kumar and
Byrne 2004). Run it on the validation set and on the test set: a decoding lever is only worth
keeping where validation, which chooses, agrees with test. Prints a Markdown table.

Usage (the ``make demo`` model, on the files the recipe wrote):

    python benchmarks/mbr.py runs/demo/averaged --src runs/demo/corpus/val.en \\
        --ref runs/demo/corpus/val.de --beams 5,10,20 --threads 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import needs  # noqa: E402  this folder: one line and exit 2 for a missing model
from sacrebleu.metrics import BLEU  # noqa: E402

from seq2seq.decode.translator import Translator  # noqa: E402
from seq2seq.evaluate.evaluation import read_test_pair  # noqa: E402
from seq2seq.evaluate.metrics import score_corpus  # noqa: E402

_SENTENCE_BLEU = BLEU(effective_order=True)


def mbr_choice(candidates: list[str]) -> int:
    """The index of the candidate with the highest summed sentence BLEU against the others
    (the first of equals; a list of one gives 0)."""
    best, best_gain = 0, float("-inf")
    for i, hyp in enumerate(candidates):
        gain = sum(
            _SENTENCE_BLEU.sentence_score(hyp, [ref]).score
            for j, ref in enumerate(candidates)
            if j != i
        )
        if gain > best_gain:
            best, best_gain = i, gain
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL_DIR")
    p.add_argument("--src", required=True, help="source file, one sentence a line")
    p.add_argument("--ref", required=True, help="reference file")
    p.add_argument("--beams", default="5,10", help="comma-separated beam sizes (default 5,10)")
    p.add_argument("--len-penalty", type=float, help="default: the model's")
    p.add_argument("--limit", type=int, default=0, help="first N sentences only (0: all)")
    p.add_argument("--threads", type=int, help="torch threads")
    args = p.parse_args(argv)
    needs.model_dir(args.model_dir)
    try:
        beams = [int(b) for b in args.beams.split(",")]
    except ValueError:
        raise needs.UserError(f"--beams: expected integers like 5,10, got {args.beams!r}") from None
    if args.threads:
        torch.set_num_threads(args.threads)
    src, ref = read_test_pair(Path(args.src), Path(args.ref))
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    translator = Translator.load(args.model_dir)
    print(f"{len(src)} sentences of {args.src}, {torch.get_num_threads()} threads")
    print("| beam = n-best | beam's best BLEU | MBR BLEU | MBR - best | MBR chose another |")
    print("|---|---|---|---|---|")
    for beam in beams:
        nbest = translator.translate_nbest(
            src, method="beam", beam_size=beam, nbest=beam, len_penalty=args.len_penalty
        )
        texts = [[t.text for t in hyps] for hyps in nbest]
        picks = [mbr_choice(c) for c in texts]  # (an empty list: 0)
        best = score_corpus([c[0] if c else "" for c in texts], ref)["bleu"]
        mbr = score_corpus([c[k] if c else "" for c, k in zip(texts, picks)], ref)["bleu"]
        moved = sum(k > 0 for k in picks) / len(picks)
        print(f"| {beam} | {best:.2f} | {mbr:.2f} | {mbr - best:+.2f} | {moved:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    needs.run(main)

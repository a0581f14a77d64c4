"""``seq2seq evaluate``: a test set translated and scored with sacreBLEU."""

from __future__ import annotations

import os

from seq2seq.cli.arguments import (
    add_command,
    add_direction_args,
    add_search_args,
    search_overrides,
    set_threads,
    warner,
)
from seq2seq.core import check_device, check_paths

__all__ = ["add_evaluate", "print_evaluation"]


def add_evaluate(sub) -> None:
    """Add ``seq2seq evaluate``."""
    p = add_command(
        sub,
        "evaluate",
        "Translate a test set and score it with sacreBLEU (BLEU, chrF, TER, with signatures).\n\n"
        "The test set is a corpus split (defaults: the model's data.corpus, data.pair,\n"
        "data.test_splits[0], data.variant) or --src/--ref files. Writes OUT_DIR/NAME.hyp\n"
        "(the hypotheses) and OUT_DIR/NAME.json (scores, signatures, options).\n"
        "--tokenized-lc scores like papers on lowercased tokenized references (sacreBLEU\n"
        "tokenize=none, lowercase): use it with a model trained on the tok variant.\n"
        "--moses-lc scores a model trained on raw text that way: its output and the raw\n"
        "references are Moses-normalized, lowercased and tokenized first (NAME.moses-lc.*);\n"
        "the same translation is scored the default way too (NAME.hyp, NAME.json).",
        "seq2seq evaluate runs/multi30k_small --corpus multi30k --pair en-de "
        "--split test_2016_flickr\n"
        "seq2seq evaluate runs/m30k_tok --variant tok --tokenized-lc\n"
        "seq2seq evaluate runs/m30k --moses-lc\n"
        "seq2seq evaluate runs/multi30k_small --src test.en --ref test.de --beam 5",
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="+",
        help="model directory (seq2seq train --out); several: an ensemble",
    )
    p.add_argument("--corpus", help="registered corpus (default: the model's data.corpus)")
    p.add_argument("--pair", help="language pair, e.g. en-de (default: the model's data.pair)")
    p.add_argument("--split", help="split, e.g. test_2016_flickr (default: data.test_splits[0])")
    p.add_argument(
        "--variant", choices=["raw", "tok"], help="corpus variant (default: the model's)"
    )
    p.add_argument(
        "--mirror",
        default=os.environ.get("SEQ2SEQ_MIRROR"),
        help="offline corpus mirror (default: $SEQ2SEQ_MIRROR)",
    )
    p.add_argument("--cache-dir", help="corpus download cache")
    p.add_argument("--src", metavar="FILE", help="source file (instead of a corpus split)")
    p.add_argument("--ref", metavar="FILE", help="reference file, aligned with --src")
    p.add_argument("--out-dir", metavar="DIR", help="outputs (default: MODEL_DIR/eval)")
    p.add_argument(
        "--tokenized-lc",
        action="store_true",
        help="score with sacreBLEU tokenize=none, lowercase (tokenized lowercased references)",
    )
    p.add_argument(
        "--moses-lc",
        action="store_true",
        help="Moses-tokenize and lowercase raw output and references, then score as "
        "--tokenized-lc (compares a raw-text model with the papers)",
    )
    add_search_args(p)
    add_direction_args(p)
    p.set_defaults(run=_run_evaluate)


def _run_evaluate(args) -> int:
    from seq2seq.evaluate import evaluate

    search = search_overrides(args)  # checked now, before anything loads
    set_threads(args.threads)
    check_device(args.device)
    check_paths(
        input_files=[("--src", args.src), ("--ref", args.ref)],
        input_dirs=[("--mirror", args.mirror)],
        output_dirs=[("--out-dir", args.out_dir), ("--cache-dir", args.cache_dir)],
    )
    result = evaluate(
        args.model_dir,
        src=args.src,
        ref=args.ref,
        corpus=args.corpus,
        pair=args.pair,
        split=args.split,
        variant=args.variant,
        mirror=args.mirror,
        cache_dir=args.cache_dir,
        out_dir=args.out_dir,
        tokenized_lc=args.tokenized_lc,
        moses_lc=args.moses_lc,
        device=args.device,
        engine=args.engine,
        warn=warner("evaluate"),
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        **search,
    )
    print_evaluation(result)
    return 0


def print_evaluation(result: dict) -> None:
    """Print what ``seq2seq evaluate`` reports: the test set, the scores, where they went.

    Args:
        result: what :func:`seq2seq.evaluate.evaluate` returned.
    """
    from seq2seq.evaluate import format_scores

    print(f"{result['src']} -> {result['hyp']} ({result['n_sentences']} sentences)")
    print(format_scores(result["scores"]))
    print(f"scores written to {result['json']}")

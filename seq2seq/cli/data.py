"""``seq2seq prepare``: a registered parallel corpus into plain-text files."""

from __future__ import annotations

from seq2seq.cli.arguments import add_command
from seq2seq.core import UserError, check_paths

__all__ = ["add_prepare"]


def add_prepare(sub) -> None:
    """Add ``seq2seq prepare``."""
    p = add_command(
        sub,
        "prepare",
        "Download (or take from an offline mirror), verify and extract a parallel corpus into "
        "plain-text files OUT/{split}.{lang}.",
        "seq2seq prepare multi30k --pair en-de --out data/multi30k --mirror /data/multi30k\n"
        "seq2seq prepare --list",
    )
    p.add_argument("corpus", nargs="?", help="registered corpus name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered corpora and exit")
    p.add_argument("--pair", default="en-de", help="src-tgt language pair (default en-de)")
    p.add_argument(
        "--variant",
        default="raw",
        help="raw (default), tok (Multi30K), fairseq (IWSLT14), norm (WMT14): see --list",
    )
    p.add_argument("--splits", help="comma-separated splits (default: every available split)")
    p.add_argument("--out", help="output directory")
    p.add_argument(
        "--cache-dir", help="download cache (default $SEQ2SEQ_CACHE or ~/.cache/seq2seq)"
    )
    p.add_argument(
        "--mirror", help="offline mirror folder replacing the download URLs ($SEQ2SEQ_MIRROR)"
    )
    p.set_defaults(run=_run_prepare)


def _run_prepare(args) -> int:
    from seq2seq.data import get_corpus, list_corpora, prepare_corpus

    if args.list:
        for name in list_corpora():
            print(get_corpus(name).summary())
        return 0
    if not args.corpus or not args.out:
        raise UserError(f"give a corpus ({', '.join(list_corpora())}) and --out DIR, or --list")
    check_paths(
        input_dirs=[("--mirror", args.mirror)],
        output_dirs=[("--out", args.out), ("--cache-dir", args.cache_dir)],
    )
    prepare_corpus(
        args.corpus,
        args.pair,
        args.out,
        variant=args.variant,
        splits=_splits(args.splits),
        cache_dir=args.cache_dir,
        mirror=args.mirror,
        log=print,
    )
    return 0


def _splits(value: str | None) -> list[str] | None:
    """``--splits a,b``: the names, spaces and empty items dropped (None: not given); an
    empty result (``--splits ,``) is refused by ``prepare_corpus``."""
    if value is None:
        return None
    return [s.strip() for s in value.split(",") if s.strip()]

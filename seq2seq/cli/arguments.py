"""What several subcommands share: how a subcommand's parser is made, the config and search
options, and what those options turn into (search overrides, threads, warnings).

Building a parser imports nothing heavy, so that ``seq2seq --help`` starts without torch.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable

from seq2seq.core import UserError

__all__ = [
    "add_command",
    "add_config_args",
    "add_search_args",
    "checked_options",
    "search_overrides",
    "set_threads",
    "warner",
]


def add_command(sub, name: str, help_: str, example: str) -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``help_`` is its summary and description, ``example`` its epilog."""
    return sub.add_parser(
        name,
        help=help_,
        description=help_,
        epilog="example:\n" + textwrap.indent(example.strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--config`` and the positional ``key.sub=value`` overrides."""
    p.add_argument("--config", help="experiment YAML (configs/*.yaml)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key.sub=value",
        help="config overrides, e.g. model.dropout=0.2",
    )


def add_search_args(p: argparse.ArgumentParser) -> None:
    """Search and engine options shared by translate, evaluate and serve (unset: the model's
    config)."""
    g = p.add_argument_group("search (unset options keep the model's config.yaml decoding values)")
    method = g.add_mutually_exclusive_group()
    method.add_argument("--beam", type=int, metavar="K", help="beam search with beam size K")
    method.add_argument("--greedy", action="store_true", help="greedy search")
    method.add_argument(
        "--sample", action="store_true", help="sampling (--temperature, --top-k, --top-p, --seed)"
    )
    g.add_argument("--nbest", type=int, metavar="N", help="N hypotheses per line (beam, sample)")
    g.add_argument("--len-penalty", type=float, help="length normalization exponent")
    g.add_argument("--min-len", type=int, help="minimum output tokens before EOS")
    g.add_argument("--max-len-a", type=float, help="max output tokens = a * src_len + b")
    g.add_argument("--max-len-b", type=int, help="max output tokens = a * src_len + b")
    g.add_argument("--no-repeat-ngram", type=int, metavar="N", help="never repeat an N-gram")
    g.add_argument("--unk-penalty", type=float, help="subtracted from the unknown token's log-prob")
    g.add_argument("--temperature", type=float, help="sampling temperature")
    g.add_argument("--top-k", type=int, help="sample among the K best tokens (0: all)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (1: all)")
    g.add_argument("--seed", type=int, help="sampling seed")
    g.add_argument("--max-tokens", type=int, help="source tokens per batch, padding included")
    p.add_argument(
        "--engine",
        default="torch",
        choices=["torch", "torch-nocache", "torch-bf16", "torch-int8", "ctranslate2", "onnx"],
        help="inference engine (default: torch; torch-bf16 and torch-int8 run the model in "
        "bfloat16 or with int8 linear layers); with ctranslate2 or onnx, MODEL_DIR is the "
        "folder `seq2seq export --format ctranslate2|onnx` wrote",
    )
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument(
        "--threads", type=int, metavar="N", help="CPU threads for every engine (default: torch's)"
    )


def checked_options(**options: object) -> dict:
    """``options`` (search and batching options; None: unset), each given value checked now,
    before a model loads, by the one check of those options
    (:meth:`seq2seq.config.DecodingConfig.check_value`; the Python API and the server use the
    same, so a bad value reads the same everywhere).

    Raises:
        UserError: a value out of its range (``seed must be <= 18446744073709551615, got ...``).
    """
    from seq2seq.config import DecodingConfig

    for key, value in options.items():
        if value is not None and key != "method":
            DecodingConfig.check_value(key, value)
    return options


def add_direction_args(p: argparse.ArgumentParser) -> None:
    """``--source-lang`` / ``--target-lang`` of translate, evaluate and score: a multilingual
    model's direction (checked against the model's; optional for a bilingual model)."""
    g = p.add_argument_group("direction (a multilingual model needs --target-lang)")
    g.add_argument("--source-lang", metavar="LANG", help="language of the input, e.g. en")
    g.add_argument("--target-lang", metavar="LANG", help="language to translate into, e.g. fr")


def search_overrides(args: argparse.Namespace) -> dict:
    """The search options of :func:`add_search_args` as keyword arguments (None: unset), each
    checked (:func:`checked_options`)."""
    method = None
    if args.beam is not None:
        method = "beam"
    elif args.greedy:
        method = "greedy"
    elif args.sample:
        method = "sample"
    return checked_options(
        method=method,
        beam_size=args.beam,
        nbest=args.nbest,
        len_penalty=args.len_penalty,
        min_len=args.min_len,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        no_repeat_ngram=args.no_repeat_ngram,
        unk_penalty=args.unk_penalty,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_tokens=args.max_tokens,
    )


def set_threads(threads: int | None) -> None:
    """Apply ``--threads`` to torch (None: leave torch's default)."""
    if threads is not None:
        if threads < 1:
            raise UserError(f"--threads must be >= 1, got {threads}")
        import torch

        torch.set_num_threads(threads)


def warner(command: str) -> Callable[[str], None]:
    """The ``warn`` callback of ``seq2seq COMMAND``: one ``seq2seq COMMAND: warning:`` line on
    stderr per message."""

    def warn(message: str) -> None:
        print(f"seq2seq {command}: warning: {message}", file=sys.stderr, flush=True)

    return warn

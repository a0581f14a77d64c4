"""The ``seq2seq`` command. Each subcommand is a thin wrapper over one module.

User mistakes (:class:`seq2seq.errors.UserError`) print one line on stderr and exit 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from seq2seq.errors import UserError

__all__ = ["main"]


def _add(sub, name: str, help_: str, example: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help_,
        description=help_,
        epilog="example:\n" + textwrap.indent(example.strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="experiment YAML (configs/*.yaml)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key.sub=value",
        help="config overrides, e.g. model.dropout=0.2",
    )


# ---- subcommands: each block adds its parser; the run_* function imports its module lazily ----
# (lazy imports keep `seq2seq --help` fast and let each subcommand fail only on its own deps)
# Pattern for one subcommand:
#     def _NAME(sub):  p = _add(sub, "NAME", help, example); p.add_argument(...); p.set_defaults(run=_run_NAME)
#     def _run_NAME(args) -> int:  from seq2seq.MODULE import f; return f(...)
#     _SUBCOMMANDS.append(_NAME)

_SUBCOMMANDS: list = []

# === end of subcommands ===


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seq2seq",
        description="Train, evaluate and export encoder-decoder Transformer translators.",
        epilog="Run `seq2seq COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``seq2seq`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("SEQ2SEQ_DEBUG") == "1"
    try:
        return int(args.run(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"seq2seq {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"seq2seq {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`seq2seq translate ... | head`): not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

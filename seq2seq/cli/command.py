"""The ``seq2seq`` command: its parser, and the dispatch to one subcommand.

Each subcommand is a thin wrapper over the library, in the module of its group (``data``,
``train``, ``plots``, ``translate``, ``serve``, ``evaluate``, ``export``); each checks its paths
first (:func:`seq2seq.core.paths.check_paths`) and imports what it runs only when it runs, so
that ``seq2seq --help`` is fast and a subcommand fails only on its own dependencies. How a
command ends (exit 2 on a user error, 130 on SIGINT, 143 on SIGTERM) is
:func:`seq2seq.cli.outcome.run_command`.
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.cli.convert import add_convert
from seq2seq.cli.data import add_prepare
from seq2seq.cli.evaluate import add_evaluate
from seq2seq.cli.export import add_export
from seq2seq.cli.glossary import add_glossary
from seq2seq.cli.keys import add_keys
from seq2seq.cli.outcome import run_command
from seq2seq.cli.plots import add_plot
from seq2seq.cli.serve import add_serve
from seq2seq.cli.train import add_average, add_train
from seq2seq.cli.translate import add_score, add_translate

__all__ = ["build_parser", "main"]

# The order of `seq2seq --help`.
_SUBCOMMANDS = (
    add_prepare,
    add_train,
    add_average,
    add_plot,
    add_translate,
    add_serve,
    add_keys,
    add_glossary,
    add_evaluate,
    add_score,
    add_export,
    add_convert,
)


def _version() -> str:
    from seq2seq import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``seq2seq`` parser; each subcommand sets ``run``, the function that runs it."""
    parser = argparse.ArgumentParser(
        prog="seq2seq",
        description="Train, evaluate and export encoder-decoder Transformer translators.",
        epilog="Run `seq2seq COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"seq2seq {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``seq2seq`` console script.

    Args:
        argv: the arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, 2 after a user error, 130 after SIGINT, 143 after SIGTERM.
    """
    args = build_parser().parse_args(argv)
    return run_command(
        args.command,
        lambda: args.run(args),
        debug=args.debug,
        sigterm=args.command != "serve",  # serve finishes the requests in flight, exits 0
        on_stop=lambda: getattr(args, "on_stop", None),
    )


if __name__ == "__main__":
    sys.exit(main())

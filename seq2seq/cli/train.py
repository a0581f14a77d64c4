"""``seq2seq train`` and ``seq2seq average``: a model directory from a config, and the mean of
a run's last checkpoints."""

from __future__ import annotations

import os

from seq2seq.cli.arguments import add_command, add_config_args
from seq2seq.core import UserError, check_paths

__all__ = ["add_average", "add_train"]


def add_train(sub) -> None:
    """Add ``seq2seq train``."""
    p = add_command(
        sub,
        "train",
        "Train a translator into a self-contained model directory (config, SentencePiece,\n"
        "checkpoints, logs, and the exported model.safetensors + manifest at the end).\n"
        "--resume DIR continues a run exactly where its last checkpoint left it; overrides\n"
        "may then change the training section (e.g. training.max_steps), not the model or data.\n"
        "An --out that already holds a model or a run is refused unless --force (which deletes it).",
        "seq2seq train --config configs/multi30k_quick.yaml --out runs/m30k\n"
        "seq2seq train --config configs/multi30k_quick.yaml --out runs/m30k "
        "training.max_steps=2000 model.dropout=0.3\n"
        "seq2seq train --resume runs/m30k training.max_steps=20000\n"
        "seq2seq train --init-from runs/m30k --out runs/m30k_ft training.lr=1e-4 "
        "training.max_steps=300",
    )
    add_config_args(p)
    p.add_argument("--out", metavar="DIR", help="model directory to create")
    p.add_argument(
        "--force",
        action="store_true",
        help="--out DIR holds a model or a run: delete it and start a new run there",
    )
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last.ckpt")
    p.add_argument(
        "--init-from",
        metavar="MODEL_DIR",
        help="fine-tune: start from MODEL_DIR's weights, SentencePiece and model shape "
        "(fresh optimizer and schedule; without --config, MODEL_DIR's config is the base)",
    )
    p.add_argument(
        "--mirror",
        default=os.environ.get("SEQ2SEQ_MIRROR"),
        help="offline corpus mirror (default: $SEQ2SEQ_MIRROR)",
    )
    p.add_argument("--cache-dir", help="corpus download cache")
    p.set_defaults(run=_run_train)


def _run_train(args) -> int:
    from seq2seq.train import resolve_config, train

    if args.resume and args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
        raise UserError("give either --out DIR (a new run) or --resume DIR, not both")
    out = args.resume or args.out
    if not out:
        raise UserError("give --out DIR for a new run, or --resume DIR")
    if args.force and args.resume:
        raise UserError("--force starts a new run: give it with --out DIR, not --resume")
    out_what = "--resume" if args.resume else "--out"
    check_paths(
        input_files=[("--config", args.config)],
        input_dirs=[("--mirror", args.mirror), ("--init-from", args.init_from)],
        output_dirs=[(out_what, None if args.force else out), ("--cache-dir", args.cache_dir)],
        replaced_dirs=[(out_what, out if args.force else None)],
    )
    cfg = resolve_config(
        out,
        resume=bool(args.resume),
        config_path=args.config,
        overrides=args.overrides,
        init_from=args.init_from,
    )
    train(
        cfg,
        out,
        resume=bool(args.resume),
        force=args.force,
        mirror=args.mirror,
        cache_dir=args.cache_dir,
    )
    return 0


def add_average(sub) -> None:
    """Add ``seq2seq average``."""
    p = add_command(
        sub,
        "average",
        "Average the weights of a run's last N periodic checkpoints (element-wise mean).\n"
        "--out FILE.safetensors writes the weights alone; any other --out becomes a full\n"
        "model directory that translates and evaluates like the run's own.",
        "seq2seq average runs/m30k -n 10 --out runs/m30k_avg10\n"
        "seq2seq average runs/m30k -n 5 --out avg5.safetensors",
    )
    p.add_argument("model_dir", metavar="DIR", help="a `seq2seq train` run directory")
    p.add_argument("-n", type=int, default=5, help="checkpoints to average (default: 5)")
    p.add_argument("--out", required=True, help="a .safetensors file or a model directory")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key.sub=value",
        help="changes to the written config.yaml, e.g. decoding.len_penalty=0.8",
    )
    p.set_defaults(run=_run_average)


def _run_average(args) -> int:
    from seq2seq.train import average_model_dir

    weights_only = args.out.endswith(".safetensors")
    check_paths(
        input_dirs=[("run directory", args.model_dir)],
        output_files=[("--out", args.out if weights_only else None)],
        replaced_dirs=[("--out", None if weights_only else args.out)],
    )
    out = average_model_dir(
        args.model_dir, n=args.n, out=args.out, force=args.force, overrides=args.overrides
    )
    print(f"wrote {out}")
    return 0

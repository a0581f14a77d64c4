"""``seq2seq plot mask`` and ``seq2seq plot attention``: attention masks and a model's
attention on one sentence as PNG heatmaps."""

from __future__ import annotations

import sys

from seq2seq.cli.arguments import add_command
from seq2seq.core import check_device, check_paths

__all__ = ["add_plot"]


def add_plot(sub) -> None:
    """Add ``seq2seq plot`` and its two subcommands."""
    p = add_command(
        sub,
        "plot",
        "Draw attention masks, or a model's attention on one sentence, as PNG heatmaps.",
        "seq2seq plot mask --kind window --len 8 --window 3 -o mask.png\n"
        'seq2seq plot attention runs/multi30k_small --text "A man rides a bike." -o attn.png',
    )
    what = p.add_subparsers(dest="plot_what", metavar="WHAT")
    what.required = True
    m = add_command(
        what,
        "mask",
        "Draw one mask as a grid: rows = queries, columns = keys, allowed vs hidden cells.",
        "seq2seq plot mask --kind block --len 12 --block 4 --prev-blocks 1 -o block.png",
    )
    m.add_argument(
        "--kind",
        default="causal",
        metavar="{causal,window,block,padding,full}",  # checked by mask_for_kind: one-line error
        help="causal, window (sliding), block (block causal), padding (key padding), "
        "full (the encoder's bidirectional mask) (default: causal)",
    )
    m.add_argument("--len", type=int, default=8, dest="length", help="positions (default: 8)")
    m.add_argument("--window", type=int, default=3, help="window: keys seen, own included (3)")
    m.add_argument("--block", type=int, default=4, help="block: block length (default: 4)")
    m.add_argument(
        "--prev-blocks", type=int, default=1, help="block: earlier blocks seen (default: 1)"
    )
    m.add_argument("--pad", type=int, default=2, help="padding: padded keys at the end (2)")
    m.add_argument("-o", "--output", required=True, help="the .png to write")
    m.add_argument("--size", default="4x4", help="WIDTHxHEIGHT in inches (default: 4x4)")
    m.add_argument("--dpi", type=float, default=100, help="pixels per inch (default: 100)")
    m.set_defaults(run=_run_plot_mask)
    a = add_command(
        what,
        "attention",
        "Translate one sentence greedily and draw encoder self-, decoder self- and "
        "cross-attention with the SentencePiece pieces as labels.",
        'seq2seq plot attention runs/multi30k_small --text "A man rides a bike." -o attn.png',
    )
    a.add_argument("model_dir", help="a model directory (from `seq2seq train`)")
    a.add_argument("--text", required=True, help="one source sentence")
    a.add_argument(
        "--target", help="draw the attention on this target (e.g. the reference) instead"
    )
    a.add_argument("-o", "--output", required=True, help="the .png to write")
    a.add_argument("--layer", type=int, help="layer, 0-based, -1 = last (default: the last layer)")
    a.add_argument("--head", type=int, help="head, 0-based (default: the mean over all heads)")
    a.add_argument("--size", help="WIDTHxHEIGHT in inches (default: grows with the sentence)")
    a.add_argument("--dpi", type=float, default=100, help="pixels per inch (default: 100)")
    a.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    a.add_argument("--source-lang", metavar="LANG", help="a multilingual model's source language")
    a.add_argument("--target-lang", metavar="LANG", help="a multilingual model's target language")
    a.set_defaults(run=_run_plot_attention)


def _run_plot_mask(args) -> int:
    from seq2seq.evaluate import mask_for_kind, mask_title, parse_size, plot_mask

    shape = dict(
        window=args.window, block_size=args.block, prev_blocks=args.prev_blocks, pad=args.pad
    )
    check_paths(output_files=[("-o", args.output)])
    mask = mask_for_kind(args.kind, args.length, **shape)
    title = mask_title(args.kind, args.length, **shape)
    path = plot_mask(mask, title=title, path=args.output, size=parse_size(args.size), dpi=args.dpi)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _run_plot_attention(args) -> int:
    from seq2seq.evaluate import attention_maps, check_png_output, parse_size, plot_attention
    from seq2seq.model import load_model_dir

    size = parse_size(args.size) if args.size else None
    check_png_output(args.output, args.dpi)
    check_device(args.device)
    check_paths(
        input_dirs=[("model directory", args.model_dir)], output_files=[("-o", args.output)]
    )
    loaded = load_model_dir(args.model_dir, device=args.device)
    maps = attention_maps(
        loaded,
        args.text,
        layer=args.layer,
        head=args.head,
        target=args.target,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )
    path = plot_attention(maps, args.output, size=size, dpi=args.dpi)
    print(f"{maps.source}\t{maps.translation}")
    print(f"wrote {path}", file=sys.stderr)
    return 0

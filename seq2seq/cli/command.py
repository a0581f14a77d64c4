"""The ``seq2seq`` command. Each subcommand is a thin wrapper over one module.

User mistakes (:class:`seq2seq.core.errors.UserError`) print one line on stderr and exit 2;
``--debug`` shows the traceback instead. Each subcommand checks its paths first
(:func:`seq2seq.core.paths.check_paths`). A command stopped by SIGINT exits 130, by SIGTERM 143, with
one line saying how to continue (:mod:`seq2seq.core.signals`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import textwrap

from seq2seq.core import UserError, check_paths

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


def _prepare(sub) -> None:
    p = _add(
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
        splits=[s for s in args.splits.split(",") if s] if args.splits else None,
        cache_dir=args.cache_dir,
        mirror=args.mirror,
        log=print,
    )
    return 0


_SUBCOMMANDS.append(_prepare)


def _train(sub) -> None:
    p = _add(
        sub,
        "train",
        "Train a translator into a self-contained model directory (config, SentencePiece,\n"
        "checkpoints, logs, and the exported model.safetensors + manifest at the end).\n"
        "--resume DIR continues a run exactly where its last checkpoint left it; overrides\n"
        "may then change the training section (e.g. training.max_steps), not the model or data.",
        "seq2seq train --config configs/multi30k_quick.yaml --out runs/m30k\n"
        "seq2seq train --config configs/multi30k_quick.yaml --out runs/m30k "
        "training.max_steps=2000 model.dropout=0.3\n"
        "seq2seq train --resume runs/m30k training.max_steps=20000\n"
        "seq2seq train --init-from runs/m30k --out runs/m30k_ft training.lr=1e-4 "
        "training.max_steps=300",
    )
    _add_config_args(p)
    p.add_argument("--out", metavar="DIR", help="model directory to create")
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
    check_paths(
        input_files=[("--config", args.config)],
        input_dirs=[("--mirror", args.mirror), ("--init-from", args.init_from)],
        output_dirs=[
            ("--resume" if args.resume else "--out", out),
            ("--cache-dir", args.cache_dir),
        ],
    )
    cfg = resolve_config(
        out,
        resume=bool(args.resume),
        config_path=args.config,
        overrides=args.overrides,
        init_from=args.init_from,
    )
    train(cfg, out, resume=bool(args.resume), mirror=args.mirror, cache_dir=args.cache_dir)
    return 0


_SUBCOMMANDS.append(_train)


def _average(sub) -> None:
    p = _add(
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
    p.set_defaults(run=_run_average)


def _run_average(args) -> int:
    from seq2seq.train import average_model_dir

    weights_only = args.out.endswith(".safetensors")
    check_paths(
        input_dirs=[("run directory", args.model_dir)],
        output_files=[("--out", args.out if weights_only else None)],
        replaced_dirs=[("--out", None if weights_only else args.out)],
    )
    out = average_model_dir(args.model_dir, n=args.n, out=args.out, force=args.force)
    print(f"wrote {out}")
    return 0


_SUBCOMMANDS.append(_average)


def _plot(sub) -> None:
    p = _add(
        sub,
        "plot",
        "Draw attention masks, or a model's attention on one sentence, as PNG heatmaps.",
        "seq2seq plot mask --kind window --len 8 --window 3 -o mask.png\n"
        'seq2seq plot attention runs/multi30k_small --text "A man rides a bike." -o attn.png',
    )
    what = p.add_subparsers(dest="plot_what", metavar="WHAT")
    what.required = True
    m = _add(
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
    a = _add(
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
    _check_device(args)
    check_paths(
        input_dirs=[("model directory", args.model_dir)], output_files=[("-o", args.output)]
    )
    loaded = load_model_dir(args.model_dir, device=args.device)
    maps = attention_maps(loaded, args.text, layer=args.layer, head=args.head, target=args.target)
    path = plot_attention(maps, args.output, size=size, dpi=args.dpi)
    print(f"{maps.source}\t{maps.translation}")
    print(f"wrote {path}", file=sys.stderr)
    return 0


_SUBCOMMANDS.append(_plot)


# ---- translate / evaluate (seq2seq/decode/translator.py, seq2seq/evaluate/evaluation.py) ----


def _add_search_args(p: argparse.ArgumentParser) -> None:
    """Search and engine options shared by translate and evaluate (unset: the model's config)."""
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


def _set_threads(args: argparse.Namespace) -> None:
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)


def _check_device(args: argparse.Namespace) -> None:
    from seq2seq.core import check_device

    check_device(args.device)


def _search_overrides(args: argparse.Namespace) -> dict:
    method = None
    if args.beam is not None:
        method = "beam"
    elif args.greedy:
        method = "greedy"
    elif args.sample:
        method = "sample"
    return dict(
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


def _warn(command: str):
    def warn(message: str) -> None:
        print(f"seq2seq {command}: warning: {message}", file=sys.stderr, flush=True)

    return warn


def _translate(sub) -> None:
    p = _add(
        sub,
        "translate",
        "Translate text line by line with a model directory.\n\n"
        "Reads FILE or standard input and writes one output line per input line (an empty\n"
        "line gives an empty line). Lines are translated as soon as they arrive: typed lines\n"
        "one at a time, files and pipes in batches. With --nbest N > 1 each input line gives N\n"
        "lines `LINE ||| TEXT ||| SCORE` (LINE: 1-based input line number; SCORE: length-\n"
        "normalized log-probability; best first). Over-long lines are truncated to the\n"
        "model's max positions, with a warning naming the line. With -o FILE the output is\n"
        "written to FILE.partial and renamed to FILE only once complete; --resume continues\n"
        "an interrupted FILE.partial, skipping the input lines it already holds.",
        "echo 'A man rides a bike.' | seq2seq translate runs/multi30k_small\n"
        "seq2seq translate runs/multi30k_small -i test.en -o test.de --beam 5 --max-tokens 8000\n"
        "seq2seq translate runs/multi30k_small -i test.en --nbest 4 --beam 4\n"
        "printf 'A man rides a bike.\\tFahrrad\\n' | seq2seq translate runs/multi30k_small "
        "--constraints unordered",
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="+",
        help="model directory (seq2seq train --out); several: an ensemble (their mean "
        "probability at each step; same vocabularies)",
    )
    p.add_argument("-i", "--input", default="-", metavar="FILE", help="input text (- = stdin)")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument(
        "--resume", action="store_true", help="with -o: continue an interrupted FILE.partial"
    )
    p.add_argument(
        "--buffer-lines",
        type=int,
        default=1000,
        metavar="N",
        help="at most N already-available lines translated together (default: 1000)",
    )
    out = p.add_argument_group("output (seq2seq/decode/outputs.py)")
    out.add_argument(
        "--scores", action="store_true", help="TEXT ||| SCORE (length-normalized log-prob)"
    )
    out.add_argument(
        "--alignments",
        action="store_true",
        help="append ||| i-j word alignments (last decoder layer's cross-attention, mean of "
        "heads; torch or ctranslate2 engine)",
    )
    out.add_argument(
        "--output-format",
        default="text",
        choices=["text", "jsonl"],
        help="jsonl: one JSON object per input line (text, score, tokens, alignment, nbest)",
    )
    g = p.add_argument_group(
        "constrained decoding (README: Constrained decoding); fields follow the source on "
        "each line, tab-separated: [PREFIX] [CONSTRAINT ...] [<empty field> AVOID ...]"
    )
    g.add_argument(
        "--constraints",
        choices=["ordered", "unordered"],
        help="each line's fields after the source are phrases the output must hold",
    )
    g.add_argument(
        "--prefix",
        action="store_true",
        help="the first field after the source is text the output starts with",
    )
    g.add_argument(
        "--avoid",
        action="store_true",
        help="fields (after an empty field, with --constraints) are phrases never to output",
    )
    g.add_argument(
        "--terminology",
        metavar="FILE",
        help="SOURCE<TAB>TARGET lines: a line holding SOURCE must hold TARGET",
    )
    _add_search_args(p)
    p.set_defaults(run=_run_translate)


def _run_translate(args) -> int:
    from pathlib import Path

    from seq2seq.decode import (
        LineConstraints,
        Terminology,
        Translator,
        fingerprint,
        guard,
        open_lines,
        translate_stream,
    )

    if args.resume and not args.output:
        raise UserError("--resume needs -o FILE")
    if args.buffer_lines < 1:
        raise UserError(f"--buffer-lines must be >= 1, got {args.buffer_lines}")
    _set_threads(args)
    _check_device(args)
    check_paths(
        input_files=[("-i", args.input), ("--terminology", args.terminology)],
        input_dirs=[("model directory", args.model_dir)],
        output_files=[
            ("-o", args.output and f"{args.output}{suffix}")
            for suffix in ("", ".partial", ".partial.json")  # the output and what precedes it
        ],
    )
    line_constraints = LineConstraints(
        constraints=args.constraints,
        prefix=args.prefix,
        avoid=args.avoid,
        terminology=Terminology.load(args.terminology) if args.terminology else None,
    )
    reader = open_lines(args.input)
    if args.output:
        args.on_stop = f"{args.output}.partial holds the lines so far: rerun with --resume"
    translator = Translator.load(
        args.model_dir, device=args.device, engine=args.engine, **_search_overrides(args)
    )
    record = fingerprint(
        input_path=args.input,
        model_dir=args.model_dir,
        engine=args.engine,
        options={
            **dataclasses.asdict(translator.opts),
            "output_format": args.output_format,
            "scores": args.scores,
            "alignments": args.alignments,
            "constraints": args.constraints,
            "prefix": args.prefix,
            "avoid": args.avoid,
            "terminology": _file_id(args.terminology),
        },
    )
    with guard(args.output, resume=args.resume, record=record):  # --resume trusts FILE.partial
        translate_stream(
            translator,
            reader,
            stdout=sys.stdout.buffer,
            output=Path(args.output) if args.output else None,
            resume=args.resume,
            buffer_lines=args.buffer_lines,
            warn=_warn("translate"),
            output_format=args.output_format,
            scores=args.scores,
            alignments=args.alignments,
            line_constraints=line_constraints,
        )
    return 0


def _file_id(path: str | None) -> str | None:
    """A file's sha256 (for --resume's record), or None."""
    if path is None:
        return None
    from seq2seq.core import sha256_file

    return sha256_file(path)


_SUBCOMMANDS.append(_translate)

# ---- serve (seq2seq/serve/server.py) ----


def _serve(sub) -> None:
    p = _add(
        sub,
        "serve",
        "Serve a model over HTTP (FastAPI + uvicorn) with dynamic batching.\n\n"
        "POST /translate speaks LibreTranslate's API (JSON or form: q, source, target,\n"
        "format, alternatives) and GET /languages lists the pair; POST /v1/translate takes the\n"
        "search options below per request, with n-best lists and scores; GET /health,\n"
        "GET /v1/models; a web page at / and the API docs at /docs. Sentences of concurrent\n"
        "requests are translated together (--max-wait-ms, --max-tokens). SIGTERM finishes the\n"
        "requests in flight, then exits. Needs the serve extra (pip install 'seq2seq[serve]').",
        "seq2seq serve runs/multi30k_small --port 8080\n"
        "seq2seq serve runs/m30k_ct2 --engine ctranslate2 --host 0.0.0.0 --beam 4\n"
        "curl -s localhost:8080/translate -H 'Content-Type: application/json' "
        '-d \'{"q": "Two dogs play.", "source": "en", "target": "de"}\'',
    )
    p.add_argument(
        "model_dir", metavar="MODEL_DIR", help="model directory, or export folder (--engine)"
    )
    p.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="TCP port, 0 = any free (default 8080)")
    # Unset limits keep seq2seq.serve.config.ServeConfig's defaults (GET /v1/models shows those in
    # force); not imported here, so that building the parser stays cheap for every command.
    g = p.add_argument_group("limits and batching (unset: the defaults GET /v1/models lists)")
    g.add_argument("--max-chars", type=int, metavar="N", help="characters per request")
    g.add_argument("--max-sentence-chars", type=int, metavar="N", help="characters per sentence")
    g.add_argument("--max-sentences", type=int, metavar="N", help="sentences per request")
    g.add_argument("--max-beam", type=int, metavar="K", help="largest beam / n-best per request")
    g.add_argument(
        "--max-alternatives", type=int, metavar="N", help="largest LibreTranslate alternatives"
    )
    g.add_argument(
        "--max-wait-ms",
        type=float,
        metavar="MS",
        help="how long a queued sentence may wait for others to join its batch",
    )
    g.add_argument(
        "--max-batch-tokens",
        type=int,
        metavar="N",
        help="source tokens per batch (default: --max-tokens x the engine's batches per call)",
    )
    g.add_argument(
        "--no-batching",
        action="store_true",
        help="translate one request at a time (the baseline of benchmarks/serve_load.py)",
    )
    g.add_argument(
        "--continuous",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch engine, beam search: sentences join a running search between its steps "
        "(continuous batching) instead of waiting for the next static batch; off by default, "
        "slower than static batches on 2 cores (README, Serving)",
    )
    p.add_argument("--no-access-log", action="store_true", help="no log line per request")
    _add_search_args(p)
    p.set_defaults(run=_run_serve)


def _run_serve(args) -> int:
    try:
        from seq2seq.serve import ServeConfig, serve
    except ImportError as e:
        raise UserError(
            f"seq2seq serve needs the serve extra ({e.name} is missing): "
            "pip install 'seq2seq[serve]'"
        ) from None

    _set_threads(args)
    _check_device(args)
    check_paths(input_dirs=[("model directory", args.model_dir)])
    given = dict(
        max_chars=args.max_chars,
        max_sentence_chars=args.max_sentence_chars,
        max_sentences=args.max_sentences,
        max_beam=args.max_beam,
        max_alternatives=args.max_alternatives,
        max_wait_ms=args.max_wait_ms,
        max_batch_tokens=args.max_batch_tokens,
    )
    config = ServeConfig(
        **{k: v for k, v in given.items() if v is not None},
        batching=not args.no_batching,
        continuous=args.continuous,
    )
    serve(
        args.model_dir,
        engine=args.engine,
        device=args.device,
        host=args.host,
        port=args.port,
        config=config,
        access_log=not args.no_access_log,
        **_search_overrides(args),
    )
    return 0


_SUBCOMMANDS.append(_serve)


def _evaluate(sub) -> None:
    p = _add(
        sub,
        "evaluate",
        "Translate a test set and score it with sacreBLEU (BLEU, chrF, TER, with signatures).\n\n"
        "The test set is a corpus split (defaults: the model's data.corpus, data.pair,\n"
        "data.test_splits[0], data.variant) or --src/--ref files. Writes OUT_DIR/NAME.hyp\n"
        "(the hypotheses) and OUT_DIR/NAME.json (scores, signatures, options).\n"
        "--tokenized-lc scores like papers on lowercased tokenized references (sacreBLEU\n"
        "tokenize=none, lowercase): use it with a model trained on the tok variant.\n"
        "--moses-lc scores a model trained on raw text that way: its output and the raw\n"
        "references are Moses-normalized, lowercased and tokenized first (NAME.moses-lc.*).",
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
    _add_search_args(p)
    p.set_defaults(run=_run_evaluate)


def _run_evaluate(args) -> int:
    from seq2seq.evaluate import evaluate, format_scores

    _set_threads(args)
    _check_device(args)
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
        warn=_warn("evaluate"),
        **_search_overrides(args),
    )
    print(f"{result['src']} -> {result['hyp']} ({result['n_sentences']} sentences)")
    print(format_scores(result["scores"]))
    print(f"scores written to {result['json']}")
    return 0


_SUBCOMMANDS.append(_evaluate)

# ---- score (seq2seq/decode/scoring.py) ----


def _score(sub) -> None:
    p = _add(
        sub,
        "score",
        "Forced decoding: score given translations with a model (or an ensemble).\n\n"
        "Prints one line per (source, target) pair, `LOG_PROB<TAB>SCORE<TAB>N_TOKENS`:\n"
        "the summed log-probability of the target's pieces and EOS, that divided by\n"
        "N_TOKENS ** len_penalty (the beam search's score), and N_TOKENS (pieces + EOS);\n"
        "--output-format jsonl adds the per-token log-probabilities. The corpus perplexity\n"
        "goes to stderr. Several MODEL_DIRs score with the ensemble's mean probability.",
        "seq2seq score runs/m30k --src test.en --tgt test.hyp\n"
        "seq2seq score runs/m30k runs/m30k_seed2 --src test.en --tgt test.de -o scores.txt",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", nargs="+", help="model directory(ies)")
    p.add_argument("--src", required=True, metavar="FILE", help="source sentences")
    p.add_argument("--tgt", required=True, metavar="FILE", help="target sentences, aligned")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument(
        "--output-format", default="text", choices=["text", "jsonl"], help="default: text"
    )
    p.add_argument(
        "--len-penalty", type=float, help="normalization exponent (default: the model's)"
    )
    p.add_argument("--max-tokens", type=int, help="padded tokens per batch")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: torch's)")
    p.set_defaults(run=_run_score)


def _run_score(args) -> int:
    from seq2seq.core import atomic_open
    from seq2seq.decode import Scorer, score_files

    _set_threads(args)
    _check_device(args)
    check_paths(
        input_files=[("--src", args.src), ("--tgt", args.tgt)],
        input_dirs=[("model directory", args.model_dir)],
        output_files=[("-o", args.output)],
    )
    scorer = Scorer.load(args.model_dir, device=args.device, max_tokens=args.max_tokens)
    len_penalty = args.len_penalty
    if len_penalty is None:
        len_penalty = scorer.cfg.decoding.len_penalty
    kwargs = dict(len_penalty=len_penalty, output_format=args.output_format, warn=_warn("score"))
    if args.output:
        with atomic_open(args.output, "w", encoding="utf-8", newline="\n") as out:
            summary = score_files(scorer, args.src, args.tgt, out=out, **kwargs)
    else:
        summary = score_files(scorer, args.src, args.tgt, out=sys.stdout, **kwargs)
    print(
        f"{summary['pairs']} pairs, {summary['tokens']} target tokens (EOS included), "
        f"log-prob {summary['log_prob']:.4f}, perplexity {summary['perplexity']:.4f}",
        file=sys.stderr,
    )
    return 0


_SUBCOMMANDS.append(_score)

# ---- export (seq2seq/export/exporter.py) ----


def _export(sub) -> None:
    p = _add(
        sub,
        "export",
        "Export a model directory for fast inference: CTranslate2 or ONNX.\n\n"
        "The output folder is self-contained (weights, SentencePiece model(s), config.yaml,\n"
        "export.json, a README.md on loading it without seq2seq) and is what\n"
        "`seq2seq translate --engine ctranslate2|onnx OUT` reads. CTranslate2 cannot express\n"
        "block-causal or sliding-window decoder masks (export those to ONNX). A failed export\n"
        "leaves no OUT folder; an existing OUT is an error unless --force.",
        "seq2seq export runs/multi30k_small --format ctranslate2 --out runs/m30k_ct2\n"
        "seq2seq export runs/multi30k_small --format ctranslate2 --quantization int8 "
        "--out runs/m30k_ct2_int8\n"
        "seq2seq export runs/multi30k_small --format onnx --out runs/m30k_onnx\n"
        "seq2seq translate --engine ctranslate2 runs/m30k_ct2 -i test.en --beam 5",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="model directory (seq2seq train --out)")
    p.add_argument(
        "--format",
        choices=["ctranslate2", "onnx"],
        help="export format (default: the model's export.format)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to create")
    p.add_argument(
        "--quantization",
        choices=["none", "int8", "int8_float32", "float16"],
        help="CTranslate2 weight type (default: the model's export.quantization)",
    )
    p.add_argument("--opset", type=int, help="ONNX opset (default: the model's export.opset)")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder")
    p.set_defaults(run=_run_export)


def _run_export(args) -> int:
    from seq2seq.config import ExportConfig, load_config
    from seq2seq.export import describe, export_model

    check_paths(
        input_dirs=[("model directory", args.model_dir)], replaced_dirs=[("--out", args.out)]
    )
    defaults = ExportConfig()
    config = os.path.join(args.model_dir, "config.yaml")
    if os.path.isfile(config):
        defaults = load_config(config).export
    fmt = args.format or defaults.format
    quantization = args.quantization or (defaults.quantization if fmt == "ctranslate2" else "none")
    out = export_model(
        args.model_dir,
        args.out,
        fmt=fmt,
        quantization=quantization,
        opset=args.opset or defaults.opset,
        force=args.force,
    )
    print(describe(out), file=sys.stderr)
    return 0


_SUBCOMMANDS.append(_export)

# === end of subcommands ===


def _version() -> str:
    from seq2seq import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
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
    """Entry point of the ``seq2seq`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("SEQ2SEQ_DEBUG") == "1"
    from seq2seq.core import Stopped, raise_on_sigterm

    try:
        # serve has its own SIGTERM handling (finish the requests in flight, exit 0)
        with raise_on_sigterm() if args.command != "serve" else contextlib.nullcontext():
            return int(args.run(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"seq2seq {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Stopped) as e:  # 130 (SIGINT), 143 (SIGTERM): see signals.py
        stop = e if isinstance(e, Stopped) else Stopped(signal.SIGINT)
        hint = getattr(args, "on_stop", None)
        print(f"seq2seq {args.command}: {stop}" + (f"; {hint}" if hint else ""), file=sys.stderr)
        return stop.exit_status
    except BrokenPipeError:
        # The reader went away (`seq2seq translate ... | head`): not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

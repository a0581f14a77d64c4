"""``seq2seq serve``: a model over HTTP."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from seq2seq.cli.arguments import add_command, add_search_args, search_overrides, set_threads
from seq2seq.core import UserError, check_device, check_paths

__all__ = ["add_serve"]


def add_serve(sub) -> None:
    """Add ``seq2seq serve``."""
    p = add_command(
        sub,
        "serve",
        "Serve a model over HTTP (FastAPI + uvicorn) with dynamic batching.\n\n"
        "Speaks LibreTranslate's API (POST /translate with text or HTML and source auto,\n"
        "GET /languages, POST /detect, GET /frontend/settings, POST /translate_file) with its\n"
        "API keys (--api-keys, managed by `seq2seq keys`) and rate limits, kept in a Redis that\n"
        "workers and replicas share with --redis; POST /v1/translate\n"
        "takes the search options below per request; GET /health, GET /v1/models, GET /metrics\n"
        "(Prometheus); a web page at / and the API docs at /docs. A model directory that holds\n"
        "a CTranslate2 export (MODEL_DIR/export/NAME, int8 preferred) is served with it unless\n"
        "--engine says otherwise; several model directories are an ensemble (torch); --model DIR\n"
        "(repeated) or --models FILE serves several models, each request routed by its pair\n"
        "(through --pivot when no model has it; --max-loaded bounds the models in memory). Sentences\n"
        "of concurrent requests are translated together (--max-wait-ms, --max-tokens). SIGTERM\n"
        "finishes the requests in flight, then exits. Needs the serve extra.",
        "seq2seq serve runs/demo/averaged --port 8080\n"
        "seq2seq serve runs/m30k_ct2 --engine ctranslate2 --host 0.0.0.0 --beam 4\n"
        "seq2seq keys add --db keys.db --req-limit 60\n"
        "seq2seq serve runs/demo/averaged --api-keys keys.db --require-api-key --req-limit 30\n"
        "seq2seq keys add --redis redis://127.0.0.1:6379/0 --req-limit 60\n"
        "seq2seq serve runs/demo/averaged --redis redis://127.0.0.1:6379/0 --workers 2\n"
        "seq2seq serve --model runs/en-de --model runs/de-fr --max-loaded 1\n"
        "curl -s localhost:8080/translate -H 'Content-Type: application/json' "
        '-d \'{"q": "Two dogs play.", "source": "en", "target": "de"}\'',
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="*",
        help="model directory, or export folder; several model directories: an ensemble",
    )
    m = p.add_argument_group("several models (docs/serving.md, Several models)")
    m.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        metavar="DIR",
        help="one more model (a model directory or an export folder, its engine chosen as for "
        "MODEL_DIR), routed by its language directions; repeat for each model",
    )
    m.add_argument(
        "--models",
        dest="models_file",
        metavar="FILE",
        help="a YAML file listing models with per-model options (path, name, engine, "
        "directions, decoding, preload)",
    )
    m.add_argument(
        "--max-loaded",
        type=int,
        metavar="N",
        help="at most N models in memory: the others load on their first request, the least "
        "recently used is unloaded (default 0: all loaded at start)",
    )
    pv = m.add_mutually_exclusive_group()
    pv.add_argument(
        "--pivot",
        metavar="LANG",
        default="en",
        help="a pair no model serves is translated through LANG when both legs are served "
        "(default: en)",
    )
    pv.add_argument("--no-pivot", action="store_true", help="never translate through a pivot")
    p.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="TCP port, 0 = any free (default 8080)")
    # Unset limits keep seq2seq.serve.ServeConfig's defaults (GET /v1/models shows those in
    # force); not imported here, so that building the parser stays cheap for every command.
    g = p.add_argument_group("limits and batching (unset: the defaults GET /v1/models lists)")
    g.add_argument(
        "--max-chars",
        "--char-limit",
        type=int,
        metavar="N",
        help="characters per request (LibreTranslate's --char-limit; /frontend/settings' charLimit)",
    )
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
        "--lanes",
        type=int,
        metavar="N",
        help="batches in flight at once (default 0: as many as the engine runs at once, "
        "CTranslate2's workers on CPU; 1: one batch at a time)",
    )
    g.add_argument(
        "--continuous",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch engine, beam search: sentences join a running search between its steps "
        "(continuous batching) instead of waiting for the next static batch; off by default, "
        "slower than static batches on 2 cores (docs/serving.md)",
    )
    g.add_argument(
        "--max-queue",
        type=int,
        metavar="N",
        help="sentences queued for the engine beyond which a request gets 503 and Retry-After "
        "(0: no bound)",
    )
    k = p.add_argument_group("API keys, rate limits, files, metrics")
    k.add_argument("--api-keys", metavar="FILE", help="the key database (`seq2seq keys add`)")
    k.add_argument(
        "--redis",
        metavar="URL",
        help="redis://HOST:PORT/DB: keep API keys (`seq2seq keys add --redis URL`), rate-limit "
        "counts and translated files in this Redis, shared by every worker and replica "
        "(instead of --api-keys; checked before the port opens)",
    )
    k.add_argument("--require-api-key", action="store_true", help="refuse requests without a key")
    k.add_argument(
        "--req-limit",
        type=int,
        metavar="N",
        help="requests per minute per key without its own limit, and per address without a "
        "key (default: no limit)",
    )
    k.add_argument(
        "--slowdown-delay",
        type=float,
        metavar="S",
        help="seconds a request over its limit waits for its 429, so that a client retrying "
        "at once takes little CPU from the others (default 1; 0: at once)",
    )
    k.add_argument("--max-file-bytes", type=int, metavar="N", help="largest /translate_file")
    k.add_argument(
        "--file-expiry", type=float, metavar="S", help="seconds a translated file is kept"
    )
    k.add_argument("--no-metrics", action="store_true", help="no GET /metrics, nothing counted")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="server processes on the one port, each with its own engine (default 1; more than "
        "one needs --redis, where they share keys, limits and files)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        metavar="S",
        help="seconds a request's head and body may take to arrive; a slower client gets 408 "
        "or a closed connection (default 30)",
    )
    p.add_argument("--no-access-log", action="store_true", help="no log line per request")
    p.add_argument(
        "--no-repetition-guard",
        action="store_true",
        help="do not search a looping translation again with no_repeat_ngram",
    )
    add_search_args(p)
    # serve chooses its engine (the model directory's CTranslate2 export, else torch)
    p.set_defaults(run=_run_serve, engine=None)


def _run_serve(args) -> int:
    try:
        from seq2seq.serve import ModelSpec, ServeConfig, read_models_file, serve
    except ImportError as e:
        raise UserError(
            f"seq2seq serve needs the serve extra ({e.name} is missing): "
            "pip install 'seq2seq[serve]'"
        ) from None

    set_threads(args.threads)
    check_device(args.device)
    check_paths(input_dirs=[("model directory", d) for d in args.model_dir])
    models = [
        ModelSpec(folders=(Path(d),), engine=args.engine, where="--model") for d in args.models
    ]
    if args.models_file:
        models += [
            spec if spec.engine else dataclasses.replace(spec, engine=args.engine)
            for spec in read_models_file(args.models_file)
        ]
    if not args.model_dir and not models:
        raise UserError("give a model to serve: MODEL_DIR, --model DIR or --models FILE")
    given = dict(
        max_queue=args.max_queue,
        req_limit=args.req_limit,
        slowdown_delay_s=args.slowdown_delay,
        max_file_bytes=args.max_file_bytes,
        file_expiry_s=args.file_expiry,
        max_chars=args.max_chars,
        max_sentence_chars=args.max_sentence_chars,
        max_sentences=args.max_sentences,
        max_beam=args.max_beam,
        max_alternatives=args.max_alternatives,
        max_wait_ms=args.max_wait_ms,
        max_batch_tokens=args.max_batch_tokens,
        lanes=args.lanes,
        max_loaded=args.max_loaded,
        read_timeout_s=args.read_timeout,
    )
    config = ServeConfig(
        **{k: v for k, v in given.items() if v is not None},
        batching=not args.no_batching,
        continuous=args.continuous,
        api_keys=args.api_keys,
        redis=args.redis,
        require_api_key=args.require_api_key,
        metrics=not args.no_metrics,
        repetition_guard=not args.no_repetition_guard,
        pivot=None if args.no_pivot else args.pivot,
    )
    if args.api_keys:
        check_paths(input_files=[("--api-keys", args.api_keys)])
    serve(
        args.model_dir or None,
        models=models,
        engine=args.engine,
        device=args.device,
        host=args.host,
        port=args.port,
        config=config,
        access_log=not args.no_access_log,
        workers=args.workers,
        threads=args.threads,
        **search_overrides(args),
    )
    return 0

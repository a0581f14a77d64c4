"""``seq2seq serve``'s start and stop: check every model (folders, engines, directions, the
routing table) and the state backend (the key file, or Redis: ``--redis``) before the port
opens, listen, run the app under uvicorn, which loads the models on the engine thread while
``/health`` already answers (``/ready`` says when they are in), until SIGTERM or Ctrl-C; with
``--workers N``, N such processes on the one socket (:mod:`seq2seq.serve.workers`).

A stop stops accepting connections, finishes the requests in flight, then exits (uvicorn's
graceful shutdown, then :meth:`~seq2seq.serve.batcher.Batcher.close` finishes anything still
queued).

Request heads are bounded (:data:`~seq2seq.serve.http_protocol.MAX_HEADER_BYTES`), and so is the
time a request may take to arrive (``--read-timeout``), under every installation:
:func:`~seq2seq.serve.http_protocol.http_settings` picks the parser.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from seq2seq.core import UserError
from seq2seq.serve.app import create_app
from seq2seq.serve.batcher import engine_thread
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.http_protocol import http_settings
from seq2seq.serve.logs import log, redact_logs
from seq2seq.serve.model_specs import ModelSpec, PlannedModel, distinct_names, plan_model
from seq2seq.serve.served_model import load_here
from seq2seq.serve.state_redis import check_reachable
from seq2seq.serve.workers import supervise

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["serve", "serve_on"]


def serve(
    model_dir: str | Path | list[str | Path] | None = None,
    *,
    models: Sequence[ModelSpec] = (),
    engine: str | None = None,
    device: str = "cpu",
    host: str = "127.0.0.1",
    port: int = 8080,
    config: ServeConfig | None = None,
    access_log: bool = True,
    log_level: str = "info",
    workers: int = 1,
    threads: int | None = None,
    **search: object,
) -> None:
    """Serve ``model_dir`` and ``models`` until SIGTERM or SIGINT (then finish in-flight work).

    Args:
        model_dir: a model directory, or an export folder for ``ctranslate2`` / ``onnx``; a
            list of model directories: an ensemble (one model). None: only ``models``.
        models: more models (``--model``, ``--models``), each routed by its directions.
        engine: ``model_dir``'s engine; None: the CTranslate2 export the model directory
            holds, if any, else torch (:func:`~seq2seq.serve.served_model.choose_engine`).
        device: torch device (cpu, cuda).
        host: interface to listen on (127.0.0.1: this machine only).
        port: TCP port.
        config: limits, batching, ``max_loaded``, ``pivot`` and ``redis``.
        access_log: log one line per request.
        log_level: uvicorn's log level.
        workers: server processes on the port, each with its own engines
            (:mod:`seq2seq.serve.workers`); more than one needs ``config.redis``.
        threads: torch's threads in each worker process (None: torch's default).
        **search: search-option defaults of every model (None = the model's config), as
            ``seq2seq translate``.

    Raises:
        UserError: a bad model folder, engine, models file entry or option; two models that
            claim a direction with no rule to choose; a key file that cannot be used; a Redis
            URL that does not answer; a port that is taken (all before the port opens); a
            model loaded at start that fails to load.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    config = config or ServeConfig()
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if workers > 1 and not config.redis:
        raise UserError(
            "--workers above 1 needs --redis URL: the workers share API keys, rate limits and "
            "translated files through it (a local redis-server will do)"
        )
    specs = list(models)
    if model_dir is not None:
        dirs = list(model_dir) if isinstance(model_dir, (list, tuple)) else [model_dir]
        specs.insert(0, ModelSpec(folders=tuple(Path(d) for d in dirs), engine=engine))
    if not specs:
        raise UserError("give a model to serve: MODEL_DIR, --model DIR or --models FILE")
    planned = distinct_names(specs, [plan_model(spec, search) for spec in specs])
    # The app checks the routing table, the budget and the key file (it loads nothing yet):
    # built here, before the port opens; with workers, each builds its own again.
    app, executor = _build(planned, device, config)
    if workers > 1:
        executor.shutdown()
    if config.redis:
        check_reachable(config.redis)  # one line and exit 2, before the port opens
    # Listen before the models load: clients that connect meanwhile get /health and a 503 from
    # /ready, and translation requests wait for their model.
    try:
        sock = _listen(host, port)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    for m in planned:
        log.info(
            "model %s (%s, %s engine: %s)",
            m.name, ", ".join(f"{s}->{t}" for s, t in m.directions), m.engine,
            ", ".join(str(f.resolve()) for f in m.folders),
        )  # fmt: skip
    try:
        if workers == 1:
            _run(app, executor, planned, config, access_log, log_level, sock=sock,
                 ready=lambda line: _announce(line, sock))  # fmt: skip
        else:
            job = {
                "planned": [_model_json(m) for m in planned],
                "device": device,
                "config": dataclasses.asdict(config),
                "access_log": access_log,
                "log_level": log_level,
                "threads": threads,
            }
            supervise("seq2seq.serve.launcher:serve_on", job, sock, workers)
    finally:
        sock.close()


def _announce(line: str, sock: socket.socket) -> None:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info("%s on http://%s:%d (API docs: /docs)", line, shown, port)


def _model_json(m: PlannedModel) -> dict:
    return {**dataclasses.asdict(m), "folders": [str(f) for f in m.folders],
            "directions": [list(d) for d in m.directions], "search": dict(m.search)}  # fmt: skip


def serve_on(job: dict, *, sock: socket.socket, ready: Callable[[str], None]) -> None:
    """A worker process of ``--workers`` on the listening ``sock``: build the app, call
    ``ready(line)`` (``line``: what it serves), run uvicorn (the models load at its startup)
    until SIGTERM or SIGINT, finish in-flight work.

    Args:
        job: what :func:`serve` planned, as JSON: ``planned`` (the models), ``device``,
            ``config`` (the ServeConfig's fields), ``access_log``, ``log_level``, ``threads``.
        sock: the listening socket.
        ready: called once the app is built.

    Raises:
        UserError: a bad option; a model loaded at start that fails to load.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    if job["threads"] is not None:
        import torch

        torch.set_num_threads(job["threads"])
    planned = [
        PlannedModel(**{**m, "folders": tuple(Path(f) for f in m["folders"]),
                        "directions": tuple(tuple(d) for d in m["directions"])})
        for m in job["planned"]
    ]  # fmt: skip
    config = ServeConfig(**job["config"])
    app, executor = _build(planned, job["device"], config)
    _run(app, executor, planned, config, job["access_log"], job["log_level"], sock=sock,
         ready=ready)  # fmt: skip


def _build(planned: list[PlannedModel], device: str, config: ServeConfig):
    """The app and the engine thread it runs every engine call on (loading and warm-up
    included: engine_thread says why: a model loaded on another thread decodes slower).

    Raises:
        UserError: the routing table, the budget or the key file.
    """
    executor = engine_thread()

    def load(model: PlannedModel):
        return load_here(model.load_target, engine=model.engine, device=device, search=model.search)

    try:
        return create_app(config=config, executor=executor, models=planned, load=load), executor
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise


def _run(
    app,
    executor,
    planned: list[PlannedModel],
    config: ServeConfig,
    access_log: bool,
    log_level: str,
    *,
    sock: socket.socket,
    ready: Callable[[str], None],
) -> None:
    """Serve ``app`` on ``sock`` under uvicorn until SIGTERM or SIGINT (``ready(line)`` first).

    Raises:
        UserError: a model loaded at start that fails to load.
    """
    import uvicorn

    uv_config = uvicorn.Config(
        app,
        access_log=access_log,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=None,
        # a bounded request head and read time, whichever parser is installed
        **http_settings(read_timeout_s=config.read_timeout_s),
    )
    redact_logs()  # after uvicorn.Config has set its handlers: no key or file token is logged
    server = uvicorn.Server(uv_config)
    fatal: list[str] = []

    def stop_on(message: str) -> None:
        fatal.append(message)
        server.should_exit = True

    app.state.pool.on_fatal = stop_on
    budget = f", at most {config.max_loaded} loaded" if config.max_loaded else ""
    ready(f"serving {', '.join(m.name for m in planned)}{budget}")
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done; a no-op
    # handler lets the process then exit 0 (stopped cleanly) instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        executor.shutdown()
    if fatal:
        raise UserError(fatal[0])


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port).

    Raises:
        UserError: the address cannot be used (taken, not this machine's, bad port).
    """
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock

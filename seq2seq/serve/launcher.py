"""``seq2seq serve``'s start and stop: check Redis (``--redis``), listen, load the model on the
engine thread, run the app under uvicorn until SIGTERM or Ctrl-C; with ``--workers N``, N such
processes on the one socket (:mod:`seq2seq.serve.workers`).

A stop stops accepting connections, finishes the requests in flight, then exits (uvicorn's
graceful shutdown, then :meth:`~seq2seq.serve.batcher.Batcher.close` finishes anything still
queued).

Request heads are bounded (:data:`~seq2seq.serve.http_protocol.MAX_HEADER_BYTES`) under every
installation: :func:`~seq2seq.serve.http_protocol.http_settings` picks the parser.
"""

from __future__ import annotations

import logging
import signal
import socket
from typing import TYPE_CHECKING

from seq2seq.core import UserError
from seq2seq.serve.app import create_app
from seq2seq.serve.batcher import engine_thread
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.http_protocol import http_settings
from seq2seq.serve.logs import log, redact_logs
from seq2seq.serve.served_model import choose_engine, load_translator
from seq2seq.serve.state_redis import check_reachable
from seq2seq.serve.workers import supervise

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["serve"]


def serve(
    model_dir: str | Path | list[str | Path],
    *,
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
    """Load ``model_dir`` and serve it until SIGTERM or SIGINT (then finish in-flight work).

    Args:
        model_dir: a model directory, or an export folder for ``ctranslate2`` / ``onnx``; a
            list of model directories: an ensemble.
        engine: the Translator's engine; None: the CTranslate2 export the model directory
            holds, if any, else torch (:func:`~seq2seq.serve.served_model.choose_engine`).
        device: torch device (cpu, cuda).
        host: interface to listen on (127.0.0.1: this machine only).
        port: TCP port.
        config: limits and batching.
        access_log: log one line per request.
        log_level: uvicorn's log level.
        workers: server processes on the port, each with its own engine
            (:mod:`seq2seq.serve.workers`); more than one needs ``config.redis``.
        threads: torch's threads in each worker process (None: torch's default).
        **search: search-option defaults (None = the model's config), as ``seq2seq translate``.

    Raises:
        UserError: a bad model directory, engine or option; a port that is taken; a Redis URL
            that does not answer (before the port opens).
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
    # Listen first: a taken port fails before the model loads, and clients that connect
    # while it loads wait in the backlog instead of being refused.
    dirs = list(model_dir) if isinstance(model_dir, (list, tuple)) else [model_dir]
    engine, dirs = choose_engine(dirs, engine)
    if config.redis:
        check_reachable(config.redis)  # one line and exit 2, before the port opens
    sock = _listen(host, port)
    job = (dirs, engine, device, config, access_log, log_level, search, threads)
    try:
        if workers == 1:
            serve_on(*job, sock=sock, ready=lambda line: _announce(line, sock))
        else:
            supervise(serve_on, job, sock, workers)
    finally:
        sock.close()


def _announce(line: str, sock: socket.socket) -> None:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info("%s on http://%s:%d (API docs: /docs)", line, shown, port)


def serve_on(
    dirs: list,
    engine: str,
    device: str,
    config: ServeConfig,
    access_log: bool,
    log_level: str,
    search: dict,
    threads: int | None,
    *,
    sock: socket.socket,
    ready,
) -> None:
    """One server process on the listening ``sock``: load the model, call ``ready(line)``
    (``line``: what it serves), run uvicorn until SIGTERM or SIGINT, finish in-flight work.

    Raises:
        UserError: a bad model directory, engine or option.
    """
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    # Every engine call runs on one thread, loading and warm-up included (engine_thread says
    # why: a model loaded on another thread decodes slower).
    executor = engine_thread()
    try:
        translator, info = load_translator(
            dirs, engine=engine, device=device, search=search, executor=executor
        )
        app = create_app(translator, info=info, config=config, executor=executor)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    uv_config = uvicorn.Config(
        app,
        access_log=access_log,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=None,
        **http_settings(),  # a bounded request head, whichever parser is installed
    )
    redact_logs()  # after uvicorn.Config has set its handlers: no key or file token is logged
    server = uvicorn.Server(uv_config)
    directions = ", ".join(f"{s}->{t}" for s, t in info.directions)
    ready(f"serving {info.id} ({directions}, {engine} engine: {info.path})")
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done; a no-op
    # handler lets the process then exit 0 (stopped cleanly) instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        executor.shutdown()


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

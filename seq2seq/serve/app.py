"""The FastAPI app of ``seq2seq serve``: its error answers, API keys, metrics, the web page,
and the routers that hold the routes.

The app serves one or several models (:class:`~seq2seq.serve.model_pool.ModelPool`: each a
:class:`~seq2seq.decode.translator.Translator` with its own batcher, loaded at start or on
demand within ``--max-loaded``). A request's language pair picks its model(s)
(:mod:`seq2seq.serve.routing`: a direct model, or two through the pivot language,
:mod:`seq2seq.serve.pivot`). Request handlers run on the event loop: they read and check the
body (:mod:`seq2seq.serve.bodies`, :mod:`seq2seq.serve.schemas`) and hand the texts to the
model's service (:mod:`seq2seq.serve.service`), which cuts them into sentences
(:mod:`seq2seq.decode.paragraphs`), queues them on its :class:`~seq2seq.serve.batcher.Batcher`
(the sentences of concurrent requests are translated together in token-budgeted batches on
the engine thread: :func:`seq2seq.serve.batcher.engine_thread`) and rejoins the results.

Routers (docs/serving.md has the table):

- LibreTranslate's API (:mod:`seq2seq.serve.libre`): ``POST /translate`` (text or HTML,
  ``source: auto``, alternatives), ``GET /languages``, ``POST /detect``, ``GET
  /frontend/settings``, ``POST /translate_file`` and ``GET /download_file/{token}/{name}``.
- The native API (:mod:`seq2seq.serve.native`): ``POST /v1/translate`` (the search options
  of ``seq2seq translate``, n-best lists, scores, word alignments, constraints, the route
  taken), ``POST /v1/attention`` (cross-attention, torch engine), ``GET /v1/models``.
- Probes (:mod:`seq2seq.serve.probes`): ``GET /health`` (liveness), ``GET /ready``.
- Here: ``GET /metrics`` (Prometheus: :mod:`seq2seq.serve.metrics`), ``GET /`` (a plain HTML +
  JavaScript page, ``seq2seq/serve/static/index.html``) and ``GET /docs`` (OpenAPI).

API keys and rate limits (:mod:`seq2seq.serve.access`) apply to the routes that translate or
detect; ``/languages``, ``/health``, ``/ready``, ``/frontend/settings``, ``/metrics``, the page
and the download of a translated file need no key and are never limited. Past ``--max-queue``
queued sentences a request gets 503 with ``Retry-After``.

Bad input never reaches the engine: the body is read with a byte limit, must be UTF-8 (and
valid Unicode: no unpaired surrogates from ``\\ud800`` escapes), JSON or a form, with fields
of the right types; empty text, a pair no model serves and texts over the configured limits
(:class:`~seq2seq.serve.config.ServeConfig`) are 4xx answers with a one-line ``error``
message. An engine exception is a 500 for the requests it hit and the server goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from seq2seq.serve.access import Access, Client
from seq2seq.serve.bodies import RequestError
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.detect import Detector
from seq2seq.serve.glossaries import SqliteGlossaries
from seq2seq.serve.libre import libre_routes
from seq2seq.serve.logs import log
from seq2seq.serve.metrics import CONTENT_TYPE, MetricsMiddleware, ServerMetrics
from seq2seq.serve.model_pool import Loader, ModelPool
from seq2seq.serve.model_specs import PlannedModel, check_names
from seq2seq.serve.native import native_routes
from seq2seq.serve.probes import ReadinessCheck, probe_routes
from seq2seq.serve.routing import Router
from seq2seq.serve.schemas import LibreTranslateRequest
from seq2seq.serve.state_local import LocalState
from seq2seq.serve.state_redis import RedisState

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from seq2seq.serve.served_model import ModelInfo
    from seq2seq.serve.state import State

__all__ = ["create_app", "open_state"]


def _static_page() -> str:
    return (
        resources.files("seq2seq.serve").joinpath("static/index.html").read_text(encoding="utf-8")
    )


def open_state(config: ServeConfig) -> State:
    """The state backend ``config`` asks for (:mod:`seq2seq.serve.state`): Redis with
    ``config.redis``, else the key file and this process' memory.

    Raises:
        UserError: a key file that is missing or not a key database; a malformed Redis URL.
    """
    if config.redis:
        return RedisState(config.redis, file_expiry_s=config.file_expiry_s,
                          max_file_bytes=64 * config.max_file_bytes)  # fmt: skip
    return LocalState(config)


def _planned(translator, info: ModelInfo) -> PlannedModel:
    """A loaded translator as a model of the pool."""
    many = info.many  # M2M100 / NLLB: any two of its languages
    return PlannedModel(
        name=info.id,
        engine=info.engine,
        folders=(Path(info.path),),
        directions=tuple((a, b) for a in many for b in many if a != b) or tuple(info.directions),
        multilingual=bool(many) or bool(getattr(translator, "multilingual", False)),
        search={},
        aliases=tuple((c, x) for c, x in zip(info.model_codes, many) if c.lower() != x),
    )


def create_app(
    translator=None,
    *,
    info: ModelInfo | None = None,
    config: ServeConfig | None = None,
    executor: ThreadPoolExecutor | None = None,
    models: Sequence[PlannedModel] = (),
    load: Loader | None = None,
    readiness: Sequence[ReadinessCheck] = (),
):
    """The FastAPI app serving ``translator``, or ``models``.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator` (one model), or
            None with ``models``.
        info: what to report about it (:func:`~seq2seq.serve.served_model.model_info`).
        config: limits, batching, ``max_loaded`` and ``pivot`` (default
            :class:`~seq2seq.serve.config.ServeConfig`).
        executor: the engine thread (:func:`seq2seq.serve.batcher.engine_thread`) the
            translator was loaded on and that runs every engine call and load; the caller
            shuts it down. None: each batcher's own thread (a given translator only).
        models: the models to serve, checked (:func:`~seq2seq.serve.model_specs.plan_model`),
            loaded by ``load`` on the engine thread (at start, or on demand within
            ``config.max_loaded``), after ``translator`` if both are given.
        load: ``load(model) -> (translator, info)``, for ``models``.
        readiness: checks ``GET /ready`` runs besides the models' (``app.state.readiness``
            takes more).

    The pool starts with the app's lifespan (loading the models that load at start in the
    background) and finishes every queue when the app shuts down; run the app under uvicorn
    (or ``httpx.ASGITransport`` inside a lifespan).

    Raises:
        UserError: ``config.api_keys`` names a file that is missing or not a key database;
            ``config.redis`` is not a Redis URL; two models claim a direction and no rule chooses; two models share a name.
    """
    config = config or ServeConfig()
    planned = list(models)
    given = {}
    if translator is not None:
        if info is None:
            raise TypeError("create_app(translator) needs info=")
        first = _planned(translator, info)
        planned.insert(0, first)
        given[first.name] = (translator, info)
    check_names(planned)
    router = Router(
        [(m.name, m.directions, m.multilingual) for m in planned],
        pivot=config.pivot,
        aliases=dict(a for m in planned for a in m.aliases),
    )
    state = open_state(config)  # keys, counts and files: in memory, or shared through Redis
    access = Access(state, require_key=config.require_api_key, req_limit=config.req_limit)
    # named glossaries live next to the keys in the key file (none with --redis)
    glossaries = SqliteGlossaries(config.api_keys) if config.api_keys else None
    pool: ModelPool
    metrics = ServerMetrics(queued=lambda: pool.queued()) if config.metrics else None
    pool = ModelPool(
        planned,
        config=config,
        executor=executor,
        load=load,
        metrics=metrics,
        max_loaded=config.max_loaded,
        given=given,
    )
    stopping = False

    @asynccontextmanager
    async def lifespan(app):
        nonlocal stopping
        await state.start()
        await pool.start()
        try:
            yield
        finally:
            stopping = True
            await pool.close()
            await state.close()

    languages = ", ".join(f"{s}->{t}" for s, t in router.directions())
    app = FastAPI(
        title="seq2seq translation server",
        version="1",
        description=(
            f"Translates {languages} with {', '.join(pool.names())}. `POST /translate` speaks "
            "LibreTranslate's API; `POST /v1/translate` is the native API with the search "
            "options of `seq2seq translate`."
        ),
        lifespan=lifespan,
    )
    app.state.pool = pool
    app.state.router = router
    app.state.readiness = list(readiness)
    app.state.shared = state  # the state backend

    if config.redis:

        async def redis_answers() -> str | None:
            return None if await state.ping() else f"{state.description} does not answer"

        app.state.readiness.append(redis_answers)
    if metrics is not None:
        app.add_middleware(MetricsMiddleware, metrics=metrics)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(_request, exc: RequestError):
        if exc.status == 429 and config.slowdown_delay_s:
            await asyncio.sleep(config.slowdown_delay_s)  # see ServeConfig.slowdown_delay_s
        answer = error(exc.status, exc.message)
        if exc.retry_after is not None:
            answer.headers["Retry-After"] = str(exc.retry_after)
        return answer

    async def admit(request: Request, fields: dict) -> Client:
        """Check the request's key (body field or query string) and count it: who it is."""
        client = await access.check_request(request, fields)
        if metrics is not None and client.key is not None:
            metrics.key_request(client.key)
        return client

    @app.exception_handler(HTTPException)
    async def _http_error(_request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request, exc: RequestValidationError):
        return error(400, f"invalid request: {exc.errors()[:1]}")

    @app.exception_handler(Exception)
    async def _internal_error(_request, exc: Exception):
        log.exception("internal error")  # the cause for the operator, not for the client
        return error(500, "internal error (the server's log has the cause)")

    libre_schema = {
        "requestBody": {
            "required": True,
            "content": {
                kind: {"schema": LibreTranslateRequest.model_json_schema()}
                for kind in (
                    "application/json",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data",
                )
            },
        }
    }
    app.include_router(
        libre_routes(
            pool,
            router,
            config=config,
            admit=admit,
            detector=Detector(),
            state=state,
            openapi=libre_schema,
            glossaries=glossaries,
        )
    )
    app.include_router(
        native_routes(
            pool,
            router,
            config=config,
            admit=admit,
            keys_on=state.keys_enabled,
            glossaries=glossaries,
        )
    )
    app.include_router(probe_routes(pool, app.state.readiness, lambda: stopping))

    @app.get("/metrics", include_in_schema=False)
    async def metrics_page() -> Response:
        if metrics is None:
            raise RequestError(404, "metrics are off on this server (--no-metrics)")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(_static_page())

    return app

"""The FastAPI app of ``seq2seq serve``: its routes, its error answers and the web page.

The app serves one :class:`~seq2seq.decode.translator.Translator` (a model directory, or a
CTranslate2 / ONNX export folder). Request handlers run on the event loop: they read and check
the body (:mod:`seq2seq.serve.bodies`, :mod:`seq2seq.serve.schemas`) and hand the texts to the
service (:mod:`seq2seq.serve.service`), which cuts them into sentences
(:mod:`seq2seq.serve.paragraphs`), queues them on a :class:`~seq2seq.serve.batcher.Batcher`
(the sentences of concurrent requests are translated together in token-budgeted batches on
one worker thread: :func:`seq2seq.serve.batcher.engine_thread`) and rejoins the results.

Endpoints (docs/serving.md has the table):

- LibreTranslate's API (:mod:`seq2seq.serve.libre`): ``POST /translate`` (text or HTML,
  ``source: auto``, alternatives), ``GET /languages``, ``POST /detect``, ``GET
  /frontend/settings``, ``POST /translate_file`` and ``GET /download_file/{token}/{name}``.
- ``POST /v1/translate``: the native API, with the search options of ``seq2seq translate``
  (:class:`~seq2seq.serve.schemas.TranslateRequest`), n-best lists, scores and word alignments,
  and per-text ``prefix`` / ``constraints`` / ``avoid`` (constrained decoding).
- ``POST /v1/attention``: cross-attention weights of each sentence's translation (torch
  engine only), for the heatmap of the web page.
- ``GET /health``, ``GET /v1/models`` (languages, engine, size, manifest hash, defaults),
  ``GET /metrics`` (Prometheus: :mod:`seq2seq.serve.metrics`).
- ``GET /``: a plain HTML + JavaScript page (``seq2seq/serve/static/index.html``); ``GET /docs``:
  the OpenAPI docs FastAPI generates.

API keys and rate limits (:mod:`seq2seq.serve.access`) apply to the routes that translate or
detect; ``/languages``, ``/health``, ``/frontend/settings``, ``/metrics``, the page and the
download of a translated file need no key and are never limited. Past ``--max-queue`` queued
sentences a request gets 503 with ``Retry-After``.

Bad input never reaches the engine: the body is read with a byte limit, must be UTF-8 (and
valid Unicode: no unpaired surrogates from ``\\ud800`` escapes), JSON or a form, with fields
of the right types; empty text, an unsupported language pair and texts over the configured
limits (:class:`~seq2seq.serve.config.ServeConfig`) are 4xx answers with a one-line ``error``
message. An engine exception is a 500 for the requests it hit and the server goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from contextlib import asynccontextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from seq2seq.decode import format_alignment
from seq2seq.serve.access import Access
from seq2seq.serve.bodies import RequestError, read_json_object, validate
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.detect import Detector
from seq2seq.serve.libre import add_libre_routes
from seq2seq.serve.logs import log
from seq2seq.serve.metrics import CONTENT_TYPE, MetricsMiddleware, ServerMetrics
from seq2seq.serve.schemas import (
    SEARCH_FIELDS,
    AttentionRequest,
    LibreTranslateRequest,
    TranslateRequest,
)
from seq2seq.serve.service import TranslationService
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


def create_app(
    translator,
    *,
    info: ModelInfo,
    config: ServeConfig | None = None,
    executor: ThreadPoolExecutor | None = None,
):
    """The FastAPI app serving ``translator``.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator`.
        info: what to report about the model (:func:`~seq2seq.serve.served_model.model_info`).
        config: limits and batching (default :class:`~seq2seq.serve.config.ServeConfig`).
        executor: the thread the translator was loaded on
            (:func:`seq2seq.serve.batcher.engine_thread`), which then runs every engine call; the
            caller shuts it down. None: the batcher's own thread.

    The batcher starts with the app's lifespan and finishes its queue when the app shuts
    down; run the app under uvicorn (or ``httpx.ASGITransport`` inside a lifespan).

    Raises:
        UserError: ``config.api_keys`` names a file that is missing or not a key database;
            ``config.redis`` is not a Redis URL.
    """
    config = config or ServeConfig()
    state = open_state(config)  # keys, counts and files: in memory, or shared through Redis
    access = Access(state, require_key=config.require_api_key, req_limit=config.req_limit)
    service: TranslationService
    metrics = (
        ServerMetrics(queued=lambda: service.batcher.stats.queued_sentences)
        if config.metrics
        else None
    )
    service = TranslationService(translator, info, config, executor, metrics)

    @asynccontextmanager
    async def lifespan(app):
        await state.start()
        await service.batcher.start()
        try:
            yield
        finally:
            await service.batcher.close()
            await state.close()

    app = FastAPI(
        title="seq2seq translation server",
        version="1",
        description=(
            f"Translates {info.source}->{info.target} with `{info.id}` ({info.engine} engine). "
            "`POST /translate` speaks LibreTranslate's API; `POST /v1/translate` is the "
            "native API with the search options of `seq2seq translate`."
        ),
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.shared = state  # the state backend (GET /ready asks it)
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

    async def admit(request: Request, fields: dict) -> None:
        """Check the request's key (body field or query string) and count it."""
        key = fields.get("api_key")
        if key is not None and not isinstance(key, str):  # never read as "no key"
            raise RequestError(400, "invalid request: field 'api_key' must be a string")
        key = key or request.query_params.get("api_key")
        address = request.client.host if request.client else "unknown"
        client = await access.admit(key, address)
        if metrics is not None and client.key is not None:
            metrics.key_request(client.key)

    def native_body(data: dict) -> dict:
        """The native APIs take ``api_key`` too; it is not a field of their schemas."""
        return {k: v for k, v in data.items() if k != "api_key"}

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

    def schema(model) -> dict:
        return {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": model.model_json_schema()}},
            }
        }

    libre_schema = schema(LibreTranslateRequest)
    form_schema = LibreTranslateRequest.model_json_schema()
    for kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        libre_schema["requestBody"]["content"][kind] = {"schema": form_schema}
    add_libre_routes(
        app,
        service,
        admit=admit,
        detector=Detector(),
        state=state,
        openapi=libre_schema,
    )

    @app.get("/metrics", include_in_schema=False)
    async def metrics_page() -> Response:
        if metrics is None:
            raise RequestError(404, "metrics are off on this server (--no-metrics)")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(_static_page())

    @app.get("/health", summary="Liveness and queue state")
    async def health() -> dict:
        s = service.batcher.stats
        return {
            "status": "ok" if service.batcher.running else "stopping",
            "pid": os.getpid(),  # which worker process answered (--workers)
            "model": info.id,
            "engine": info.engine,
            "queued_sentences": s.queued_sentences,
            "in_flight_requests": s.in_flight_requests,
            "requests": s.requests,
            "batches": s.batches,
            "sentences": s.sentences,
            "largest_batch": s.largest_batch,
            "failed_requests": s.failed_requests,
            "busy_seconds": round(s.busy_seconds, 3),
            "stream_steps": s.stream_steps,
            "stream_rows": s.stream_rows,
        }

    @app.get("/v1/models", summary="The model being served")
    async def models() -> dict:
        entry = dataclasses.asdict(info)
        entry["directions"] = [list(d) for d in info.directions]
        entry["decoding"] = dataclasses.asdict(translator.opts)
        entry["batching"] = {
            "enabled": config.batching,
            "max_wait_ms": config.max_wait_ms,
            "max_batch_tokens": service.batcher.max_tokens,
            "lanes": service.batcher.lanes,
            # beam search without constraints, n-gram ban or alignments joins a running search
            "continuous": service.continuous,
        }
        entry["capabilities"] = {  # what /v1/translate can be asked for on this engine
            "alignments": not getattr(translator.engine, "no_attention", None),
            "prefix_and_avoid": True,
            "positive_constraints": info.engine != "ctranslate2",
        }
        entry["limits"] = {
            "max_chars": config.max_chars,
            "max_sentence_chars": config.max_sentence_chars,
            "max_sentences": config.max_sentences,
            "max_beam": config.max_beam,
            "max_alternatives": config.max_alternatives,
            "max_queue": config.max_queue,
            "req_limit": config.req_limit,
            "max_file_bytes": config.max_file_bytes,
        }
        entry["api_keys"] = {"enabled": state.keys_enabled, "required": config.require_api_key}
        entry["state"] = state.description
        return {"models": [entry]}

    @app.post(
        "/v1/translate",
        summary="Translate with search options, n-best lists and scores",
        openapi_extra=schema(TranslateRequest),
    )
    async def translate_native(request: Request) -> JSONResponse:
        data = await read_json_object(request, config.max_body_bytes)
        await admit(request, data)
        req = validate(TranslateRequest, native_body(data))
        language, _ = service.check_pair(req.source, req.target)
        opts = service.options(**{k: getattr(req, k) for k in SEARCH_FIELDS})
        batch = isinstance(req.text, list)
        texts = req.text if batch else [req.text]
        if batch and not texts:
            raise RequestError(400, "empty text: text is an empty list")
        if req.alignments:
            service.check_alignments()
        constrained = service.constrained(req, texts, opts)
        split = service.split(
            texts,
            language=language,
            split=req.split_sentences,
            field="text",
            whole=set(constrained),
        )
        source = req.source_lang or req.source
        direction = (None if source == "auto" else source, req.target_lang or req.target)
        results = await service.translate(
            split, opts, constrained, alignments=req.alignments, direction=direction
        )
        detail = req.scores or req.alignments or opts.nbest > 1
        out = []
        for text in split:
            entry: dict[str, Any] = {"text": service.joined(text, results)}
            if opts.nbest > 1:
                entry["nbest"] = [service.joined(text, results, k) for k in range(opts.nbest)]
            if detail:
                entry["sentences"] = [
                    {
                        "source": sentence,
                        "hypotheses": [
                            _hypothesis(h, scores=req.scores, alignments=req.alignments)
                            for h in results[text.start + j]
                        ],
                    }
                    for j, sentence in enumerate(text.segments.sentences)
                ]
            out.append(entry)
        return JSONResponse(
            {
                "translations": out if batch else out[:1],
                "model": info.id,
                "options": {k: getattr(opts, k) for k in SEARCH_FIELDS},
            }
        )

    @app.post(
        "/v1/attention",
        summary="Cross-attention of each sentence's translation (torch engine)",
        openapi_extra=schema(AttentionRequest),
    )
    async def attention(request: Request) -> JSONResponse:
        data = await read_json_object(request, config.max_body_bytes)
        await admit(request, data)
        req = validate(AttentionRequest, native_body(data))
        if not info.attention:
            raise RequestError(
                501,
                f"the {info.engine} engine gives no attention weights; serve a model "
                "directory with --engine torch for the heatmap",
            )
        split = service.split([req.text], language=info.source, split=True, field="text")
        opts = service.options(nbest=1)
        results = await service.translate(split, opts)
        sentences = split[0].segments.sentences
        targets = [r[0].text for r in results]
        maps = await service.attention(sentences, targets, req.layer, req.head)
        return JSONResponse({"translation": service.joined(split[0], results), "sentences": maps})

    return app


def _hypothesis(t, *, scores: bool, alignments: bool) -> dict:
    entry: dict[str, Any] = {"text": t.text}
    if scores:
        entry["score"] = _finite(t.score)
        entry["token_scores"] = [_finite(x) for x in t.token_scores]
    if alignments:  # as seq2seq.decode.outputs writes it for translate --alignments
        entry["alignment"] = format_alignment(t.alignment or [])
    return entry


def _finite(x: float) -> float | None:
    """JSON has no inf/nan: None instead."""
    return round(float(x), 6) if math.isfinite(x) else None

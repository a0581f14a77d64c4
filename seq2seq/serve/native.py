"""The native API: ``POST /v1/translate`` (the search options of ``seq2seq translate``, n-best
lists, scores, alignments, constraints), ``POST /v1/attention`` (cross-attention for the web
page's heatmap) and ``GET /v1/models`` (each model, loaded or not, and what it serves).

``/v1/translate`` goes to the model(s) of its pair (:mod:`seq2seq.serve.routing`) and says the
route it took (``route``: each leg's model and direction). On a pivoted route the first leg
translates each text with the request's search options and ``nbest: 1``; everything else
(n-best lists, scores, alignments, constraints) is the last leg's, and a sentence's
``source`` in ``sentences`` is the pivot-language sentence the last leg read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from seq2seq.decode import format_alignment
from seq2seq.serve.bodies import RequestError, read_json_object, validate
from seq2seq.serve.glossaries import SqliteGlossaries, request_glossary
from seq2seq.serve.pivot import direct_glossary
from seq2seq.serve.schemas import SEARCH_FIELDS, AttentionRequest, TranslateRequest

if TYPE_CHECKING:
    from seq2seq.decode import Glossary
    from seq2seq.serve.access import Client
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.model_pool import ModelPool
    from seq2seq.serve.routing import Leg, Router
    from seq2seq.serve.service import TranslationService

__all__ = ["native_routes"]

Admit = Callable[[Request, dict], Awaitable["Client"]]


def _schema(model) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def _native_body(data: dict) -> dict:
    """The native APIs take ``api_key`` too; it is not a field of their schemas."""
    return {k: v for k, v in data.items() if k != "api_key"}


def native_routes(
    pool: ModelPool,
    router: Router,
    *,
    config: ServeConfig,
    admit: Admit,
    keys_on: bool,
    glossaries: SqliteGlossaries | None = None,
) -> APIRouter:
    """The ``/v1`` routes.

    Args:
        pool: the served models.
        router: which model(s) translate a pair.
        config: limits.
        admit: the key and rate-limit check (raises RequestError); the client (its key).
        keys_on: whether the server takes API keys (``/v1/models`` says so).
        glossaries: the named glossaries of the API keys (None: named glossaries are off).
    """
    api = APIRouter()

    @api.get("/v1/models", summary="The models served, loaded or not")
    async def models() -> dict:
        loaded = pool.loaded()
        out = []
        for name in pool.names():
            planned = pool.model(name)
            service = loaded.get(name)
            if service is None:  # what is known before it loads
                members = planned.folders if len(planned.folders) > 1 else ()
                entry: dict[str, Any] = {
                    "id": name,
                    "path": str(planned.folders[0].resolve()),
                    "engine": planned.engine,
                    "source": planned.directions[0][0],
                    "target": planned.directions[0][1],
                    "directions": [list(d) for d in planned.directions],
                    "members": [str(f.resolve()) for f in members],
                    **_server_entry(config, keys_on),
                }
            else:
                entry = _loaded_entry(service, config, keys_on, named=glossaries is not None)
            entry["serves"] = [list(d) for d in router.served_by(name)]
            entry["memory"] = pool.state(name)
            out.append(entry)
        return {
            "models": out,
            "pivot": router.pivot,
            "max_loaded": config.max_loaded,
            "routes": [f"{s}->{t}" for s, t in router.directions()],
        }

    @api.post(
        "/v1/translate",
        summary="Translate with search options, n-best lists and scores",
        openapi_extra=_schema(TranslateRequest),
    )
    async def translate_native(request: Request) -> JSONResponse:
        data = await read_json_object(request, config.max_body_bytes)
        client = await admit(request, data)
        req = validate(TranslateRequest, _native_body(data))
        glossary = request_glossary(
            req.glossary, req.do_not_translate, key=client.key, store=glossaries
        )
        source = req.source_lang or req.source
        route = router.route(
            None if source and source.strip().lower() == "auto" else source,
            req.target_lang or req.target,
        )
        glossary = direct_glossary(route, glossary)
        batch = isinstance(req.text, list)
        texts = req.text if batch else [req.text]
        if batch and not texts:
            raise RequestError(400, "empty text: text is an empty list")
        overrides = {k: getattr(req, k) for k in SEARCH_FIELDS}
        for leg in route.legs[:-1]:
            async with pool.use(leg.model) as service:
                texts = await _first_leg(service, leg, texts, req, overrides)
        last = route.legs[-1]
        async with pool.use(last.model) as service:
            out, opts = await _last_leg(service, last, texts, req, overrides, glossary)
        return JSONResponse(
            {
                "translations": out if batch else out[:1],
                "model": last.model,
                "route": route.describe(),
                "options": {k: getattr(opts, k) for k in SEARCH_FIELDS},
            }
        )

    @api.post(
        "/v1/attention",
        summary="Cross-attention of each sentence's translation (torch engine)",
        openapi_extra=_schema(AttentionRequest),
    )
    async def attention(request: Request) -> JSONResponse:
        data = await read_json_object(request, config.max_body_bytes)
        await admit(request, data)
        req = validate(AttentionRequest, _native_body(data))
        route = router.route(req.source, req.target)
        if len(route.legs) > 1:
            raise RequestError(
                400,
                f"no model translates {route.source}->{route.target} directly (it is pivoted "
                f"through {router.pivot}): attention needs one model",
            )
        (leg,) = route.legs
        async with pool.use(leg.model) as service:
            info = service.info
            if not info.attention:
                raise RequestError(
                    501,
                    f"the {info.engine} engine gives no attention weights; serve a model "
                    "directory with --engine torch for the heatmap",
                )
            split = service.split([req.text], language=leg.source, split=True, field="text")
            opts = service.options(nbest=1)
            results = await service.translate(split, opts, direction=leg.direction)
            sentences = split[0].segments.sentences
            targets = [r[0].text for r in results]
            maps = await service.attention(sentences, targets, req.layer, req.head)
            translation = service.joined(split[0], results)
        return JSONResponse({"translation": translation, "sentences": maps})

    return api


async def _first_leg(
    service: TranslationService, leg: Leg, texts: list[str], req: TranslateRequest, overrides
) -> list[str]:
    """A pivot's first leg: each text's best translation into the pivot language."""
    opts = service.options(**{**overrides, "nbest": 1})
    split = service.split(texts, language=leg.source, split=req.split_sentences, field="text")
    results = await service.translate(split, opts, direction=leg.direction)
    return [service.joined(t, results) for t in split]


async def _last_leg(
    service: TranslationService,
    leg: Leg,
    texts: list[str],
    req: TranslateRequest,
    overrides,
    glossary: Glossary | None = None,
) -> tuple[list[dict], Any]:
    opts = service.options(**overrides)
    if req.alignments:
        service.check_alignments()
    constrained = service.constrained(req, texts, opts)
    split = service.split(
        texts, language=leg.source, split=req.split_sentences, field="text", whole=set(constrained)
    )
    results = await service.translate(
        split,
        opts,
        constrained,
        alignments=req.alignments,
        direction=leg.direction,
        glossary=glossary,
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
    return out, opts


def _loaded_entry(
    service: TranslationService, config: ServeConfig, keys_on: bool, *, named: bool
) -> dict:
    """A loaded model as ``/v1/models`` describes it."""
    info, translator = service.info, service.translator
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
        "glossaries": service.can_constrain,
        "named_glossaries": named,
    }
    return {**entry, **_server_entry(config, keys_on)}


def _server_entry(config: ServeConfig, keys_on: bool) -> dict:
    """What ``/v1/models`` says of every model: the server's limits and keys."""
    entry: dict[str, Any] = {}
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
    entry["api_keys"] = {"enabled": keys_on, "required": config.require_api_key}
    # where keys, counts and files live: this process, or the Redis every replica shares
    entry["state"] = "redis" if config.redis else "local"
    return entry


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

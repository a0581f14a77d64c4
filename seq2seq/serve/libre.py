"""LibreTranslate's API: ``POST /translate``, ``GET /languages``, ``POST /detect``, ``GET
/frontend/settings``, ``POST /translate_file`` and its download, in LibreTranslate's shapes, so
that its clients (libretranslatepy, its web UI, browser extensions, Nextcloud's app) work
unchanged.

Every route that translates or detects takes ``api_key`` in the JSON or form body or in the
query string and passes the request through ``admit`` first (:mod:`seq2seq.serve.access`);
``/languages`` and ``/frontend/settings`` never do, and the download URL is a capability.

With several models (:mod:`seq2seq.serve.routing`) ``/languages`` lists every language served
with the targets it reaches, directly or through the pivot language; each request goes to the
model(s) of its pair (:mod:`seq2seq.serve.pivot`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from seq2seq.documents import FORMATS, Limits
from seq2seq.serve.bodies import (
    RequestError,
    check_size,
    form_glossary_fields,
    read_libre_fields,
    validate,
)
from seq2seq.serve.file_translation import file_sample, translate_upload
from seq2seq.serve.files import read_upload
from seq2seq.serve.glossaries import SqliteGlossaries, request_glossary
from seq2seq.serve.pivot import translate_html, translate_libre
from seq2seq.serve.schemas import GlossaryFields, LibreTranslateRequest

if TYPE_CHECKING:
    from seq2seq.serve.access import Client
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.detect import Detector
    from seq2seq.serve.model_pool import ModelPool
    from seq2seq.serve.routing import Router
    from seq2seq.serve.state import State

__all__ = ["LANGUAGE_NAMES", "libre_routes"]

LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish",
    "de": "German", "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian",
    "fa": "Persian", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi",
    "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "no": "Norwegian", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian",
    "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese",
    "zh": "Chinese",
}  # fmt: skip
"""English names for ``GET /languages`` (a code not listed is its own name)."""

Admit = Callable[[Request, dict], Awaitable["Client"]]


def _name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def libre_routes(
    pool: ModelPool,
    router: Router,
    *,
    config: ServeConfig,
    admit: Admit,
    detector: Detector,
    state: State,
    openapi: dict,
    glossaries: SqliteGlossaries | None = None,
) -> APIRouter:
    """LibreTranslate's routes.

    Args:
        pool: the served models.
        router: which model(s) translate a pair.
        config: limits.
        admit: ``await admit(request, fields)``: checks the key and the rate limit (raises
            RequestError); the client (its key).
        detector: language detection over the languages served.
        state: the state backend, where translated files wait for their download (in memory,
            or in Redis for every replica).
        glossaries: the named glossaries of the API keys (None: named glossaries are off).
        openapi: the OpenAPI request body of ``POST /translate`` (JSON and forms).
        glossaries: the named glossaries (None: the server has no key database).
    """
    api = APIRouter()
    default_source, default_target = router.default
    limits = Limits()  # what an uploaded archive may unpack to

    def auto_source(texts: list[str], target: str | None) -> tuple[str, list[dict]]:
        """The language to translate from for ``source: auto``, and each text's detection."""
        target = (target or default_target).strip().lower()
        candidates = router.sources(target)
        if not candidates:
            router.route(default_source, target)  # the one error for an unknown target
        found = [detector.best(t, candidates) for t in texts]
        detected = [{"confidence": c, "language": lang} for lang, c in found]
        return found[0][0], detected

    @api.post(
        "/translate",
        summary="LibreTranslate: translate text or HTML",
        openapi_extra=openapi,
        responses={400: {"description": "bad request: {'error': message}"}},
    )
    async def translate(request: Request) -> JSONResponse:
        data, _is_form = await read_libre_fields(request, config.max_body_bytes)
        client = await admit(request, data)
        req = validate(LibreTranslateRequest, data)
        glossary = request_glossary(
            req.glossary, req.do_not_translate, key=client.key, store=glossaries
        )
        html = req.format == "html"
        if req.alternatives > config.max_alternatives:
            raise RequestError(
                400, f"alternatives may be at most {config.max_alternatives} on this server"
            )
        if html and req.alternatives:
            raise RequestError(400, "alternatives are for format 'text' only")
        batch = isinstance(req.q, list)
        texts = req.q if batch else [req.q]
        if batch and not texts:
            raise RequestError(400, "empty text: q is an empty list")
        detected = None
        source = req.source
        if source.strip().lower() == "auto":
            source, detected = auto_source(texts, req.target)
        route = router.route(source, req.target)
        body: dict[str, Any] = {}
        if html:
            out = await translate_html(pool, route, texts, field="q", glossary=glossary)
        else:
            out, alts = await translate_libre(pool, route, texts, req.alternatives, glossary)
            if req.alternatives:
                body["alternatives"] = alts if batch else alts[0]
        body = {"translatedText": out if batch else out[0], **body}
        if detected is not None:
            body["detectedLanguage"] = detected if batch else detected[0]
        return JSONResponse(body)

    @api.get("/languages", summary="LibreTranslate: supported languages (no key needed)")
    async def languages() -> list[dict]:
        return [
            {"code": code, "name": _name(code), "targets": router.targets(code)}
            for code in router.languages()
        ]

    @api.post("/detect", summary="LibreTranslate: detect the language of a text")
    async def detect(request: Request) -> JSONResponse:
        data, _ = await read_libre_fields(request, config.max_body_bytes)
        await admit(request, data)
        q = data.get("q")
        batch = isinstance(q, list)
        texts = q if batch else [q]
        if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise RequestError(400, "invalid request: q must be a non-empty text (or a list)")
        check_size(texts, config.max_chars, field="q")
        candidates = router.languages()
        ranked = [
            [{"confidence": c, "language": lang} for lang, c in detector.rank(t, candidates)]
            for t in texts
        ]
        return JSONResponse(ranked if batch else ranked[0])

    @api.get("/frontend/settings", summary="LibreTranslate: limits and options for clients")
    async def frontend_settings() -> dict:
        loaded = pool.loaded()  # a model not loaded yet: judged by its engine's name
        return {
            "charLimit": config.max_chars,
            "frontendTimeout": 500,
            "apiKeys": state.keys_enabled,
            "keyRequired": config.require_api_key,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": sorted(FORMATS),
            # glossary and do_not_translate fields (constrained decoding: not on ctranslate2)
            "glossaries": any(
                loaded[n].can_constrain if n in loaded else pool.model(n).engine != "ctranslate2"
                for n in pool.names()
            ),
            "namedGlossaries": glossaries is not None,
            "language": {
                "source": {"code": default_source, "name": _name(default_source)},
                "target": {"code": default_target, "name": _name(default_target)},
            },
        }

    @api.post("/translate_file", summary="LibreTranslate: translate a file (docx, srt, po, ...)")
    async def translate_file(request: Request) -> JSONResponse:
        upload = await read_upload(request, config.max_file_bytes)
        client = await admit(request, upload.fields)
        fields = validate(GlossaryFields, form_glossary_fields(upload.fields))
        glossary = request_glossary(
            fields.glossary, fields.do_not_translate, key=client.key, store=glossaries
        )
        source = upload.fields.get("source") or default_source
        target = upload.fields.get("target") or default_target
        if source.strip().lower() == "auto":
            sample = await run_in_threadpool(
                lambda: file_sample(upload.name, upload.data, limits=limits)
            )
            source, _ = auto_source([sample], target)
        route = router.route(source, target)
        out = await translate_upload(
            pool, route, upload.name, upload.data, limits=limits, glossary=glossary
        )
        stem, _, suffix = upload.name.rpartition(".")
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", stem) or "file"
        name = f"{safe}.{re.sub(r'[^a-z0-9-]', '_', target.strip().lower())}.{suffix.lower()}"
        token = await state.put_file(name, out)
        url = str(request.url_for("download_file", token=token, name=name))
        return JSONResponse({"translatedFileUrl": url})

    @api.get("/download_file/{token}/{name}", summary="A translated file (its URL is the key)")
    async def download_file(token: str, name: str) -> Response:
        stored = await state.get_file(token)
        if stored is None or stored.name != name:
            raise RequestError(404, "no such file (translated files expire)")
        return Response(
            stored.data,
            media_type=stored.media_type,
            headers={"Content-Disposition": f'attachment; filename="{stored.name}"'},
        )

    return api

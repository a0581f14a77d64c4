"""LibreTranslate's API: ``POST /translate``, ``GET /languages``, ``POST /detect``, ``GET
/frontend/settings``, ``POST /translate_file`` and its download, in LibreTranslate's shapes, so
that its clients (libretranslatepy, its web UI, browser extensions, Nextcloud's app) work
unchanged.

Every route that translates or detects takes ``api_key`` in the JSON or form body or in the
query string and passes the request through ``admit`` first (:mod:`seq2seq.serve.access`);
``/languages`` and ``/frontend/settings`` never do, and the download URL is a capability.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from seq2seq.documents import FORMATS, Limits
from seq2seq.serve.bodies import RequestError, read_libre_fields, validate
from seq2seq.serve.file_translation import file_sample, translate_upload
from seq2seq.serve.files import FileStore, read_upload
from seq2seq.serve.schemas import LibreTranslateRequest

if TYPE_CHECKING:
    from fastapi import FastAPI

    from seq2seq.serve.detect import Detector
    from seq2seq.serve.service import TranslationService

__all__ = ["LANGUAGE_NAMES", "add_libre_routes"]

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

Admit = Callable[[Request, dict], Awaitable[None]]


def _name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def add_libre_routes(
    app: FastAPI,
    service: TranslationService,
    *,
    admit: Admit,
    detector: Detector,
    files: FileStore,
    openapi: dict,
) -> None:
    """Add LibreTranslate's routes to ``app``.

    Args:
        app: the FastAPI app.
        service: the translation service.
        admit: ``await admit(request, fields)``: checks the key and the rate limit (raises
            RequestError).
        detector: language detection over the model's languages.
        files: where translated files wait for their download.
        openapi: the OpenAPI request body of ``POST /translate`` (JSON and forms).
    """
    info, config = service.info, service.config
    limits = Limits()  # what an uploaded archive may unpack to

    def auto_source(texts: list[str], target: str | None) -> tuple[str, list[dict]]:
        """The language to translate from for ``source: auto``, and each text's detection."""
        target = (target or info.target).strip().lower()
        candidates = info.sources(target)
        if not candidates:
            service.check_pair(info.source, target)  # the one error for an unknown target
        found = [detector.best(t, candidates) for t in texts]
        detected = [{"confidence": c, "language": lang} for lang, c in found]
        return found[0][0], detected

    @app.post(
        "/translate",
        summary="LibreTranslate: translate text or HTML",
        openapi_extra=openapi,
        responses={400: {"description": "bad request: {'error': message}"}},
    )
    async def translate(request: Request) -> JSONResponse:
        data, _is_form = await read_libre_fields(request, config.max_body_bytes)
        await admit(request, data)
        req = validate(LibreTranslateRequest, data)
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
        direction = service.check_pair(source, req.target)
        body: dict[str, Any] = {}
        if html:
            out = await service.translate_html(texts, direction=direction, field="q")
        else:
            out, alts = await service.translate_libre(texts, direction, req.alternatives)
            if req.alternatives:
                body["alternatives"] = alts if batch else alts[0]
        body = {"translatedText": out if batch else out[0], **body}
        if detected is not None:
            body["detectedLanguage"] = detected if batch else detected[0]
        return JSONResponse(body)

    @app.get("/languages", summary="LibreTranslate: supported languages (no key needed)")
    async def languages() -> list[dict]:
        return [
            {"code": code, "name": _name(code), "targets": info.targets(code)}
            for code in info.languages()
        ]

    @app.post("/detect", summary="LibreTranslate: detect the language of a text")
    async def detect(request: Request) -> JSONResponse:
        data, _ = await read_libre_fields(request, config.max_body_bytes)
        await admit(request, data)
        q = data.get("q")
        batch = isinstance(q, list)
        texts = q if batch else [q]
        if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise RequestError(400, "invalid request: q must be a non-empty text (or a list)")
        service.check_size(texts, field="q")
        ranked = [
            [{"confidence": c, "language": lang} for lang, c in detector.rank(t, info.languages())]
            for t in texts
        ]
        return JSONResponse(ranked if batch else ranked[0])

    @app.get("/frontend/settings", summary="LibreTranslate: limits and options for clients")
    async def frontend_settings() -> dict:
        return {
            "charLimit": config.max_chars,
            "frontendTimeout": 500,
            "apiKeys": config.api_keys is not None,
            "keyRequired": config.require_api_key,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": sorted(FORMATS),
            "language": {
                "source": {"code": info.source, "name": _name(info.source)},
                "target": {"code": info.target, "name": _name(info.target)},
            },
        }

    @app.post("/translate_file", summary="LibreTranslate: translate a file (docx, srt, po, ...)")
    async def translate_file(request: Request) -> JSONResponse:
        upload = await read_upload(request, config.max_file_bytes)
        await admit(request, upload.fields)
        source = upload.fields.get("source") or info.source
        target = upload.fields.get("target") or info.target
        if source.strip().lower() == "auto":
            sample = file_sample(upload.name, upload.data, limits=limits)
            source, _ = auto_source([sample], target)
        direction = service.check_pair(source, target)
        out = await translate_upload(
            service, upload.name, upload.data, direction=direction, limits=limits
        )
        stem, _, suffix = upload.name.rpartition(".")
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", stem) or "file"
        name = f"{safe}.{re.sub(r'[^a-z0-9-]', '_', target.strip().lower())}.{suffix.lower()}"
        token = files.put(name, out)
        url = str(request.url_for("download_file", token=token, name=name))
        return JSONResponse({"translatedFileUrl": url})

    @app.get("/download_file/{token}/{name}", summary="A translated file (its URL is the key)")
    async def download_file(token: str, name: str) -> Response:
        stored = files.get(token)
        if stored is None or stored.name != name:
            raise RequestError(404, "no such file (translated files expire)")
        return Response(
            stored.data,
            media_type=stored.media_type,
            headers={"Content-Disposition": f'attachment; filename="{stored.name}"'},
        )

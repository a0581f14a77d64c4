"""``seq2seq serve``: an HTTP translation server (FastAPI + uvicorn) with dynamic batching.

The server holds one :class:`~seq2seq.decode.translator.Translator` (a model directory, or a
CTranslate2 / ONNX export folder) and calls it like any other caller. Request handlers run on
the event loop; they cut each text into sentences (:mod:`seq2seq.serve.paragraphs`), queue them
on a :class:`~seq2seq.serve.batcher.Batcher`, which translates the sentences of concurrent
requests together in token-budgeted batches on one worker thread (the thread the model was
loaded on: :func:`seq2seq.serve.batcher.engine_thread`), and rejoin the results.

Endpoints:

- ``POST /translate``: LibreTranslate's API. JSON or form-encoded (urlencoded or multipart)
  ``{"q": str | [str], "source", "target", "format": "text", "alternatives": n}`` ->
  ``{"translatedText": str | [str]}`` plus ``"alternatives"`` when asked (and
  ``"detectedLanguage"`` when ``source`` is ``auto``: the model's source language, since a
  server holds one). Errors are ``{"error": message}`` with a 4xx/5xx status, as there.
- ``GET /languages``: LibreTranslate's list: each language ``{"code", "name", "targets"}``.
- ``POST /v1/translate``: the native API, with the search options of ``seq2seq translate``
  (:class:`TranslateRequest`), n-best lists, scores and word alignments, and per-text ``prefix`` /
  ``constraints`` / ``avoid`` (constrained decoding; such a text is one sentence; constrained
  sentences of concurrent requests share batches too).
- ``POST /v1/attention``: cross-attention weights of each sentence's translation (torch
  engine only), for the heatmap of the web page.
- ``GET /health``, ``GET /v1/models`` (languages, engine, size, manifest hash, defaults).
- ``GET /``: a plain HTML + JavaScript page (``seq2seq/serve/static/index.html``); ``GET /docs``:
  the OpenAPI docs FastAPI generates.

Bad input never reaches the engine: the body is read with a byte limit, must be UTF-8 (and
valid Unicode: no unpaired surrogates from ``\\ud800`` escapes), JSON or a form, with fields
of the right types; empty text, an unsupported language pair and texts over the configured
limits (:class:`ServeConfig`) are 4xx answers with a one-line ``error`` message. An engine
exception is a 500 for the requests it hit and the server goes on. SIGTERM (or Ctrl-C) stops
accepting connections, finishes the requests in flight, then exits (uvicorn's graceful
shutdown, then :meth:`Batcher.close` finishes anything still queued).
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import hashlib
import json
import logging
import math
import signal
import socket
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException

from seq2seq.core import UserError
from seq2seq.decode import ContinuousSearch, TorchEngine, Translation, format_alignment, supports
from seq2seq.serve.batcher import Batcher, BatcherClosed, EngineFailure, engine_thread
from seq2seq.serve.paragraphs import Segments, join_text, split_text

if TYPE_CHECKING:
    from seq2seq.decode import SearchOptions

__all__ = [
    "LANGUAGE_NAMES",
    "AttentionRequest",
    "LibreTranslateRequest",
    "ModelInfo",
    "ServeConfig",
    "TranslateRequest",
    "create_app",
    "load_translator",
    "model_info",
    "serve",
]

log = logging.getLogger("seq2seq.serve.server")

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

SEARCH_FIELDS = (
    "method", "beam_size", "nbest", "len_penalty", "min_len", "max_len_a", "max_len_b",
    "no_repeat_ngram", "unk_penalty", "temperature", "top_k", "top_p", "seed",
)  # fmt: skip
"""The :class:`SearchOptions` a request may set (``max_tokens`` is the server's)."""


@dataclass(frozen=True)
class ServeConfig:
    """Limits and batching of ``seq2seq serve`` (the CLI's options mirror these fields).

    Attributes:
        max_chars: characters per request, all texts together.
        max_sentence_chars: characters per sentence (after splitting paragraphs).
        max_sentences: sentences per request (after splitting paragraphs).
        max_beam: the largest beam size and n-best a request may ask for.
        max_alternatives: the most LibreTranslate ``alternatives`` a request may ask for.
        max_wait_ms: how long the oldest queued sentence waits for others to join its
            batch while the engine is idle.
        max_batch_tokens: source tokens per batch (0: the model's ``decoding.max_tokens``
            times the engine's ``batches_per_call``).
        batching: False translates one request at a time (a baseline for benchmarks).
        continuous: with the torch engine, beam-search sentences join a running search
            between its steps and leave it when done (seq2seq.decode.continuous); False (the
            default, measured faster on 2 cores at every load: README, Serving): static
            batches only. Sampling, greedy, constraints, the n-gram ban and alignments always
            run in static batches.
    """

    max_chars: int = 20_000
    max_sentence_chars: int = 2_000
    max_sentences: int = 500
    max_beam: int = 16
    max_alternatives: int = 8
    max_wait_ms: float = 5.0
    max_batch_tokens: int = 0
    batching: bool = True
    continuous: bool = False

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_sentence_chars", "max_sentences", "max_beam"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1")
        if self.max_alternatives < 0 or self.max_batch_tokens < 0:
            raise UserError("--max-alternatives and --max-batch-tokens must be >= 0")
        if not 0 <= self.max_wait_ms <= 10_000:
            raise UserError(f"--max-wait-ms must be between 0 and 10000, got {self.max_wait_ms}")

    @property
    def max_body_bytes(self) -> int:
        """A request body limit that any text within ``max_chars`` fits (JSON escapes a
        character in at most 12 bytes), plus room for the other fields."""
        return 12 * self.max_chars + 65_536


# ---------------------------------------------------------------------------------------------
# Request models (validation and the OpenAPI schema)


def _text_or_list(value: Any, name: str) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError("must be a string or a list of strings")


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's ``POST /translate`` body (JSON, or the same fields as a form)."""

    model_config = ConfigDict(extra="ignore")  # api_key, secret, ... are accepted

    q: str | list[str] = Field(description="text, or a list of texts, to translate")
    source: str = Field(description="source language code, or auto", examples=["en"])
    target: str = Field(description="target language code", examples=["de"])
    format: Literal["text", "html"] | None = Field(
        "text", description="text only (html is refused with a 400)"
    )
    alternatives: int = Field(0, ge=0, description="alternative translations wanted")
    api_key: str | None = Field(None, description="ignored (no keys on this server)")

    @field_validator("q", mode="before")
    @classmethod
    def _q(cls, value: Any) -> Any:
        return _text_or_list(value, "q")


class TranslateRequest(BaseModel):
    """The native ``POST /v1/translate`` body.

    Search options left out (or null) keep the server's defaults (the model's ``decoding``
    section and the ``seq2seq serve`` options). Later fields join this model without changing
    the existing ones: ``models`` (ids from ``GET /v1/models``) for an ensemble.

    ``alignments``: per sentence, each hypothesis' Moses ``i-j`` word pairs (the rule and format
    of ``seq2seq translate --alignments``, :mod:`seq2seq.decode.alignments`); the engine must give
    cross-attention (torch, ctranslate2; onnx is a 400).

    Constrained decoding (README, "Constrained decoding"): ``prefix`` (a text), ``constraints``
    and ``avoid`` (lists of phrases) for a single ``text``; for a list of texts, lists aligned
    with it (``null`` / ``[]`` for a text without). A text with any of them is translated as one
    sentence (it may not hold a line break).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] = Field(description="a text or a list of texts")
    source: str | None = Field(None, description="checked against the model if given")
    target: str | None = Field(None, description="checked against the model if given")
    split_sentences: bool = Field(
        True, description="cut paragraphs into sentences (line breaks are always kept)"
    )
    scores: bool = Field(
        False, description="per sentence: each hypothesis' score and token log-probs"
    )
    alignments: bool = Field(
        False, description="per sentence: each hypothesis' Moses i-j word alignment"
    )
    method: Literal["beam", "greedy", "sample"] | None = None
    beam_size: int | None = Field(None, ge=1)
    nbest: int | None = Field(None, ge=1, description="hypotheses per sentence")
    len_penalty: float | None = None
    min_len: int | None = Field(None, ge=0)
    max_len_a: float | None = Field(None, ge=0)
    max_len_b: int | None = Field(None, ge=0)
    no_repeat_ngram: int | None = Field(None, ge=0)
    unk_penalty: float | None = None
    temperature: float | None = Field(None, gt=0)
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    prefix: str | None | list[str | None] = Field(
        None, description="per text: the output starts with this text (a list for a list of texts)"
    )
    constraints: list[str] | list[list[str]] | None = Field(
        None, description="per text: phrases the output must hold (a list of lists for a list)"
    )
    avoid: list[str] | list[list[str]] | None = Field(
        None, description="per text: phrases the output must not hold (as constraints)"
    )
    ordered: bool = Field(False, description="the constraints appear in their order")

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _text_or_list(value, "text")


class AttentionRequest(BaseModel):
    """``POST /v1/attention``: the text to translate and draw."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="one text (cut into sentences: one map each)")
    layer: int | None = Field(None, description="decoder layer, 0-based, -1 the last")
    head: int | None = Field(None, description="head, 0-based (default: mean of heads)")


# ---------------------------------------------------------------------------------------------
# Errors and body parsing


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _validation_message(error) -> str:
    """One line from a pydantic ValidationError: what is wrong with which field."""
    parts = []
    for e in error.errors()[:3]:
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        kind = e["type"]
        if kind == "missing":
            parts.append(f"missing field {loc!r}")
        elif kind == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"field {loc!r}: {msg}")
    more = len(error.errors()) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _validate(model, data: Any):
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise RequestError(400, f"invalid request: {_validation_message(e)}") from None


def _check_unicode(text: str, where: str) -> None:
    """Refuse text that cannot be UTF-8 (an unpaired surrogate from a ``\\udXXX`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(
            400,
            f"{where} is not valid Unicode: unpaired surrogate U+{ord(text[e.start]):04X} at "
            f"character {e.start + 1}",
        ) from None


def _decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(
            400, f"{what} is not valid UTF-8 (byte {e.start + 1}: 0x{data[e.start]:02x})"
        ) from None


async def _read_body(request, limit: int) -> bytes:
    """The request body, refused with a 413 past ``limit`` bytes (before reading it all)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"request body of {int(length):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body over the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_json(body: bytes) -> Any:
    text = _decode_utf8(body, "request body").removeprefix("\ufeff")
    if not text.strip():
        raise RequestError(400, "empty request body: send a JSON object")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RequestError(
            400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None


def _parse_urlencoded(body: bytes) -> dict[str, str]:
    text = _decode_utf8(body, "form body")
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as e:
        raise RequestError(
            400, f"a form field is not valid UTF-8 once %-decoded ({e.reason})"
        ) from None
    except ValueError as e:
        raise RequestError(400, f"malformed form body: {e}") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)  # the first of repeated fields, as LibreTranslate does
    return form


def _parse_multipart(body: bytes, content_type: str) -> dict[str, str]:
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise RequestError(400, "malformed multipart/form-data body")
    form: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name or part.get_filename():
            continue  # files are not translated here
        payload = part.get_payload(decode=True) or b""
        form.setdefault(str(name), _decode_utf8(payload, f"form field {name!r}"))
    return form


async def _read_libre_fields(request, limit: int) -> tuple[dict, bool]:
    """LibreTranslate's fields from a JSON or form body; True when it was a form."""
    body = await _read_body(request, limit)
    content_type = request.headers.get("content-type", "")
    kind = content_type.split(";")[0].strip().lower()
    if "json" in kind or (not kind and body.lstrip()[:1] in (b"{", b"[")):
        data = _parse_json(body)
        if not isinstance(data, dict):
            raise RequestError(400, "invalid request: the JSON body must be an object")
        return data, False
    if kind == "multipart/form-data":
        return _parse_multipart(body, content_type), True
    return _parse_urlencoded(body), True


async def _read_json_object(request, limit: int) -> dict:
    body = await _read_body(request, limit)
    data = _parse_json(body)
    if not isinstance(data, dict):
        raise RequestError(400, "invalid request: the JSON body must be an object")
    return data


# ---------------------------------------------------------------------------------------------
# The model being served


@dataclass(frozen=True)
class ModelInfo:
    """What ``GET /v1/models`` says about the served model.

    Attributes:
        id: a name for the model (its folder's name).
        path: the model directory or export folder.
        engine: torch, ctranslate2 or onnx.
        source: source language code (from the config's ``data.pair``).
        target: target language code.
        parameters: number of parameters (torch engine; None for exports).
        size_bytes: bytes of the weight files.
        manifest_sha256: a model directory's manifest hash (its content sha256), or the
            sha256 of an export's export.json (which lists every file's sha256).
        max_positions: the longest source (and target) the model takes, in tokens.
        attention: whether ``/v1/attention`` works (the torch engine has the weights).
    """

    id: str
    path: str
    engine: str
    source: str
    target: str
    parameters: int | None
    size_bytes: int
    manifest_sha256: str | None
    max_positions: int
    attention: bool


def _pair(cfg) -> tuple[str, str]:
    pair = getattr(getattr(cfg, "data", None), "pair", "") or ""
    src, sep, tgt = pair.partition("-")
    if not sep or not src or not tgt:
        raise UserError(f"the model's data.pair {pair!r} is not of the form src-tgt")
    return src.lower(), tgt.lower()


def model_info(translator, model_dir: str | Path, engine: str) -> ModelInfo:
    """Describe a loaded translator for ``/v1/models`` and ``/languages``."""
    path = Path(model_dir)
    src, tgt = _pair(translator.cfg)
    weights = [p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".onnx")]
    manifest = path / "manifest.json"
    digest = None
    if manifest.is_file():
        try:
            digest = json.loads(manifest.read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError):
            digest = None
    elif (path / "export.json").is_file():
        digest = hashlib.sha256((path / "export.json").read_bytes()).hexdigest()
    model = getattr(translator.engine, "model", None)
    parameters = None
    if model is not None and hasattr(model, "parameters"):
        parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return ModelInfo(
        id=path.resolve().name,
        path=str(path.resolve()),
        engine=engine,
        source=src,
        target=tgt,
        parameters=parameters,
        size_bytes=sum(p.stat().st_size for p in weights),
        manifest_sha256=digest,
        max_positions=translator.max_src_positions,
        attention=model is not None and hasattr(model, "forward_with_attention"),
    )


# ---------------------------------------------------------------------------------------------
# The app


@dataclass
class _Text:
    """One text of a request, cut into sentences; ``start`` indexes the request's sentences."""

    segments: Segments
    start: int


@dataclass(frozen=True)
class _Constrained:
    """A sentence and its constraints: what the batcher queues for a constrained text."""

    text: str
    prefix: str
    constraints: tuple[str, ...]
    avoid: tuple[str, ...]
    ordered: bool


def _text_of(sentence: str | _Constrained) -> str:
    return sentence.text if isinstance(sentence, _Constrained) else sentence


@dataclass(frozen=True)
class _Options:
    """What the batcher keys batches on: the search options and whether to align (sentences
    share an engine call only when both are equal)."""

    search: SearchOptions
    alignments: bool = False
    constrained: bool = False


class _Stream:
    """The batcher's :class:`~seq2seq.serve.batcher.Stream` for one set of search options: text in,
    n-best Translations out (as ``Translator.translate_nbest`` gives them), over a
    :class:`~seq2seq.decode.continuous.ContinuousSearch`."""

    def __init__(self, translator, opts: SearchOptions, on_truncated) -> None:
        self.translator = translator
        self.opts = opts
        self.on_truncated = on_truncated
        self.search = ContinuousSearch.for_engine(translator.engine, opts)

    @property
    def active(self) -> int:
        return self.search.active

    @property
    def tokens(self) -> int:
        return self.search.src_tokens

    def advance(self, new: list[tuple[int, str]]) -> list[tuple[int, list]]:
        done: list[tuple[int, list]] = []
        if new:
            ids = self.translator.encode([t for _, t in new], on_truncated=self.on_truncated)
            empty = [Translation("", 0.0, [])] * self.opts.nbest  # no pieces: no search
            done += [(key, list(empty)) for (key, _), x in zip(new, ids) if not x]
            self.search.add([(key, x) for (key, _), x in zip(new, ids) if x])
        finished = self.search.step()
        flat = self.translator.detokenize([h for _, hyps in finished for h in hyps])
        start = 0
        for key, hyps in finished:
            done.append((key, flat[start : start + len(hyps)]))
            start += len(hyps)
        return done

    def reset(self) -> None:
        self.search.reset()


class _Service:
    """The translator, its batcher and the request logic behind the endpoints."""

    def __init__(
        self, translator, info: ModelInfo, config: ServeConfig, executor: ThreadPoolExecutor | None
    ) -> None:
        self.translator = translator
        self.info = info
        self.config = config
        per_call = getattr(translator.engine, "batches_per_call", 1)
        budget = config.max_batch_tokens or translator.opts.max_tokens * per_call
        engine = translator.engine
        # continuous batching: the torch engine's cached beam search (seq2seq.decode.continuous)
        self.continuous = (
            config.batching
            and config.continuous
            and isinstance(engine, TorchEngine)
            and engine.use_cache
        )
        self.batcher = Batcher(
            self._translate_batch,
            count_tokens=self._count_tokens,
            max_tokens=budget,
            max_wait=config.max_wait_ms / 1000,
            batching=config.batching,
            stream_for=self._stream_for if self.continuous else None,
            executor=executor,
        )

    # ---- worker side (runs on the batcher's thread) ---------------------------------------

    def _warn_truncated(self, _line: int, n_tokens: int) -> None:
        log.warning(
            "a sentence of %d source tokens exceeds the model's %d positions; truncated",
            n_tokens,
            self.translator.max_src_positions,
        )

    def _translate_batch(self, sentences: list[str], key: _Options) -> list:
        opts = key.search
        fields = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
        # Plain sentences in one call, constrained ones by constraint order (one call each).
        groups: dict[bool | None, list[int]] = {}
        for i, x in enumerate(sentences):
            groups.setdefault(x.ordered if isinstance(x, _Constrained) else None, []).append(i)
        out: list = [None] * len(sentences)
        for ordered, idx in groups.items():
            items = [sentences[i] for i in idx]
            kwargs: dict[str, Any] = {}
            if ordered is not None:
                kwargs = dict(
                    prefix=[x.prefix for x in items],
                    constraints=[list(x.constraints) for x in items],
                    avoid=[list(x.avoid) for x in items],
                    ordered=ordered,
                )
            results = self.translator.translate_nbest(
                [_text_of(x) for x in items],
                on_truncated=self._warn_truncated,
                alignments=key.alignments,
                **kwargs,
                **fields,
            )
            for i, r in zip(idx, results):
                out[i] = r
        return out

    def _stream_for(self, key: _Options) -> _Stream | None:
        """A continuous search for sentences with ``key`` (torch engine, plain beam search)."""
        if key.constrained:
            return None
        if not supports(self.translator.engine.model, key.search, alignments=key.alignments):
            return None
        return _Stream(self.translator, key.search, self._warn_truncated)

    def _count_tokens(self, sentences: list[str]) -> list[int]:
        texts = [_text_of(x) for x in sentences]
        ids = self.translator.encode(texts, on_truncated=lambda _i, _n: None)
        return [len(x) for x in ids]

    def constrained(self, req: TranslateRequest, texts: list[str], opts: SearchOptions) -> dict:
        """Per text index, its :class:`_Constrained` sentence (checked now, on the event loop,
        so that a bad constraint is this request's 400 and never fails a shared batch)."""
        batch = isinstance(req.text, list)

        def per_text(value: Any, name: str, single: type) -> list:
            if value is None:
                return [None] * len(texts)
            if not batch:
                if not isinstance(value, single):
                    raise RequestError(400, f"{name} must be a {single.__name__} for one text")
                return [value]
            if not isinstance(value, list) or len(value) != len(texts):
                raise RequestError(
                    400, f"{name} must be a list with one entry per text ({len(texts)})"
                )
            return value

        prefixes = per_text(req.prefix, "prefix", str)
        includes = per_text(req.constraints, "constraints", list)
        avoids = per_text(req.avoid, "avoid", list)
        out = {}
        for k, text in enumerate(texts):
            p, inc, av = prefixes[k] or "", list(includes[k] or []), list(avoids[k] or [])
            if not (p or inc or av):
                continue
            where = f"text[{k}]" if batch else "text"
            for name, value in (("prefix", [p]), ("constraints", inc), ("avoid", av)):
                if not all(isinstance(x, str) for x in value):
                    raise RequestError(400, f"{name} of {where} must hold strings")
            if "\n" in text.strip() or "\r" in text.strip():
                raise RequestError(
                    400, f"{where} has constraints, so it is one sentence: no line breaks"
                )
            if inc and opts.method == "sample":
                raise RequestError(400, "constraints need beam search or greedy, not sampling")
            if inc and not getattr(self.translator.engine, "positive_constraints", True):
                raise RequestError(
                    400, "this server's engine cannot do constraints; serve with --engine torch"
                )
            try:
                self.translator.constraints_for(
                    [text],
                    constraints=[inc],
                    ordered=req.ordered,
                    prefix=[p],
                    avoid=[av],
                    no_repeat_ngram=opts.no_repeat_ngram,
                    where=lambda _i, w=where: w,
                )
            except UserError as e:
                raise RequestError(400, str(e)) from None
            out[k] = _Constrained(text.strip(), p, tuple(inc), tuple(av), req.ordered)
        return out

    # ---- request side (event loop) ---------------------------------------------------------

    def check_pair(self, source: str | None, target: str | None) -> str:
        """The source language to split with; RequestError for a pair the model lacks."""
        src, tgt = self.info.source, self.info.target
        s = (source or src).strip().lower()
        t = (target or tgt).strip().lower()
        if s == "auto":
            s = src
        if (s, t) != (src, tgt):
            raise RequestError(
                400,
                f"language pair {s}->{t} is not supported; this server translates "
                f"{src}->{tgt} (supported pairs: {src}->{tgt})",
            )
        return s

    def options(self, **overrides: Any) -> SearchOptions:
        opts = {k: v for k, v in overrides.items() if v is not None}
        try:
            result = self.translator.opts.replace(**opts)
        except UserError as e:
            raise RequestError(400, f"invalid search options: {e}") from None
        if max(result.beam_size if result.method == "beam" else 1, result.nbest) > (
            self.config.max_beam
        ):
            raise RequestError(
                400,
                f"beam_size and nbest may be at most {self.config.max_beam} on this server",
            )
        return result

    def split(
        self,
        texts: list[str],
        *,
        language: str,
        split: bool,
        field: str,
        whole: frozenset[int] | set[int] = frozenset(),
    ) -> list[_Text]:
        """Cut every text into sentences and check the request against the limits.

        ``whole``: indices of texts not cut into sentences (constrained texts)."""
        cfg = self.config
        total = 0
        for i, text in enumerate(texts):
            _check_unicode(text, field if len(texts) == 1 else f"{field}[{i}]")
            total += len(text)
        if total > cfg.max_chars:
            raise RequestError(
                400, f"request has {total:,} characters; the limit is {cfg.max_chars:,}"
            )
        if not any(t.strip() for t in texts):
            raise RequestError(400, f"empty text: {field} has nothing to translate")
        out, start = [], 0
        for k, text in enumerate(texts):
            segments = split_text(text, language=language, split=split and k not in whole)
            out.append(_Text(segments, start))
            start += len(segments.sentences)
            if start > cfg.max_sentences:
                raise RequestError(
                    400,
                    f"request has more than {cfg.max_sentences:,} sentences "
                    f"(the limit per request)",
                )
        for t in out:
            for sentence in t.segments.sentences:
                if len(sentence) > cfg.max_sentence_chars:
                    raise RequestError(
                        400,
                        f"a sentence has {len(sentence):,} characters; the limit is "
                        f"{cfg.max_sentence_chars:,} (starts: {sentence[:40]!r})",
                    )
        return out

    def check_alignments(self) -> None:
        """RequestError (400, the engine's own message) when the engine gives no attention."""
        reason = getattr(self.translator.engine, "no_attention", None)
        if reason:
            raise RequestError(400, reason)

    async def translate(
        self,
        texts: list[_Text],
        opts: SearchOptions,
        constrained: dict[int, _Constrained] | None = None,
        *,
        alignments: bool = False,
    ) -> list[list]:
        """Per sentence of the request, its n-best list of Translations.

        ``constrained``: text index -> its one constrained sentence (see :meth:`constrained`).
        ``alignments``: fill each Translation's ``alignment`` (such sentences are batched
        only with others that want alignments).
        """
        sentences: list = []
        for k, t in enumerate(texts):
            if constrained and k in constrained:
                sentences.extend([constrained[k]] * len(t.segments.sentences))
            else:
                sentences.extend(t.segments.sentences)
        try:
            key = _Options(opts, alignments, constrained=bool(constrained))
            return await self.batcher.translate(sentences, key)
        except EngineFailure as e:
            if isinstance(e.original, UserError):  # options this engine cannot honour
                raise RequestError(400, str(e.original)) from None
            raise RequestError(500, str(e)) from None
        except BatcherClosed as e:
            raise RequestError(503, str(e)) from None

    @staticmethod
    def joined(text: _Text, results: list[list], k: int = 0) -> str:
        """Text ``text`` rejoined from each sentence's ``k``-th hypothesis (or its last)."""
        n = len(text.segments.sentences)
        picks = [results[text.start + j] for j in range(n)]
        return join_text(text.segments, [h[min(k, len(h) - 1)].text for h in picks])


def _static_page() -> str:
    return resources.files("seq2seq.serve").joinpath("static/index.html").read_text(encoding="utf-8")


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
        info: what to report about the model (:func:`model_info`).
        config: limits and batching (default :class:`ServeConfig`).
        executor: the thread the translator was loaded on
            (:func:`seq2seq.serve.batcher.engine_thread`), which then runs every engine call; the
            caller shuts it down. None: the batcher's own thread.

    The batcher starts with the app's lifespan and finishes its queue when the app shuts
    down; run the app under uvicorn (or ``httpx.ASGITransport`` inside a lifespan).
    """
    config = config or ServeConfig()
    service = _Service(translator, info, config, executor)

    @asynccontextmanager
    async def lifespan(app):
        await service.batcher.start()
        try:
            yield
        finally:
            await service.batcher.close()

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

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(_request, exc: RequestError):
        return error(exc.status, exc.message)

    @app.exception_handler(HTTPException)
    async def _http_error(_request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request, exc: RequestValidationError):
        return error(400, f"invalid request: {exc.errors()[:1]}")

    @app.exception_handler(Exception)
    async def _internal_error(_request, exc: Exception):
        log.exception("internal error")
        return error(500, f"internal error: {type(exc).__name__}: {exc}")

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

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(_static_page())

    @app.get("/health", summary="Liveness and queue state")
    async def health() -> dict:
        s = service.batcher.stats
        return {
            "status": "ok" if service.batcher.running else "stopping",
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
        entry["decoding"] = dataclasses.asdict(translator.opts)
        entry["batching"] = {
            "enabled": config.batching,
            "max_wait_ms": config.max_wait_ms,
            "max_batch_tokens": service.batcher.max_tokens,
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
        }
        return {"models": [entry]}

    @app.get("/languages", summary="LibreTranslate: supported languages")
    async def languages() -> list[dict]:
        def name(code: str) -> str:
            return LANGUAGE_NAMES.get(code, code)

        return [
            {"code": info.source, "name": name(info.source), "targets": [info.target]},
            {"code": info.target, "name": name(info.target), "targets": []},
        ]

    @app.post(
        "/translate",
        summary="LibreTranslate: translate text",
        openapi_extra=libre_schema,
        responses={400: {"description": "bad request: {'error': message}"}},
    )
    async def translate_libre(request: Request) -> JSONResponse:
        data, _is_form = await _read_libre_fields(request, config.max_body_bytes)
        req = _validate(LibreTranslateRequest, data)
        if req.format not in (None, "text"):
            raise RequestError(400, f"format {req.format!r} is not supported; use 'text'")
        if req.alternatives > config.max_alternatives:
            raise RequestError(
                400, f"alternatives may be at most {config.max_alternatives} on this server"
            )
        language = service.check_pair(req.source, req.target)
        batch = isinstance(req.q, list)
        texts = req.q if batch else [req.q]
        if batch and not texts:
            raise RequestError(400, "empty text: q is an empty list")
        n_alt = req.alternatives
        if n_alt:
            base = service.translator.opts
            beam = max(base.beam_size, n_alt + 1)
            opts = service.options(
                method="beam" if base.method == "greedy" else base.method,
                beam_size=beam,
                nbest=n_alt + 1,
            )
        else:
            opts = service.options(nbest=1)
        split = service.split(texts, language=language, split=True, field="q")
        results = await service.translate(split, opts)
        out = [service.joined(t, results) for t in split]
        alts = []
        for text, best in zip(split, out):
            seen, mine = {best, ""}, []
            for k in range(1, opts.nbest):
                alt = service.joined(text, results, k)
                if alt not in seen:
                    seen.add(alt)
                    mine.append(alt)
            alts.append(mine[:n_alt])
        body: dict[str, Any] = {"translatedText": out if batch else out[0]}
        if n_alt:
            body["alternatives"] = alts if batch else alts[0]
        if req.source.strip().lower() == "auto":
            detected = {"confidence": 100.0, "language": info.source}
            body["detectedLanguage"] = [detected] * len(out) if batch else detected
        return JSONResponse(body)

    @app.post(
        "/v1/translate",
        summary="Translate with search options, n-best lists and scores",
        openapi_extra=schema(TranslateRequest),
    )
    async def translate_native(request: Request) -> JSONResponse:
        req = _validate(TranslateRequest, await _read_json_object(request, config.max_body_bytes))
        language = service.check_pair(req.source, req.target)
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
        results = await service.translate(split, opts, constrained, alignments=req.alignments)
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
        req = _validate(AttentionRequest, await _read_json_object(request, config.max_body_bytes))
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
        try:
            maps = await service.batcher.call(
                lambda: _attention_maps(translator, sentences, targets, req.layer, req.head)
            )
        except UserError as e:
            raise RequestError(400, str(e)) from None
        except BatcherClosed as e:
            raise RequestError(503, str(e)) from None
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


def _attention_maps(
    translator, sentences: list[str], targets: list[str], layer, head
) -> list[dict]:
    """Cross-attention of each (sentence, translation), teacher-forced (runs on the worker)."""
    from seq2seq.evaluate import attention_maps
    from seq2seq.model import LoadedModel

    loaded = LoadedModel(
        path=Path("."),
        cfg=translator.cfg,
        model=translator.engine.model,
        tokenizer=translator.tokenizer,
    )
    out = []
    for sentence, target in zip(sentences, targets):
        maps = attention_maps(loaded, sentence, layer=layer, head=head, target=target)
        out.append(
            {
                "source": sentence,
                "translation": target,
                "source_tokens": maps.src_labels,
                "target_tokens": maps.tgt_out_labels,
                "cross": [[round(float(w), 4) for w in row] for row in maps.cross.tolist()],
                "layer": maps.decoder_layer,
                "head": maps.head,
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# Running it


def load_translator(
    model_dir: str | Path,
    *,
    engine: str,
    device: str,
    search: dict[str, object],
    executor: ThreadPoolExecutor,
) -> tuple[Any, ModelInfo]:
    """Load ``model_dir`` and warm it up on ``executor``'s thread, the one that will run
    every engine call (:func:`seq2seq.serve.batcher.engine_thread` says why); (translator, info)."""

    def load():
        from seq2seq.decode import Translator

        translator = Translator.load(model_dir, device=device, engine=engine, **search)
        info = model_info(translator, model_dir, engine)
        translator.translate([info.source])  # warm-up: the first call pays for lazy set-up
        return translator, info

    return executor.submit(load).result()


def serve(
    model_dir: str | Path,
    *,
    engine: str = "torch",
    device: str = "cpu",
    host: str = "127.0.0.1",
    port: int = 8080,
    config: ServeConfig | None = None,
    access_log: bool = True,
    log_level: str = "info",
    **search: object,
) -> None:
    """Load ``model_dir`` and serve it until SIGTERM or SIGINT (then finish in-flight work).

    Args:
        model_dir: a model directory, or an export folder for ``ctranslate2`` / ``onnx``.
        engine: the Translator's engine.
        device: torch device (cpu, cuda).
        host: interface to listen on (127.0.0.1: this machine only).
        port: TCP port.
        config: limits and batching.
        access_log: log one line per request.
        log_level: uvicorn's log level.
        **search: search-option defaults (None = the model's config), as ``seq2seq translate``.

    Raises:
        UserError: a bad model directory, engine or option; a port that is taken.
    """
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    # Listen first: a taken port fails before the model loads, and clients that connect
    # while it loads wait in the backlog instead of being refused.
    sock = _listen(host, port)
    # Every engine call runs on one thread, loading and warm-up included (engine_thread says
    # why: on 2 cores a model loaded on another thread decodes 1.5x slower).
    executor = engine_thread()
    try:
        translator, info = load_translator(
            model_dir, engine=engine, device=device, search=search, executor=executor
        )
        app = create_app(translator, info=info, config=config or ServeConfig(), executor=executor)
    except BaseException:
        sock.close()
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    uv_config = uvicorn.Config(
        app,
        access_log=access_log,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=None,
    )
    server = uvicorn.Server(uv_config)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    log.info(
        "serving %s (%s->%s, %s engine) on http://%s:%d (API docs: /docs)",
        info.id, info.source, info.target, engine, shown, bound_port,
    )  # fmt: skip
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done; a no-op
    # handler lets the process then exit 0 (stopped cleanly) instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
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

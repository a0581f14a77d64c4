"""Request bodies read and checked before anything is queued: a byte limit, UTF-8 (and valid
Unicode), JSON or a form (urlencoded or multipart), fields of the right types; and
:class:`RequestError`, the one way the server refuses a request (an HTTP status and a one-line
message, answered as ``{"error": message}``)."""

from __future__ import annotations

import email.parser
import email.policy
import json
import urllib.parse
from typing import Any

import pydantic
from starlette.requests import ClientDisconnect

from seq2seq.serve.logs import log

__all__ = [
    "RequestError",
    "check_size",
    "check_unicode",
    "read_json_object",
    "read_libre_fields",
    "validate",
]


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a one-line message (and, for a 503 or
    a 429, the seconds to answer in ``Retry-After``)."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


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


def validate(model, data: Any):
    """``data`` as an instance of the pydantic ``model``.

    Raises:
        RequestError: 400, saying which fields are wrong.
    """
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise RequestError(400, f"invalid request: {_validation_message(e)}") from None


def check_unicode(text: str, where: str) -> None:
    """Refuse text that cannot be UTF-8 (an unpaired surrogate from a ``\\udXXX`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(
            400,
            f"{where} is not valid Unicode: unpaired surrogate U+{ord(text[e.start]):04X} at "
            f"character {e.start + 1}",
        ) from None


def check_size(texts: list[str], max_chars: int, *, field: str) -> None:
    """RequestError 400 for texts over ``max_chars`` (``--max-chars``) together, or not
    valid Unicode."""
    total = sum(len(t) for t in texts)
    if total > max_chars:
        raise RequestError(400, f"request has {total:,} characters; the limit is {max_chars:,}")
    for i, text in enumerate(texts):
        check_unicode(text, field if len(texts) == 1 else f"{field}[{i}]")


def _decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(
            400, f"{what} is not valid UTF-8 (byte {e.start + 1}: 0x{data[e.start]:02x})"
        ) from None


async def _read_body(request, limit: int) -> bytes:
    """The request body, refused with a 413 past ``limit`` bytes (before reading it all).

    A client that disconnects before sending it all is logged as one INFO line (and the
    request ends in a RequestError that nobody receives)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"request body of {int(length):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"request body over the limit of {limit:,} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # The client's own doing, and nobody is left to answer: one line, no traceback.
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.info(
            "%s disconnected after %d of %s body bytes; nothing translated",
            client, size, length if length is not None else "?",
        )  # fmt: skip
        raise RequestError(400, "client disconnected before the whole request body") from None
    return b"".join(chunks)


def _parse_json(body: bytes) -> Any:
    text = _decode_utf8(body, "request body").removeprefix("\ufeff")
    if not text.strip():
        raise RequestError(400, "empty request body: send a JSON object")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise RequestError(
            400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None


def _no_constant(name: str) -> Any:
    """Python's json reads ``NaN`` and ``Infinity``, which JSON does not have."""
    raise RequestError(400, f"malformed JSON: {name} is not a JSON value (JSON has no NaN or inf)")


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


async def read_libre_fields(request, limit: int) -> tuple[dict, bool]:
    """LibreTranslate's fields from a JSON or form body of at most ``limit`` bytes; True when
    it was a form (whose ``alternatives``, when digits, is then an int)."""
    body = await _read_body(request, limit)
    content_type = request.headers.get("content-type", "")
    kind = content_type.split(";")[0].strip().lower()
    if "json" in kind or (not kind and body.lstrip()[:1] in (b"{", b"[")):
        data = _parse_json(body)
        if not isinstance(data, dict):
            raise RequestError(400, "invalid request: the JSON body must be an object")
        return data, False
    form = _parse_multipart(body, content_type) if kind == "multipart/form-data" else None
    return _form_numbers(form if form is not None else _parse_urlencoded(body)), True


def _form_numbers(form: dict[str, str]) -> dict[str, Any]:
    """A form's integer fields as ints, so that forms and JSON bodies meet the same strict
    schema: ``alternatives=2`` is 2; anything but decimal digits stays a string (a 400).
    The glossary fields as :func:`form_glossary_fields` reads them."""
    value = form.get("alternatives")
    if value is not None and value.strip().isascii() and value.strip().isdigit():
        form = {**form, "alternatives": int(value.strip())}
    return form_glossary_fields(form)


def form_glossary_fields(form: dict[str, Any]) -> dict[str, Any]:
    """A form's ``glossary`` and ``do_not_translate`` as a JSON body has them: a ``glossary``
    that starts with ``[`` is a JSON list of entries (else a glossary's name);
    ``do_not_translate`` is a JSON list, or one term per line.

    Raises:
        RequestError: 400 for malformed JSON, naming the field.
    """
    out = dict(form)
    for name in ("glossary", "do_not_translate"):
        value = out.get(name)
        if not isinstance(value, str):
            continue
        if value.lstrip().startswith("["):
            try:
                out[name] = json.loads(value, parse_constant=_no_constant)
            except json.JSONDecodeError as e:
                raise RequestError(
                    400, f"form field {name!r}: malformed JSON: {e.msg} at column {e.colno}"
                ) from None
        elif name == "do_not_translate":
            out[name] = [t.strip() for t in value.splitlines() if t.strip()]
        elif not value.strip():
            out[name] = None
    return out


async def read_json_object(request, limit: int) -> dict:
    """The JSON object of a request body of at most ``limit`` bytes (native API bodies)."""
    body = await _read_body(request, limit)
    data = _parse_json(body)
    if not isinstance(data, dict):
        raise RequestError(400, "invalid request: the JSON body must be an object")
    return data

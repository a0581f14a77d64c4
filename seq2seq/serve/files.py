"""``POST /translate_file``: the uploaded file, and the translated files waiting to be fetched.

An upload is a multipart form with a ``file`` part (any suffix of
:data:`seq2seq.documents.FORMATS`: ``.docx``, ``.srt``, ``.po``, ..., at most
``--max-file-bytes``; its content is checked by the format's reader) and the ``source`` /
``target`` / ``api_key`` fields (and ``glossary`` / ``do_not_translate``,
:func:`seq2seq.serve.bodies.form_glossary_fields`). The translated
file is kept in memory under a random token of 256 bits and fetched with ``GET
/download_file/{token}/{name}``: the URL itself is the capability (as LibreTranslate's download
link is), so it needs no key. A file is forgotten ``--file-expiry`` seconds after it was made
(expired files are dropped whenever a file is stored or fetched), and the store holds at most
a bounded number of bytes, oldest dropped first.
"""

from __future__ import annotations

import email.parser
import email.policy
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import PurePosixPath

from starlette.concurrency import run_in_threadpool

from seq2seq.core import UserError
from seq2seq.documents import format_for
from seq2seq.serve.bodies import RequestError, _read_body

__all__ = ["FileStore", "StoredFile", "Upload", "read_upload"]


@dataclass(frozen=True)
class Upload:
    """An uploaded file and the form's other fields.

    Attributes:
        name: the file's name (its last path component).
        data: its bytes.
        fields: the other form fields (``source``, ``target``, ``api_key``, ...).
    """

    name: str
    data: bytes
    fields: dict[str, str]


@dataclass(frozen=True)
class StoredFile:
    """A translated file waiting to be fetched."""

    name: str
    media_type: str
    data: bytes
    expires: float


async def read_upload(request, limit: int) -> Upload:
    """The ``file`` part and the fields of a multipart body of at most ``limit`` bytes of file.

    Raises:
        RequestError: 400 for a body that is not multipart, no file or an unsupported file
            type; 413 for a file over the limit.
    """
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "multipart/form-data":
        raise RequestError(400, "send the file as multipart/form-data with a 'file' part")
    body = await _read_body(request, limit + 65_536)  # the fields and part headers on top
    # parsing a body of up to a megabyte or more: on a worker thread, not the event loop
    return await run_in_threadpool(_parse_upload, body, content_type, limit)


def _parse_upload(body: bytes, content_type: str, limit: int) -> Upload:
    """The :class:`Upload` in a multipart ``body`` (see :func:`read_upload`)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise RequestError(400, "malformed multipart/form-data body")
    fields: dict[str, str] = {}
    upload = None
    for part in message.iter_parts():
        name = str(part.get_param("name", header="content-disposition") or "")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            if name == "file" and upload is None:
                upload = (PurePosixPath(part.get_filename().replace("\\", "/")).name, payload)
            continue
        try:
            fields.setdefault(name, payload.decode("utf-8"))
        except UnicodeDecodeError:
            raise RequestError(400, f"form field {name!r} is not valid UTF-8") from None
    if upload is None:
        raise RequestError(400, "no file: send it in a multipart part named 'file'")
    filename, data = upload
    try:
        format_for(filename)
    except UserError as e:
        raise RequestError(400, str(e)) from None
    if len(data) > limit:
        raise RequestError(413, f"the file has {len(data):,} bytes; the limit is {limit:,}")
    return Upload(filename, data, fields)


class FileStore:
    """Translated files by token, each for ``expiry`` seconds.

    Args:
        expiry: seconds a file stays fetchable.
        max_bytes: the most bytes held at once (the oldest files go first).
        clock: the time source (seconds; for tests).
    """

    def __init__(self, expiry: float, max_bytes: int, clock=time.monotonic) -> None:
        self.expiry = expiry
        self.max_bytes = max_bytes
        self._clock = clock
        self._files: OrderedDict[str, StoredFile] = OrderedDict()
        self._bytes = 0

    def _drop_expired(self) -> None:
        now = self._clock()
        while self._files:
            token, f = next(iter(self._files.items()))
            if f.expires > now and self._bytes <= self.max_bytes:
                break
            self._files.pop(token)
            self._bytes -= len(f.data)

    def put(self, name: str, data: bytes | str) -> str:
        """Keep ``data`` (a str: as UTF-8) as file ``name``; its token (43 URL-safe
        characters)."""
        token = secrets.token_urlsafe(32)
        if isinstance(data, str):
            data = data.encode("utf-8")
        media = format_for(name)[1]
        self._files[token] = StoredFile(name, media, data, self._clock() + self.expiry)
        self._bytes += len(data)
        self._drop_expired()
        return token

    def get(self, token: str) -> StoredFile | None:
        """The file under ``token``, or None (unknown or expired)."""
        self._drop_expired()
        return self._files.get(token)

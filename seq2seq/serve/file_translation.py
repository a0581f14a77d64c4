"""``POST /translate_file``'s translation: an uploaded file through its format
(:mod:`seq2seq.documents`) and the service's run translation
(:meth:`~seq2seq.serve.service.TranslationService.translate_runs`); a bad file is a 400 that
names it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from seq2seq.core import UserError
from seq2seq.documents import Limits, open_document
from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.serve.service import TranslationService

__all__ = ["file_sample", "translate_upload"]


def file_sample(name: str, data: bytes, *, limits: Limits) -> str:
    """The first 2,000 characters of the file's text (for ``source: auto``)."""
    try:
        doc = open_document(name, data, inline=False, limits=limits)
    except UserError as e:
        raise RequestError(400, str(e)) from None
    return " ".join(doc.texts)[:2000]


async def translate_upload(
    service: TranslationService,
    name: str,
    data: bytes,
    *,
    direction: tuple[str, str],
    limits: Limits,
) -> bytes:
    """The file ``data`` (its format from the suffix of ``name``) translated in ``direction``
    by ``service``; a RequestError 400 names what is wrong with a bad file."""
    try:
        doc = open_document(name, data, inline=service.can_align, limits=limits)
    except UserError as e:
        raise RequestError(400, str(e)) from None
    texts = doc.texts
    if not texts:
        if not data.strip():
            raise RequestError(400, f"empty file: {name} has nothing to translate")
        return doc.write([])  # nothing to translate (images, numbers): the file as it was
    done = await service.translate_runs(
        texts, direction=direction, boundaries=doc.boundaries, field="file", totals=False
    )
    return doc.write(done)

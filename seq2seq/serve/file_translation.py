"""``POST /translate_file``'s translation: an uploaded file through its format
(:mod:`seq2seq.documents`) and the service's run translation
(:meth:`~seq2seq.serve.service.TranslationService.translate_runs`); a bad file is a 400 that
names it.

A file in a direction one model serves goes through its format, its formatting runs kept. A
pivoted direction (:mod:`seq2seq.serve.pivot`) takes plain text and HTML files, leg by leg;
other formats need a direct model, since their formatting is placed by one model's word
alignments.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from seq2seq.core import UserError
from seq2seq.documents import Limits, open_document
from seq2seq.serve.bodies import RequestError
from seq2seq.serve.pivot import direct_glossary, translate_file_text, translate_html

if TYPE_CHECKING:
    from seq2seq.decode import Glossary
    from seq2seq.serve.model_pool import ModelPool
    from seq2seq.serve.routing import Route

__all__ = ["file_sample", "translate_upload"]


def file_sample(name: str, data: bytes, *, limits: Limits) -> str:
    """The first 2,000 characters of the file's text (for ``source: auto``)."""
    try:
        doc = open_document(name, data, inline=False, limits=limits)
    except UserError as e:
        raise RequestError(400, str(e)) from None
    return " ".join(doc.texts)[:2000]


async def translate_upload(
    pool: ModelPool,
    route: Route,
    name: str,
    data: bytes,
    *,
    limits: Limits,
    glossary: Glossary | None = None,
) -> bytes:
    """The file ``data`` (its format from the suffix of ``name``) translated along ``route``;
    a RequestError 400 names what is wrong with a bad file."""
    if len(route.legs) > 1:
        return await _pivoted(pool, route, name, data, glossary)
    (leg,) = route.legs
    async with pool.use(leg.model) as service:
        inline = service.can_align
        try:  # reading a document is work in proportion to its size: off the event loop
            doc = await run_in_threadpool(
                lambda: open_document(name, data, inline=inline, limits=limits)
            )
        except UserError as e:
            raise RequestError(400, str(e)) from None
        texts = doc.texts
        if not texts:
            if not data.strip():
                raise RequestError(400, f"empty file: {name} has nothing to translate")
            return await run_in_threadpool(doc.write, [])  # nothing to translate: as it was
        done = await service.translate_runs(
            texts,
            direction=leg.direction,
            boundaries=doc.boundaries,
            field="file",
            totals=False,
            glossary=glossary,
        )
    return await run_in_threadpool(doc.write, done)


async def _pivoted(
    pool: ModelPool, route: Route, name: str, data: bytes, glossary: Glossary | None
) -> bytes:
    """A plain text or HTML file through the pivot language (a 400 for other formats)."""
    direct_glossary(route, glossary)  # a glossary needs a direct model: the 400
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in (".txt", ".html", ".htm"):
        raise RequestError(
            400,
            f"{name}: a {suffix} file needs a model that translates {route.source}->"
            f"{route.target} directly (this pair is pivoted; .txt and .html files can be)",
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise RequestError(
            400, f"{name} is not valid UTF-8 (byte {e.start + 1}: 0x{data[e.start]:02x})"
        ) from None
    if suffix == ".txt":
        out = await translate_file_text(pool, route, text)
    else:
        (out,) = await translate_html(pool, route, [text], field="file", totals=False)
    return out.encode("utf-8")

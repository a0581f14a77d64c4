"""HTML and documents through a model's service: runs of text (a paragraph, a cell, a cue)
cut into sentences, translated, and their formatting put back around the words it covered
(:mod:`seq2seq.documents`). A mixin of :class:`~seq2seq.serve.service.TranslationService`,
whose ``split``, ``translate``, ``translate_sentences``, ``options``, ``joined`` and
``can_align`` it uses; parsing and rebuilding run on worker threads, off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lxml.etree import LxmlError
from starlette.concurrency import run_in_threadpool

from seq2seq.documents import (
    HtmlDocument,
    HtmlLimitError,
    RunTranslation,
    needs_alignments,
    run_translation,
)
from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.decode import Glossary

__all__ = ["DocumentTranslation"]


class DocumentTranslation:
    """HTML texts, text files and document runs, translated by the service it is mixed into."""

    async def translate_html(
        self,
        texts: list[str],
        *,
        direction: tuple[str, str],
        field: str,
        totals: bool = True,
        glossary: Glossary | None = None,
    ) -> list[str]:
        """Each HTML text translated in ``direction`` with its markup kept
        (:mod:`seq2seq.documents.html`)."""
        if not any(t.strip() for t in texts):
            raise RequestError(400, f"empty text: {field} has nothing to translate")
        inline = self.can_align
        # Parsing, splitting and rebuilding a document is work in proportion to its size:
        # done on a worker thread, so that the event loop keeps answering other clients.
        try:
            docs = await run_in_threadpool(lambda: [HtmlDocument(t, inline=inline) for t in texts])
        except HtmlLimitError as e:
            raise RequestError(400, f"{field}: {e}") from None
        except (ValueError, LxmlError) as e:  # what lxml cannot parse at all
            raise RequestError(400, f"{field} is not HTML that can be parsed: {e}") from None
        runs = [r for d in docs for r in d.texts]
        if not runs:
            return await run_in_threadpool(lambda: [d.apply([]) for d in docs])
        boundaries = [a for d in docs for a in d.boundaries]
        done = await self.translate_runs(
            runs,
            direction=direction,
            boundaries=boundaries,
            field=field,
            totals=totals,
            glossary=glossary,
        )

        def rebuild() -> list[str]:
            out, start = [], 0
            for d in docs:
                out.append(d.apply(done[start : start + len(d.runs)]))
                start += len(d.runs)
            return out

        return await run_in_threadpool(rebuild)

    async def translate_file_text(
        self, text: str, direction: tuple[str, str], glossary: Glossary | None = None
    ) -> str:
        """A text file's translation in ``direction``, its layout kept (lines, indentation)."""
        split = await run_in_threadpool(  # a whole file: off the event loop
            lambda: self.split(
                [text], language=direction[0], split=True, field="file", totals=False
            )
        )
        results = await self.translate(
            split, self.options(nbest=1), direction=direction, parts=True, glossary=glossary
        )
        return self.joined(split[0], results)

    async def translate_runs(
        self,
        runs: list[str],
        *,
        direction: tuple[str, str],
        boundaries: list[tuple[int, ...]],
        field: str,
        totals: bool = True,
        glossary: Glossary | None = None,
    ) -> list[RunTranslation]:
        """Each run (a paragraph, a cell, a cue: :mod:`seq2seq.documents`) cut into sentences
        and translated in ``direction``. The sentences with a formatting boundary inside them
        (``boundaries``, :mod:`seq2seq.documents.boundaries`) are translated with word
        alignments (when the engine gives them) in batches of their own; the others skip the
        slower decoding that returns attention. ``glossary``: as :meth:`translate`; a whole
        file (``totals`` False) is queued in parts (:meth:`_in_parts`)."""
        split = await run_in_threadpool(  # a whole document: off the event loop
            lambda: self.split(runs, language=direction[0], split=True, field=field, totals=totals)
        )
        flat = [s for t in split for s in t.segments.sentences]
        need: list[bool] = []
        for t, bounds in zip(split, boundaries):
            need += (
                needs_alignments(t.segments.sentences, bounds)
                if bounds
                else [False] * len(t.segments.sentences)
            )
        hyps: list = [None] * len(flat)

        async def group(align: bool) -> None:
            idx = [i for i, n in enumerate(need) if (n and self.can_align) == align]
            if not idx:
                return
            results = await self.translate_sentences(
                [flat[i] for i in idx],
                self.options(nbest=1),
                alignments=align,
                direction=direction,
                parts=not totals,
                glossary=glossary,
            )
            for i, r in zip(idx, results):
                hyps[i] = r[0]

        await asyncio.gather(group(False), group(True))
        done = []
        for t, bounds in zip(split, boundaries):
            mine = hyps[t.start : t.start + len(t.segments.sentences)]
            done.append(
                run_translation(
                    t.segments.sentences,
                    [h.text for h in mine],
                    [h.alignment for h in mine],
                    bounds,
                )
            )
        return done

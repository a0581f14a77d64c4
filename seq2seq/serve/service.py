"""The translation service behind the routes: a request's texts cut into sentences and checked
against the limits, its search options and constraints checked, its sentences queued on the
:class:`~seq2seq.serve.batcher.Batcher` and the results put back together.

What a request gets wrong is found on the event loop, before its sentences are queued, and
refused with a :class:`~seq2seq.serve.bodies.RequestError`: a bad request never fails a shared
batch. (Options an engine cannot honour are found by the engine: a 400 for that request alone.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seq2seq.core import UserError
from seq2seq.decode import (
    RepetitionGuard,
    Segments,
    TorchEngine,
    join_text,
    split_text,
    supports,
)
from seq2seq.serve.batcher import Batcher, BatcherClosed, EngineFailure
from seq2seq.serve.bodies import RequestError, check_unicode
from seq2seq.serve.document_service import DocumentTranslation
from seq2seq.serve.logs import log
from seq2seq.serve.stream import SearchStream

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from seq2seq.decode import Glossary, SearchOptions
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.metrics import ModelMetrics
    from seq2seq.serve.schemas import TranslateRequest
    from seq2seq.serve.served_model import ModelInfo

__all__ = ["TranslationService"]


@dataclass
class _Text:
    """One text of a request, cut into sentences; ``start`` indexes the request's sentences."""

    segments: Segments
    start: int


@dataclass(frozen=True)
class _Constrained:
    """A sentence and its constraints: what the batcher queues for a constrained text, or for
    a sentence a request's glossary applies to."""

    text: str
    prefix: str = ""
    constraints: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    ordered: bool = False
    glossary: Glossary | None = None


def _text_of(sentence: str | _Constrained) -> str:
    return sentence.text if isinstance(sentence, _Constrained) else sentence


@dataclass(frozen=True)
class _Options:
    """What the batcher keys batches on: the search options and whether to align (sentences
    share an engine call only when both are equal)."""

    search: SearchOptions
    alignments: bool = False
    constrained: bool = False
    direction: tuple[str | None, str | None] = (None, None)  # a multilingual model's


class TranslationService(DocumentTranslation):
    """The translator, its batcher and the request logic behind the endpoints.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator`.
        info: what the server says about the model (its language pair is checked here).
        config: limits and batching.
        executor: the engine thread the batcher runs every engine call on; None: its own.
        metrics: where to count batches and translated text (None: nothing is counted).
        gate: the engine gate shared with the other models on ``executor``
            (:class:`~seq2seq.serve.batcher.Batcher`); None: none.
    """

    def __init__(
        self,
        translator,
        info: ModelInfo,
        config: ServeConfig,
        executor: ThreadPoolExecutor | None,
        metrics: ModelMetrics | None = None,
        gate: asyncio.Lock | None = None,
    ) -> None:
        self.translator = translator
        self.info = info
        self.config = config
        self.metrics = metrics
        self.guard = (
            RepetitionGuard(metrics.repetition_retries.inc if metrics is not None else None)
            if config.repetition_guard
            else None
        )
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
        most = getattr(engine, "concurrent_calls", 1)
        if config.lanes > most:
            raise UserError(
                f"--lanes {config.lanes}: this engine runs at most {most} call(s) at once"
            )
        lanes = config.lanes or most
        if self.continuous or not config.batching:
            lanes = 1
        self.batcher = Batcher(
            self._translate_batch,
            count_tokens=self._count_tokens,
            max_tokens=budget,
            max_wait=config.max_wait_ms / 1000,
            batching=config.batching,
            stream_for=self._stream_for if self.continuous else None,
            executor=executor,
            on_batch=metrics.batch if metrics is not None else None,
            lanes=lanes,
            gate=gate,
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
                    glossary=[x.glossary for x in items],
                )
            results = self.translator.translate_nbest(
                [_text_of(x) for x in items],
                on_truncated=self._warn_truncated,
                alignments=key.alignments,
                source_lang=key.direction[0],
                target_lang=key.direction[1],
                repetition_guard=self.guard,
                **kwargs,
                **fields,
            )
            for i, r in zip(idx, results):
                out[i] = r
        return out

    def _stream_for(self, key: _Options) -> SearchStream | None:
        """A continuous search for sentences with ``key`` (torch engine, plain beam search)."""
        if key.constrained or self.translator.multilingual:  # the stream encodes untagged
            return None
        if not supports(self.translator.engine.model, key.search, alignments=key.alignments):
            return None
        return SearchStream(self.translator, key.search, self._warn_truncated)

    def _count_tokens(self, sentences: list[str]) -> list[int]:
        texts = [_text_of(x) for x in sentences]
        ids = self.translator.encode(texts, on_truncated=lambda _i, _n: None)
        return [len(x) for x in ids]

    def constrained(self, req: TranslateRequest, texts: list[str], opts: SearchOptions) -> dict:
        """Per text index, its :class:`_Constrained` sentence (checked now, on the event loop,
        so that a bad constraint is this request's 400 and never fails a shared batch)."""
        batch = isinstance(req.text, list)

        def per_text(value: Any) -> list:
            # Shapes and types are the schema's check (schemas._per_text): here only spread.
            if value is None:
                return [None] * len(texts)
            return value if batch else [value]

        prefixes = per_text(req.prefix)
        includes = per_text(req.constraints)
        avoids = per_text(req.avoid)
        out = {}
        for k, text in enumerate(texts):
            p, inc, av = prefixes[k] or "", list(includes[k] or []), list(avoids[k] or [])
            if not (p or inc or av):
                continue
            where = f"text[{k}]" if batch else "text"
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

    def check_queue(self, n_sentences: int) -> None:
        """Backpressure: RequestError 503 when queueing ``n_sentences`` more would pass
        ``--max-queue`` (a request never waits behind an unbounded queue). The app answers it
        with ``Retry-After``: the seconds the engine needs for the queue at its pace so far."""
        bound = self.config.max_queue
        queued = self.batcher.stats.queued_sentences
        if bound and queued and queued + n_sentences > bound:
            s = self.batcher.stats
            # busy_seconds sums the lanes, which translate at the same time
            pace = self.batcher.lanes * s.sentences / s.busy_seconds if s.busy_seconds > 0 else 0.0
            wait = max(1, math.ceil(queued / pace)) if pace > 0 else 1
            raise RequestError(
                503,
                f"the server is busy ({queued:,} sentences queued); retry in {wait} s",
                retry_after=wait,
            )

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
        totals: bool = True,
    ) -> list[_Text]:
        """Cut every text into sentences and check the request against the limits.

        ``whole``: indices of texts not cut into sentences (constrained texts). ``totals``:
        False skips the per-request limits (characters, sentences) for a file, which has its
        own size limit and is queued in parts within them (:meth:`file_parts`); the
        per-sentence limit still holds."""
        cfg = self.config
        total = 0
        for i, text in enumerate(texts):
            check_unicode(text, field if len(texts) == 1 else f"{field}[{i}]")
            total += len(text)
        if totals and total > cfg.max_chars:
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
            if totals and start > cfg.max_sentences:
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
        direction: tuple[str | None, str | None] = (None, None),
        parts: bool = False,
        glossary: Glossary | None = None,
    ) -> list[list]:
        """Per sentence of the request, its n-best list of Translations.

        ``constrained``: text index -> its one constrained sentence (see :meth:`constrained`).
        ``glossary``: the request's glossary (:func:`seq2seq.serve.glossaries.request_glossary`),
        applied to each sentence it matches (checked here: a term the vocabulary cannot
        spell is this request's 400).
        ``alignments``: fill each Translation's ``alignment`` (such sentences are batched
        only with others that want alignments). ``direction``: ``(source_lang, target_lang)``
        of the body, checked by the Translator (a 400 names the directions it knows).
        ``parts``: a file's sentences, queued a part at a time (:meth:`_in_parts`).
        """
        try:
            direction = self.translator.direction(*direction)
        except UserError as e:
            raise RequestError(400, str(e)) from None
        sentences: list = []
        for k, t in enumerate(texts):
            if constrained and k in constrained:
                c = constrained[k]
                if glossary is not None:
                    c = dataclasses.replace(c, glossary=glossary)
                sentences.extend([c] * len(t.segments.sentences))
            elif glossary is not None:
                sentences.extend(
                    _Constrained(s, glossary=glossary) if glossary.matches(s) else s
                    for s in t.segments.sentences
                )
            else:
                sentences.extend(t.segments.sentences)
        if glossary is not None:
            self._check_glossary(sentences, opts)
        key = _Options(
            opts,
            alignments,
            constrained=any(isinstance(x, _Constrained) for x in sentences),
            direction=direction,
        )
        try:
            if parts:
                results = await self._in_parts(sentences, key)
            else:
                self.check_queue(len(sentences))
                results = await self.batcher.translate(sentences, key)
        except EngineFailure as e:
            if isinstance(e.original, UserError):  # options this engine cannot honour
                raise RequestError(400, str(e.original)) from None
            raise RequestError(500, str(e)) from None
        except BatcherClosed as e:
            raise RequestError(503, str(e)) from None
        if self.metrics is not None:
            self.metrics.translated([_text_of(x) for x in sentences])
        return results

    def file_parts(self, sentences: list[str]) -> list[list[str]]:
        """``sentences`` cut into the parts a file is queued in: each within a request's
        limits (``--max-sentences``, ``--max-chars``) and at most half of ``--max-queue``, so
        that the other half stays open to other clients while a file is translated."""
        cfg = self.config
        most = cfg.max_sentences
        if cfg.max_queue:
            most = min(most, max(1, cfg.max_queue // 2))
        out: list[list[str]] = []
        part: list[str] = []
        chars = 0
        for sentence in sentences:
            size = len(_text_of(sentence))
            if part and (len(part) >= most or chars + size > cfg.max_chars):
                out.append(part)
                part, chars = [], 0
            part.append(sentence)
            chars += size
        if part:
            out.append(part)
        return out

    async def _in_parts(self, sentences: list, key: _Options) -> list:
        """A file's sentences translated a part at a time (:meth:`file_parts`): the first part
        is admitted as a request is (503 when the queue is full), each next one once the one
        before is translated and the queue has room for it."""
        results: list = []
        for k, part in enumerate(self.file_parts(sentences)):
            if k == 0:
                self.check_queue(len(part))
            else:
                await self._room(len(part))
            results.extend(await self.batcher.translate(part, key))
        return results

    async def _room(self, n: int) -> None:
        """Wait until ``n`` more sentences fit under ``--max-queue`` (or the queue is empty)."""
        bound = self.config.max_queue
        while bound:
            queued = self.batcher.stats.queued_sentences
            if not queued or queued + n <= bound:
                return
            await asyncio.sleep(0.02)

    def _check_glossary(self, sentences: list, opts: SearchOptions) -> None:
        """RequestError 400 when the glossary cannot be applied to the request's sentences."""
        todo = [x for x in sentences if isinstance(x, _Constrained) and x.glossary is not None]
        if not todo:
            return
        if not self.can_constrain:
            raise RequestError(
                400, "this server's engine cannot apply glossaries; serve with --engine torch"
            )
        if opts.method == "sample":
            raise RequestError(400, "a glossary needs beam search or greedy, not sampling")
        for x in dict.fromkeys(todo):
            try:
                self.translator.constraints_for(
                    [x.text],
                    constraints=[list(x.constraints)],
                    ordered=x.ordered,
                    prefix=[x.prefix],
                    avoid=[list(x.avoid)],
                    glossary=x.glossary,
                    no_repeat_ngram=opts.no_repeat_ngram,
                    where=lambda _i, s=x.text: f"sentence {s[:40]!r}",
                )
            except UserError as e:
                raise RequestError(400, f"glossary: {e}") from None

    @property
    def can_constrain(self) -> bool:
        """Whether the engine does positive constraints (glossaries, ``constraints``)."""
        return getattr(self.translator.engine, "positive_constraints", True)

    @property
    def can_align(self) -> bool:
        """Whether the engine gives word alignments (cross-attention)."""
        return not getattr(self.translator.engine, "no_attention", None)

    async def translate_libre(
        self,
        texts: list[str],
        direction: tuple[str, str],
        alternatives: int,
        glossary: Glossary | None = None,
    ) -> tuple[list[str], list[list[str]]]:
        """LibreTranslate's text translation in ``direction`` (a direction of the model): per
        text its translation and up to ``alternatives`` other ones (the n-best list's distinct
        texts)."""
        if alternatives:
            base = self.translator.opts
            opts = self.options(
                method="beam" if base.method == "greedy" else base.method,
                beam_size=max(base.beam_size, alternatives + 1),
                nbest=alternatives + 1,
            )
        else:
            opts = self.options(nbest=1)
        split = self.split(texts, language=direction[0], split=True, field="q")
        results = await self.translate(split, opts, direction=direction, glossary=glossary)
        out = [self.joined(t, results) for t in split]
        alts = []
        for text, best in zip(split, out):
            seen, mine = {best, ""}, []
            for k in range(1, opts.nbest):
                alt = self.joined(text, results, k)
                if alt not in seen:
                    seen.add(alt)
                    mine.append(alt)
            alts.append(mine[:alternatives])
        return out, alts

    async def translate_sentences(self, sentences: list[str], opts: SearchOptions, **kw) -> list:
        """:meth:`translate` of sentences already cut (one text, no layout): per sentence its
        n-best list; ``kw`` as :meth:`translate`'s."""
        return await self.translate([_Text(Segments(list(sentences), []), 0)], opts, **kw)

    async def attention(
        self, sentences: list[str], targets: list[str], layer: int | None, head: int | None
    ) -> list[dict]:
        """Cross-attention of each (sentence, translation), teacher-forced, for the heatmap.

        Runs on the engine thread between two batches (the model is not shared with a batch).

        Raises:
            RequestError: 400 for a layer or head the model lacks, 503 while shutting down.
        """
        try:
            return await self.batcher.call(
                lambda: _attention_maps(self.translator, sentences, targets, layer, head)
            )
        except UserError as e:
            raise RequestError(400, str(e)) from None
        except BatcherClosed as e:
            raise RequestError(503, str(e)) from None

    @staticmethod
    def joined(text: _Text, results: list[list], k: int = 0) -> str:
        """Text ``text`` rejoined from each sentence's ``k``-th hypothesis (or its last)."""
        n = len(text.segments.sentences)
        picks = [results[text.start + j] for j in range(n)]
        return join_text(text.segments, [h[min(k, len(h) - 1)].text for h in picks])


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

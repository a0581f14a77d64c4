"""The translation service behind the routes: a request's texts cut into sentences and checked
against the limits, its search options and constraints checked, its sentences queued on the
:class:`~seq2seq.serve.batcher.Batcher` and the results put back together.

What a request gets wrong is found on the event loop, before its sentences are queued, and
refused with a :class:`~seq2seq.serve.bodies.RequestError`: a bad request never fails a shared
batch. (Options an engine cannot honour are found by the engine: a 400 for that request alone.)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lxml.etree import LxmlError

from seq2seq.core import UserError
from seq2seq.decode import TorchEngine, supports
from seq2seq.serve.batcher import Batcher, BatcherClosed, EngineFailure
from seq2seq.serve.bodies import RequestError, check_unicode
from seq2seq.serve.html import HtmlDocument, RunTranslation
from seq2seq.serve.logs import log
from seq2seq.serve.paragraphs import Segments, join_text, split_text
from seq2seq.serve.stream import SearchStream

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from seq2seq.decode import SearchOptions
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.metrics import ServerMetrics
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
    direction: tuple[str | None, str | None] = (None, None)  # a multilingual model's


class TranslationService:
    """The translator, its batcher and the request logic behind the endpoints.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator`.
        info: what the server says about the model (its language pair is checked here).
        config: limits and batching.
        executor: the engine thread the batcher runs every engine call on; None: its own.
        metrics: where to count batches and translated text (None: nothing is counted).
    """

    def __init__(
        self,
        translator,
        info: ModelInfo,
        config: ServeConfig,
        executor: ThreadPoolExecutor | None,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.translator = translator
        self.info = info
        self.config = config
        self.metrics = metrics
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
            on_batch=metrics.batches.observe if metrics is not None else None,
            lanes=lanes,
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
                source_lang=key.direction[0],
                target_lang=key.direction[1],
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

    def check_pair(self, source: str | None, target: str | None) -> tuple[str, str]:
        """The ``(source, target)`` direction to translate (its source is the language to split
        with); RequestError for a pair the model lacks.

        A missing source or target is the first direction's; ``auto`` must have been resolved
        by the caller (:mod:`seq2seq.serve.detect`)."""
        s = (source or self.info.source).strip().lower()
        t = (target or self.info.target).strip().lower()
        if self.info.many:  # M2M100 / NLLB: any two of its languages
            try:
                return (
                    self.info.resolve(source or self.info.source, "source"),
                    self.info.resolve(target or self.info.target, "target"),
                )
            except UserError as e:
                raise RequestError(400, str(e)) from None
        if (s, t) not in self.info.directions:
            pairs = ", ".join(f"{a}->{b}" for a, b in self.info.directions)
            raise RequestError(
                400, f"language pair {s}->{t} is not supported (supported pairs: {pairs})"
            )
        return s, t

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
        own size limit; the per-sentence limit still holds."""
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
    ) -> list[list]:
        """Per sentence of the request, its n-best list of Translations.

        ``constrained``: text index -> its one constrained sentence (see :meth:`constrained`).
        ``alignments``: fill each Translation's ``alignment`` (such sentences are batched
        only with others that want alignments). ``direction``: ``(source_lang, target_lang)``
        of the body, checked by the Translator (a 400 names the directions it knows).
        """
        try:
            direction = self.translator.direction(*direction)
        except UserError as e:
            raise RequestError(400, str(e)) from None
        sentences: list = []
        for k, t in enumerate(texts):
            if constrained and k in constrained:
                sentences.extend([constrained[k]] * len(t.segments.sentences))
            else:
                sentences.extend(t.segments.sentences)
        self.check_queue(len(sentences))
        try:
            key = _Options(opts, alignments, constrained=bool(constrained), direction=direction)
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

    @property
    def can_align(self) -> bool:
        """Whether the engine gives word alignments (cross-attention)."""
        return not getattr(self.translator.engine, "no_attention", None)

    def check_size(self, texts: list[str], *, field: str) -> None:
        """RequestError 400 for texts over ``--max-chars`` (``--char-limit``) together."""
        total = sum(len(t) for t in texts)
        if total > self.config.max_chars:
            raise RequestError(
                400, f"request has {total:,} characters; the limit is {self.config.max_chars:,}"
            )
        for i, text in enumerate(texts):
            check_unicode(text, field if len(texts) == 1 else f"{field}[{i}]")

    async def translate_libre(
        self, texts: list[str], direction: tuple[str, str], alternatives: int
    ) -> tuple[list[str], list[list[str]]]:
        """LibreTranslate's text translation in ``direction`` (from :meth:`check_pair`): per
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
        results = await self.translate(split, opts, direction=direction)
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

    async def translate_html(
        self, texts: list[str], *, direction: tuple[str, str], field: str, totals: bool = True
    ) -> list[str]:
        """Each HTML text translated in ``direction`` with its markup kept
        (:mod:`seq2seq.serve.html`)."""
        if not any(t.strip() for t in texts):
            raise RequestError(400, f"empty text: {field} has nothing to translate")
        try:
            docs = [HtmlDocument(t, inline=self.can_align) for t in texts]
        except (ValueError, LxmlError) as e:  # what lxml cannot parse at all
            raise RequestError(400, f"{field} is not HTML that can be parsed: {e}") from None
        runs = [r for d in docs for r in d.texts]
        if not runs:
            return [d.apply([]) for d in docs]
        align = self.can_align and any(d.needs_alignments for d in docs)
        split = self.split(runs, language=direction[0], split=True, field=field, totals=totals)
        results = await self.translate(
            split, self.options(nbest=1), alignments=align, direction=direction
        )
        done = []
        for t in split:
            hyps = [results[t.start + j][0] for j in range(len(t.segments.sentences))]
            done.append(
                RunTranslation(
                    [
                        (s, h.text, h.alignment if align else None)
                        for s, h in zip(t.segments.sentences, hyps)
                    ]
                )
            )
        out, start = [], 0
        for d in docs:
            out.append(d.apply(done[start : start + len(d.runs)]))
            start += len(d.runs)
        return out

    async def translate_file_text(self, text: str, direction: tuple[str, str]) -> str:
        """A text file's translation in ``direction``, its layout kept (lines, indentation)."""
        split = self.split([text], language=direction[0], split=True, field="file", totals=False)
        results = await self.translate(split, self.options(nbest=1), direction=direction)
        return self.joined(split[0], results)

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

"""Dynamic batching: sentences from concurrent requests translated together, each result
returned to its own request, in order.

A translation engine is far more efficient on a batch of sentences than on one at a time (one
matrix multiply per step for the whole batch instead of one per sentence), but an HTTP
server receives requests of one or a few sentences each. :class:`Batcher` sits between the
two:

- :meth:`Batcher.translate` (called by a request handler on the event loop) queues the
  request's sentences and waits for their results;
- a scheduling task on the event loop forms a batch once the oldest queued sentence has
  waited ``max_wait`` seconds or ``max_tokens`` source tokens are queued, whichever comes
  first, taking sentences first come first served (a long request is split across batches;
  its sentences keep their order);
- the batch is translated in one worker thread (a single-thread executor), so the event loop
  keeps accepting and parsing requests while the engine works, and the engine is never
  called from two threads at once; requests that arrive meanwhile form the next batch.

Lanes: an engine that runs several calls at once on workers of its own (CTranslate2 on CPU
with several ``inter_threads``) gets ``lanes`` batches in flight, each on a thread of the
batcher's lane pool. A lane that frees takes the queue as it is then (after ``max_wait``), and
lanes free at the same time share the queue evenly, so the engine always has the next batch
queued while it finishes one: with one lane, the worker that ends its part of a batch first
idles until the others end theirs and the next batch is formed (docs/benchmarks.md).

Only sentences with equal options share a batch (a request asking for beam 10 is not mixed with
the default beam 5; the options of :mod:`seq2seq.serve.service` are the
:class:`~seq2seq.decode.options.SearchOptions`, whether word alignments are wanted and whether
the sentences are constrained). With ``batching=False`` every batch holds one request's
sentences only: the one-request-at-a-time server that benchmarks compare against.

Continuous batching: where the caller gives a ``stream_for(options)`` that returns a
:class:`Stream` (:mod:`seq2seq.serve.service` does for the torch engine's beam search with
``--continuous``: :mod:`seq2seq.serve.stream`), sentences do not wait for a batch to end. The
worker advances the running search one step at a time; between two steps queued sentences with
the search's options join it (up to ``max_tokens`` source tokens in the search), and each
sentence's result goes back the moment it is finished. Queued sentences with other options are served first come first served: the
search stops taking new sentences while an older one with other options waits, finishes the
ones it has, and that sentence's batch runs next.

An exception in the engine fails only the requests it hit: a failed batch of several requests
is retried request by request, so one poisoned input does not take its batch neighbours down,
and the requests whose own retry fails get :class:`EngineFailure`. The scheduler itself never
stops on an error. :meth:`Batcher.close` stops taking requests, finishes every queued one,
then stops the worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from seq2seq.serve.logs import log

__all__ = ["Batcher", "BatcherClosed", "BatcherStats", "EngineFailure", "Stream", "engine_thread"]


Options = TypeVar("Options")  # hashable search options (SearchOptions is a frozen dataclass)
Result = TypeVar("Result")

TranslateFn = Callable[[list[str], Any], list[Any]]
"""``translate(sentences, options) -> one result per sentence``, run on the worker thread."""


class Stream(Protocol):
    """A running search that sentences join between steps (see the module docstring)."""

    @property
    def active(self) -> int:
        """Sentences in the search."""
        ...

    @property
    def tokens(self) -> int:
        """Source tokens of the sentences in the search."""
        ...

    def advance(self, new: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """On the worker thread: let ``new`` ``(key, sentence)`` join, run one step, and
        return ``(key, result)`` of the sentences finished (new ones may finish at once)."""
        ...

    def reset(self) -> None:
        """Forget every sentence (after ``advance`` raised)."""
        ...


def engine_thread() -> ThreadPoolExecutor:
    """The one thread that runs a server's every engine call, its loading and warm-up included.

    PyTorch's CPU build parallelizes with GNU OpenMP, which gives every thread that starts a
    parallel operator a team of its own, and whose idle workers stop spinning and sleep once
    the process holds more OpenMP threads than there are CPUs. A model loaded (or warmed up)
    on the main thread and then run on a worker thread makes two teams, so on few cores the
    worker's helper thread sleeps and is woken for each of the hundreds of operators of a
    decoding step (benchmarks/engine_thread.py measures it). Hand this executor to
    :class:`Batcher` and load the model through it.
    """
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="seq2seq-engine")


class EngineFailure(RuntimeError):
    """The engine raised while translating a request's sentences (the message says what).

    Attributes:
        original: the exception the engine raised.
    """

    def __init__(self, message: str, original: BaseException) -> None:
        super().__init__(message)
        self.original = original


class BatcherClosed(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


@dataclass
class BatcherStats:
    """Counters since start (read them on the event loop)."""

    requests: int = 0
    sentences: int = 0
    batches: int = 0
    failed_requests: int = 0
    largest_batch: int = 0
    queued_sentences: int = 0
    in_flight_requests: int = 0
    busy_seconds: float = 0.0
    """Time spent translating batches, summed over the lanes."""
    stream_steps: int = 0
    """Steps of the continuous search."""
    stream_rows: int = 0
    """Sentences in the continuous search, summed over its steps (/ stream_steps: the mean)."""


@dataclass(eq=False)
class _Job:
    """One request: its future and the results collected so far."""

    future: asyncio.Future
    results: list
    remaining: int


@dataclass(eq=False)
class _Item:
    """One queued sentence of a job."""

    job: _Job
    index: int
    text: str
    n_tokens: int
    options: Any
    arrival: float


@dataclass(eq=False)
class _Call:
    """A function to run alone on the worker thread (e.g. attention maps)."""

    fn: Callable[[], Any]
    future: asyncio.Future = field(repr=False)


class Batcher(Generic[Options, Result]):
    """Queues sentences of concurrent requests and translates them in shared batches.

    Args:
        translate: ``translate(sentences, options) -> results`` (one per sentence, in
            order), called on the worker thread with the sentences of one batch.
        count_tokens: ``count_tokens(sentences) -> source tokens per sentence``, called on
            the event loop when a request arrives (for the token budget).
        max_tokens: source tokens per batch (no padding counted); a sentence longer than
            that is a batch of its own.
        max_wait: seconds the oldest queued sentence may wait for others to join its batch
            (the wait only happens while the worker is idle: a busy worker's backlog goes
            out as soon as it is free).
        batching: False: every batch holds the sentences of one request only.
        stream_for: ``stream_for(options)`` -> a :class:`Stream` for sentences with these
            options, or None (static batches); with ``batching`` only.
        executor: the worker thread (:func:`engine_thread`; the thread the engine was
            loaded on), which the caller shuts down; None: the batcher starts its own with
            :meth:`start` and stops it with :meth:`close`.
        on_batch: called on the event loop with the number of sentences of each batch (of
            each group joining the continuous search), for the metrics.
        lanes: static batches in flight at once, each on its own thread (>1 only for an engine
            that may be called from several threads at once; not with ``stream_for``).
        gate: a lock shared by the batchers of several models on one engine thread
            (:mod:`seq2seq.serve.model_pool`); with one lane, a batcher takes its next batch
            from the queue only once it holds the gate, so that its queue keeps filling while
            another model's batch runs (forming it earlier would leave it waiting in the
            thread's queue, as small as it was). None: this batcher's thread is its own.
    """

    def __init__(
        self,
        translate: TranslateFn,
        *,
        count_tokens: Callable[[list[str]], list[int]],
        max_tokens: int,
        max_wait: float,
        batching: bool = True,
        stream_for: Callable[[Any], Stream | None] | None = None,
        executor: ThreadPoolExecutor | None = None,
        on_batch: Callable[[int], None] | None = None,
        lanes: int = 1,
        gate: asyncio.Lock | None = None,
    ) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        if lanes > 1 and stream_for is not None:
            raise ValueError("lanes > 1 runs static batches only, not a continuous search")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0, got {max_wait}")
        self._translate = translate
        self._count_tokens = count_tokens
        self.max_tokens = max_tokens
        self.max_wait = max_wait
        self.batching = batching
        self._stream_for = stream_for if batching else None
        self._stream: Stream | None = None
        self._stream_options: Any = None
        self._in_stream: dict[int, _Item] = {}
        self._next_key = 0
        self.stats = BatcherStats()
        self._pending: collections.deque[_Item] = collections.deque()
        self._calls: collections.deque[_Call] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._given_executor = executor
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False
        self._on_batch = on_batch
        self.lanes = lanes
        self._running: set[asyncio.Task] = set()
        self._lane_pool: ThreadPoolExecutor | None = None
        self._gate = gate if lanes == 1 else None

    # ---- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler task (on the running loop) and the worker thread."""
        if self._task is not None:
            raise RuntimeError("the batcher is already running")
        self._wakeup = asyncio.Event()
        self._executor = self._given_executor or engine_thread()
        if self.lanes > 1:
            self._lane_pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="seq2seq-lane")
        self._closing = False
        self._task = asyncio.get_running_loop().create_task(self._schedule())

    async def close(self) -> None:
        """Refuse new requests, finish every queued one, then stop the worker thread."""
        self._closing = True
        if self._task is None:
            return
        self._wake()
        await self._task
        self._task = None
        executor, self._executor = self._executor, None
        pools = [self._lane_pool] if self._lane_pool is not None else []
        self._lane_pool = None
        if executor is not None and executor is not self._given_executor:
            pools.append(executor)
        for pool in pools:
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._task is not None and not self._closing

    # ---- what request handlers call ----------------------------------------------------

    async def translate(self, sentences: Sequence[str], options: Options) -> list[Result]:
        """Translate ``sentences`` with ``options``; one result per sentence, in order.

        Raises:
            EngineFailure: the engine raised on these sentences.
            BatcherClosed: the batcher is shutting down.
        """
        if not self.running:
            raise BatcherClosed("the server is shutting down")
        sentences = list(sentences)
        loop = asyncio.get_running_loop()
        job = _Job(future=loop.create_future(), results=[None] * len(sentences), remaining=0)
        self.stats.requests += 1
        if not sentences:
            return []
        now = loop.time()
        counts = self._count_tokens(sentences)
        job.remaining = len(sentences)
        self._pending.extend(
            _Item(job, i, text, max(n, 1), options, now)
            for i, (text, n) in enumerate(zip(sentences, counts))
        )
        self.stats.queued_sentences += len(sentences)
        self.stats.in_flight_requests += 1
        self._wake()
        try:
            return await job.future
        finally:
            self.stats.in_flight_requests -= 1

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the worker thread between two batches and return its result.

        For work that uses the engine's model outside a translation (attention maps): it
        never runs at the same time as a batch.
        """
        if not self.running:
            raise BatcherClosed("the server is shutting down")
        call = _Call(fn, asyncio.get_running_loop().create_future())
        self._calls.append(call)
        self._wake()
        return await call.future

    # ---- the scheduler -----------------------------------------------------------------

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _drop_abandoned(self) -> None:
        """Forget queued sentences of requests that were cancelled or already failed."""
        while self._pending and self._pending[0].job.future.done():
            self._pending.popleft()
            self.stats.queued_sentences -= 1

    def _queued_tokens(self, options: Any, cap: int) -> int:
        """Tokens queued for batches with ``options`` (stops counting at ``cap``)."""
        total = 0
        for item in self._pending:
            if item.options == options and not item.job.future.done():
                total += item.n_tokens
                if total >= cap:
                    break
        return total

    def _share(self, options: Any) -> int:
        """The token budget of the next batch: ``max_tokens``, or with several lanes free at
        once, an even share of what is queued (so that every free lane gets its part)."""
        free = self.lanes - len(self._running)
        if free <= 1:
            return self.max_tokens
        queued = self._queued_tokens(options, self.max_tokens * free)
        return max(1, min(self.max_tokens, -(-queued // free)))

    def _lane_done(self, task: asyncio.Task) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a batch lane failed", exc_info=task.exception())
        self._wake()

    async def _drain(self) -> None:
        """Wait until no lane runs a batch."""
        while self._running:
            await asyncio.wait(set(self._running))

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None
        while True:
            if self._calls:
                await self._drain()  # a call runs alone
                async with self._gated():
                    await self._run_call(self._calls.popleft())
                continue
            self._drop_abandoned()
            if self._stream is not None:
                if self._stream.active or self._in_stream:
                    await self._stream_step()
                    continue
                self._stream = None
            if not self._pending:
                if self._closing:
                    await self._drain()
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(self._running) >= self.lanes:  # every lane busy: wait for one
                await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)
                continue
            oldest = self._pending[0]
            if self.batching and not self._closing:
                deadline = oldest.arrival + self.max_wait
                while self._queued_tokens(oldest.options, self.max_tokens) < self.max_tokens:
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self._closing or self._calls:
                        break
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), remaining)
                    except TimeoutError:
                        break
            if self._stream_for is not None:
                try:
                    self._stream = self._stream_for(oldest.options)
                except Exception:  # no search for these options: a static batch instead
                    log.exception("could not start a continuous search; static batches")
                    self._stream = None
                if self._stream is not None:
                    self._stream_options = oldest.options
                    await self._stream_step()
                    continue
            if self.lanes == 1:
                async with self._gated():  # the queue grows while another model's batch runs
                    batch = self._take(oldest.options, oldest.job)
                    if batch:
                        await self._run_batch(batch)
                continue
            batch = self._take(oldest.options, oldest.job, budget=self._share(oldest.options))
            if batch:
                task = loop.create_task(self._run_batch(batch))
                self._running.add(task)
                task.add_done_callback(self._lane_done)

    def _gated(self) -> contextlib.AbstractAsyncContextManager:
        """The shared engine gate, held while this batcher uses the engine thread."""
        return self._gate if self._gate is not None else contextlib.nullcontext()

    def _take(
        self,
        options: Any,
        first_job: _Job,
        *,
        used: int | None = None,
        budget: int | None = None,
    ) -> list[_Item]:
        """Remove the next batch from the queue: FIFO among sentences with ``options``.

        ``used``: source tokens already in the running search (joining it, not even the first
        sentence goes beyond the budget); None: a new batch, whose first sentence always fits.
        ``budget``: the batch's source tokens (None: ``max_tokens``).
        """
        budget = self.max_tokens if budget is None else budget
        batch: list[_Item] = []
        tokens = 0 if used is None else used
        keep: collections.deque[_Item] = collections.deque()
        while self._pending:
            item = self._pending.popleft()
            if item.job.future.done():
                self.stats.queued_sentences -= 1
                continue
            fits = item.options == options and (self.batching or item.job is first_job)
            first = not batch and used is None
            if fits and (first or tokens + item.n_tokens <= budget):
                batch.append(item)
                tokens += item.n_tokens
                self.stats.queued_sentences -= 1
                if tokens >= budget:
                    break
            else:
                keep.append(item)
                if fits:
                    break  # the budget is full: the rest waits for the next batch
        keep.extend(self._pending)
        self._pending = keep
        return batch

    async def _stream_step(self) -> None:
        """Let queued sentences join the running search, run one step, deliver what finished."""
        async with self._gated():
            await self._stream_step_gated()

    async def _stream_step_gated(self) -> None:
        stream = self._stream
        assert stream is not None
        loop = asyncio.get_running_loop()
        joining: list[_Item] = []
        if self._pending and self._pending[0].options == self._stream_options:
            first = self._pending[0].job
            used = stream.tokens if (stream.active or self._in_stream) else None
            joining = self._take(self._stream_options, first, used=used)
        new = []
        for item in joining:
            self._next_key += 1
            self._in_stream[self._next_key] = item
            new.append((self._next_key, item.text))
        if joining:
            self.stats.batches += 1
            self.stats.sentences += len(joining)
            if self._on_batch is not None:
                self._on_batch(len(joining))
        self.stats.stream_steps += 1
        self.stats.stream_rows += len(self._in_stream)
        self.stats.largest_batch = max(self.stats.largest_batch, len(self._in_stream))
        started = time.perf_counter()
        try:
            finished = await loop.run_in_executor(self._executor, stream.advance, new)
        except Exception as error:  # retried request by request in static batches
            items = list(self._in_stream.values())
            self._in_stream.clear()
            stream.reset()
            self._stream = None
            await self._retry_alone(items, self._stream_options, error)
            return
        finally:
            self.stats.busy_seconds += time.perf_counter() - started
        if finished:
            items = [self._in_stream.pop(key) for key, _ in finished]
            self._deliver(items, [result for _, result in finished])

    async def _run_call(self, call: _Call) -> None:
        if call.future.done():
            return
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, call.fn)
        except Exception as e:  # handed to the caller, never kills the scheduler
            if not call.future.done():
                call.future.set_exception(e)
            return
        if not call.future.done():
            call.future.set_result(result)

    async def _run_batch(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        options = batch[0].options
        self.stats.batches += 1
        self.stats.sentences += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        if self._on_batch is not None:
            self._on_batch(len(batch))
        started = time.perf_counter()
        try:
            results = await loop.run_in_executor(
                self._batch_pool, self._translate_checked, [it.text for it in batch], options
            )
        except Exception as error:
            await self._retry_alone(batch, options, error)
            return
        finally:
            self.stats.busy_seconds += time.perf_counter() - started
        self._deliver(batch, results)

    @property
    def _batch_pool(self) -> ThreadPoolExecutor | None:
        """Where static batches run: the lane pool, or the worker thread."""
        return self._lane_pool or self._executor

    def _translate_checked(self, texts: list[str], options: Any) -> list[Any]:
        results = self._translate(texts, options)
        if len(results) != len(texts):
            raise RuntimeError(f"the engine returned {len(results)} results for {len(texts)}")
        return results

    def _deliver(self, items: list[_Item], results: list[Any]) -> None:
        for item, result in zip(items, results):
            job = item.job
            if job.future.done():
                continue
            job.results[item.index] = result
            job.remaining -= 1
            if job.remaining == 0:
                job.future.set_result(job.results)

    def _fail(self, job: _Job, error: BaseException) -> None:
        if not job.future.done():
            self.stats.failed_requests += 1
            job.future.set_exception(
                EngineFailure(f"translation failed: {type(error).__name__}: {error}", error)
            )

    async def _retry_alone(self, batch: list[_Item], options: Any, error: Exception) -> None:
        """A batch failed: retry each request's sentences on their own (if it had several)."""
        jobs: dict[int, list[_Item]] = {}
        for item in batch:
            jobs.setdefault(id(item.job), []).append(item)
        if len(jobs) == 1:
            self._fail(batch[0].job, error)
            return
        loop = asyncio.get_running_loop()
        for items in jobs.values():
            job = items[0].job
            if job.future.done():
                continue
            try:
                results = await loop.run_in_executor(
                    self._batch_pool, self._translate_checked, [it.text for it in items], options
                )
            except Exception as e:
                self._fail(job, e)
                continue
            self._deliver(items, results)

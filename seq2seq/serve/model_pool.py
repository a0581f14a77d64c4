"""The models of a server in memory: each loaded model's :class:`~seq2seq.serve.service
.TranslationService` (its translator and its own batcher), loading on demand and the memory
budget (``--max-loaded N``).

- Without a budget every model loads when the server starts. With ``--max-loaded N`` at most N
  models are in memory: the ones marked ``preload`` load at start, any other on its first
  request, and when the budget is full the least recently used model that no request is using
  is unloaded first (its batcher finishes, its translator is dropped). A request for a model
  that is loading waits for that load (concurrent requests share one load); when every loaded
  model is in use, a load waits until one is free. A request never fails for the budget.
- Loads, warm-up and every model's batches run on the server's one engine thread
  (:func:`~seq2seq.serve.batcher.engine_thread` says why), so other models' batches wait while
  a model loads. The models' batchers take turns through one gate: a batcher forms its next
  batch only when its turn comes, so that it holds every sentence queued meanwhile.
- A load that fails answers its waiting requests with a 503 that says why, and the next
  request tries again; a model loaded at start that fails stops the server
  (``on_fatal``: the launcher exits 2 with that line).
- :attr:`ModelPool.ready`: the models loaded at start are loaded (``GET /ready``).

Everything here runs on the event loop except the load itself.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seq2seq.core import UserError
from seq2seq.serve.bodies import RequestError
from seq2seq.serve.logs import log
from seq2seq.serve.service import TranslationService

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.metrics import ServerMetrics
    from seq2seq.serve.model_specs import PlannedModel
    from seq2seq.serve.served_model import ModelInfo

__all__ = ["ModelPool"]

Loader = Callable[["PlannedModel"], tuple[Any, "ModelInfo"]]
"""``load(model) -> (translator, info)``, run on the engine thread."""


@dataclass(eq=False)
class _Entry:
    model: PlannedModel
    service: TranslationService | None = None
    loading: asyncio.Task | None = None
    reserved: bool = False  # counted against the budget while it loads
    users: int = 0
    last_used: int = 0
    loaded_once: bool = False
    error: str | None = None
    given: tuple[Any, ModelInfo] | None = None  # a translator loaded by the caller


class ModelPool:
    """The served models, loaded on demand within a budget (the module docstring).

    Args:
        models: the models, checked (:func:`~seq2seq.serve.model_specs.plan_model`).
        config: limits and batching (every model's batcher).
        executor: the engine thread every load and engine call runs on; the caller shuts it
            down.
        load: loads a model on the engine thread.
        metrics: where loads, unloads and each model's batches are counted.
        max_loaded: at most this many models in memory (0: no budget, all load at start).
        given: translators the caller loaded already, by model name (never unloaded, and
            outside the budget).

    Raises:
        UserError: more models marked ``preload`` than ``max_loaded``; a budget below 0.
    """

    def __init__(
        self,
        models: Sequence[PlannedModel],
        *,
        config: ServeConfig,
        executor: ThreadPoolExecutor | None,
        load: Loader | None = None,
        metrics: ServerMetrics | None = None,
        max_loaded: int = 0,
        given: Mapping[str, tuple[Any, ModelInfo]] | None = None,
    ) -> None:
        if max_loaded < 0:
            raise UserError(f"--max-loaded must be >= 0, got {max_loaded}")
        self.config = config
        self.max_loaded = max_loaded
        self._executor = executor
        self._load_fn = load
        self._metrics = metrics
        self._entries = {m.name: _Entry(m, given=(given or {}).get(m.name)) for m in models}
        if max_loaded:
            self.preload = [m.name for m in models if m.preload]
            if len(self.preload) > max_loaded:
                raise UserError(
                    f"{len(self.preload)} models are marked preload, more than --max-loaded "
                    f"{max_loaded}"
                )
        else:
            self.preload = [m.name for m in models]
        self._clock = 0
        # the models' batchers take turns on the one engine thread (Batcher's gate)
        self._gate = asyncio.Lock() if len(self._entries) > 1 else None
        self._changed: asyncio.Event | None = None
        self._startup: asyncio.Task | None = None
        self._closing = False
        self.startup_error: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        for name, entry in self._entries.items():
            if metrics is not None:
                metrics.loaded.labels(name).set(0 if entry.given is None else 1)
            if entry.given is not None:  # its limits are checked now (--lanes)
                entry.service = self._service(name, *entry.given)
                entry.loaded_once = True

    # ---- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the batchers of the given translators and load the preloaded models in the
        background (requests for them wait; ``GET /ready`` answers 503 until they are in)."""
        self._changed = asyncio.Event()
        for entry in self._entries.values():
            if entry.given is not None and entry.service is not None:
                await entry.service.batcher.start()
        self._startup = asyncio.get_running_loop().create_task(self._load_at_start())

    async def _load_at_start(self) -> None:
        for name in self.preload:
            try:
                async with self.use(name):
                    pass
            except RequestError as e:
                if self._closing:  # stopped while loading: not a failure
                    return
                self.startup_error = e.message
                log.error("%s", e.message)
                if self.on_fatal is not None:
                    self.on_fatal(e.message)
                return

    async def close(self) -> None:
        """Stop loading, finish every loaded model's queue and stop its batcher."""
        self._closing = True
        if self._startup is not None and not self._startup.done():
            self._startup.cancel()
        for entry in self._entries.values():
            if entry.loading is not None and not entry.loading.done():
                entry.loading.cancel()
        services = [e.service for e in self._entries.values() if e.service is not None]
        for service in services:
            await service.batcher.close()

    @property
    def ready(self) -> bool:
        """Whether every model that loads at start has loaded (once) and none failed."""
        if self._closing or self.startup_error is not None:
            return False
        return all(self._entries[n].loaded_once for n in self.preload)

    # ---- what routes call ------------------------------------------------------------------

    @asynccontextmanager
    async def use(self, name: str) -> AsyncIterator[TranslationService]:
        """The service of model ``name``, loaded if it is not (waiting for its load or for a
        free place in the budget); it is not unloaded while the ``async with`` runs.

        Raises:
            RequestError: 503 when the model cannot be loaded (the reason said) or the server
                is stopping.
        """
        entry = self._entries[name]
        entry.users += 1
        try:
            service = await self._ensure(entry)
            self._touch(entry)
            yield service
        finally:
            entry.users -= 1
            self._touch(entry)
            self._notify()

    def names(self) -> list[str]:
        """Every model's name, in order."""
        return list(self._entries)

    def model(self, name: str) -> PlannedModel:
        return self._entries[name].model

    def loaded(self) -> dict[str, TranslationService]:
        """The services of the models in memory now, by name."""
        return {n: e.service for n, e in self._entries.items() if e.service is not None}

    def state(self, name: str) -> dict:
        """What ``GET /v1/models`` says of a model's place in memory."""
        entry = self._entries[name]
        return {
            "loaded": entry.service is not None,
            "loading": entry.loading is not None,
            "in_use": entry.users,
            "last_error": entry.error,
        }

    def queued(self) -> dict[str, float]:
        """Sentences queued per loaded model (for ``/metrics``)."""
        return {n: s.batcher.stats.queued_sentences for n, s in self.loaded().items()}

    # ---- loading and unloading -----------------------------------------------------------

    def _touch(self, entry: _Entry) -> None:
        self._clock += 1
        entry.last_used = self._clock

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _resident(self) -> int:
        """Models counted against the budget (a given translator is outside it)."""
        return sum(
            (e.service is not None or e.reserved) and e.given is None
            for e in self._entries.values()
        )

    async def _ensure(self, entry: _Entry) -> TranslationService:
        while entry.service is None:
            if self._closing or self._changed is None:
                raise RequestError(503, "the server is shutting down")
            if entry.loading is None:
                entry.loading = asyncio.get_running_loop().create_task(self._load(entry))
            try:
                await asyncio.shield(entry.loading)
            except asyncio.CancelledError:
                if self._closing:
                    raise RequestError(503, "the server is shutting down") from None
                raise
            except Exception as e:
                message = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
                raise RequestError(
                    503, f"model {entry.model.name} could not be loaded: {message}"
                ) from None
        return entry.service

    async def _load(self, entry: _Entry) -> None:
        name = entry.model.name
        try:
            evicted = await self._make_room(entry)
            for victim, service in evicted:
                await self._unload(victim, service)
            started = time.perf_counter()
            loop = asyncio.get_running_loop()
            if self._load_fn is None:
                raise UserError(f"model {name} was not loaded and this app has no loader")
            translator, info = await loop.run_in_executor(
                self._executor, self._load_fn, entry.model
            )
            await self._install(entry, translator, info, seconds=time.perf_counter() - started)
            entry.error = None
        except asyncio.CancelledError:
            raise
        except Exception as e:
            entry.error = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
            log.error("model %s could not be loaded: %s", name, entry.error)
            raise
        finally:
            entry.reserved = False
            entry.loading = None
            self._notify()

    async def _make_room(self, entry: _Entry) -> list[tuple[_Entry, TranslationService]]:
        """Reserve a place in the budget for ``entry``, taking it from the least recently
        used idle models; wait while every loaded model is in use."""
        evicted = []
        while self.max_loaded and self._resident() >= self.max_loaded:
            idle = [
                e
                for e in self._entries.values()
                if e.service is not None and e.users == 0 and e.given is None
            ]
            if idle:
                victim = min(idle, key=lambda e: e.last_used)
                evicted.append((victim, victim.service))
                victim.service = None  # no new request gets it; it is closed below
                continue
            assert self._changed is not None
            await self._changed.wait()
        entry.reserved = True
        return evicted  # type: ignore[return-value]

    def _service(self, name: str, translator, info: ModelInfo) -> TranslationService:
        metrics = self._metrics.for_model(name) if self._metrics is not None else None
        return TranslationService(
            translator, info, self.config, self._executor, metrics, gate=self._gate
        )

    async def _install(self, entry: _Entry, translator, info: ModelInfo, *, seconds: float) -> None:
        name = entry.model.name
        service = self._service(name, translator, info)
        await service.batcher.start()
        entry.service = service
        entry.loaded_once = True
        if self._metrics is not None:
            self._metrics.model_loaded(name, seconds)
        log.info("loaded model %s in %.1f s", name, seconds)

    async def _unload(self, entry: _Entry, service: TranslationService) -> None:
        name = entry.model.name
        await service.batcher.close()  # idle: nothing queued
        service.translator = None
        del service
        await asyncio.get_running_loop().run_in_executor(self._executor, gc.collect)
        if self._metrics is not None:
            self._metrics.model_unloaded(name)
        log.info("unloaded model %s (least recently used; --max-loaded %d)", name, self.max_loaded)

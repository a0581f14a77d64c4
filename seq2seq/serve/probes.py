"""Probes for load balancers and orchestrators: ``GET /health`` (liveness, with the queue's
counters) and ``GET /ready`` (readiness).

- ``/health`` answers 200 whenever the process serves HTTP, loading or not: a liveness probe
  must not restart a server that is still loading a large model. ``status`` is ``ok``, or
  ``stopping`` once a stop began.
- ``/ready`` answers 200 ``{"ready": true}`` only when the models that load at start are
  loaded (every model without ``--max-loaded``; the ``preload`` ones with it: the others load
  on their first request, which waits) and every readiness check passes; otherwise 503 with
  ``{"ready": false, "waiting_for": [...]}`` saying what is missing. A stopping server is not
  ready, so a balancer stops sending it requests while it drains.

A readiness check is ``async () -> str | None``: None when fine, else a one-line reason. The
app keeps them in ``app.state.readiness`` (a list); with ``--redis`` the app adds one that pings
Redis (``/ready`` is 503 while Redis does not answer).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from seq2seq.serve.model_pool import ModelPool

__all__ = ["ReadinessCheck", "probe_routes"]

ReadinessCheck = Callable[[], Awaitable["str | None"]]


def probe_routes(
    pool: ModelPool, readiness: list[ReadinessCheck], stopping: Callable[[], bool]
) -> APIRouter:
    """``/health`` and ``/ready``.

    Args:
        pool: the served models.
        readiness: the checks ``/ready`` runs (the list is read at each request: checks added
            after the app is built count).
        stopping: whether the server is shutting down.
    """
    api = APIRouter()

    @api.get("/health", summary="Liveness and queue state")
    async def health() -> dict:
        services = pool.loaded()
        stats = [s.batcher.stats for s in services.values()]
        first = pool.names()[0]
        planned = pool.model(first)
        running = not stopping() and all(s.batcher.running for s in services.values())
        return {
            "status": "ok" if running else "stopping",
            "pid": os.getpid(),  # which worker process answered (--workers)
            "model": services[first].info.id if first in services else first,
            "engine": planned.engine,
            "queued_sentences": sum(s.queued_sentences for s in stats),
            "in_flight_requests": sum(s.in_flight_requests for s in stats),
            "requests": sum(s.requests for s in stats),
            "batches": sum(s.batches for s in stats),
            "sentences": sum(s.sentences for s in stats),
            "largest_batch": max((s.largest_batch for s in stats), default=0),
            "failed_requests": sum(s.failed_requests for s in stats),
            "busy_seconds": round(sum(s.busy_seconds for s in stats), 3),
            "stream_steps": sum(s.stream_steps for s in stats),
            "stream_rows": sum(s.stream_rows for s in stats),
            "models_loaded": sorted(services),
        }

    @api.get("/ready", summary="Readiness: 200 once the models it must serve are loaded")
    async def ready() -> JSONResponse:
        waiting = []
        if stopping():
            waiting.append("the server is stopping")
        elif not pool.ready:
            if pool.startup_error is not None:
                waiting.append(pool.startup_error)
            missing = [n for n in pool.preload if n not in pool.loaded()]
            if missing:
                waiting.append(f"models loading: {', '.join(missing)}")
        for check in list(readiness):
            try:
                reason = await check()
            except Exception as e:  # a check that raises is a check that fails
                reason = f"{type(e).__name__}: {e}"
            if reason:
                waiting.append(reason)
        if waiting:
            return JSONResponse({"ready": False, "waiting_for": waiting}, status_code=503)
        return JSONResponse({"ready": True})

    return api

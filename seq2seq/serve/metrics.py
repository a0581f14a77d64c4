"""``GET /metrics``: the server's counters in Prometheus' text format (``prometheus-client``).

Each app has its own :class:`~prometheus_client.CollectorRegistry`, not the library's global
one, so several apps in one process (tests, benchmarks) never share or clash over a metric.

Metrics (all prefixed ``seq2seq_``):

- ``requests_total{route, status}``: requests by route template (``/translate``,
  ``/download_file/{token}``, ...; ``other`` for paths no route serves) and HTTP status;
- ``request_seconds{route}``: a latency histogram per route;
- ``queued_sentences{model}``: sentences waiting for each model's engine, read when scraped;
- ``batch_sentences{model}``: a histogram of the sentences per engine batch;
- ``translated_sentences_total{model}`` and ``translated_characters_total{model}``: source
  sentences and their characters translated (a pivoted request counts in both models);
- ``model_loaded{model}`` (1 or 0), ``model_loads_total{model}``,
  ``model_unloads_total{model}`` and ``model_load_seconds{model}``: the memory budget's work
  (:mod:`seq2seq.serve.model_pool`);
- ``repetition_retries_total{model}``: sentences searched again because their translation looped
  (seq2seq.decode.repetition);
- ``key_requests_total{key}``: requests let through per API key, the key as the first 16 hex
  digits of its sha256 (:func:`seq2seq.serve.logs.key_label`, as the log shows it: a scrape
  never shows a key).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from seq2seq.serve.logs import key_label

__all__ = ["CONTENT_TYPE", "MetricsMiddleware", "ModelMetrics", "ServerMetrics", "key_label"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format."""

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_LOAD_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    """The metrics of one app, in a registry of their own.

    Args:
        queued: returns, per model name, the sentences waiting for its engine now (read at
            each scrape).
    """

    def __init__(self, queued: Callable[[], dict[str, float]]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._queued_now = queued
        self.requests = Counter(
            "seq2seq_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "seq2seq_request_seconds",
            "HTTP request latency by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queued = Gauge(
            "seq2seq_queued_sentences", "Sentences waiting for the engine", ["model"], registry=r
        )
        self.batches = Histogram(
            "seq2seq_batch_sentences",
            "Sentences per engine batch",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.sentences = Counter(
            "seq2seq_translated_sentences", "Source sentences translated", ["model"], registry=r
        )
        self.characters = Counter(
            "seq2seq_translated_characters",
            "Characters of the source sentences translated",
            ["model"],
            registry=r,
        )
        self.loaded = Gauge(
            "seq2seq_model_loaded", "1 while a model is loaded", ["model"], registry=r
        )
        self.loads = Counter("seq2seq_model_loads", "Models loaded", ["model"], registry=r)
        self.unloads = Counter("seq2seq_model_unloads", "Models unloaded", ["model"], registry=r)
        self.load_seconds = Histogram(
            "seq2seq_model_load_seconds",
            "Seconds a model took to load and warm up",
            ["model"],
            buckets=_LOAD_BUCKETS,
            registry=r,
        )
        self.repetition_retries = Counter(
            "seq2seq_repetition_retries",
            "Sentences searched again with no_repeat_ngram because their translation looped",
            ["model"],
            registry=r,
        )
        self.key_requests = Counter(
            "seq2seq_key_requests", "Requests per API key (sha256 prefix)", ["key"], registry=r
        )
        self._key_labels: dict[str, str] = {}

    def for_model(self, name: str) -> ModelMetrics:
        """What a model's service counts into (its ``model`` label)."""
        return ModelMetrics(self, name)

    def model_loaded(self, name: str, seconds: float) -> None:
        """Count a load of ``name`` that took ``seconds``."""
        self.loads.labels(name).inc()
        self.load_seconds.labels(name).observe(seconds)
        self.loaded.labels(name).set(1)

    def model_unloaded(self, name: str) -> None:
        """Count an unload of ``name``."""
        self.unloads.labels(name).inc()
        self.loaded.labels(name).set(0)

    def key_request(self, key: str) -> None:
        """Count a request made with ``key``."""
        label = self._key_labels.get(key)
        if label is None:
            label = self._key_labels[key] = key_label(key)
        self.key_requests.labels(label).inc()

    def request(self, route: str, status: int, seconds: float) -> None:
        """Count one HTTP request to ``route`` (its template) answered ``status`` after
        ``seconds``."""
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        for name, n in self._queued_now().items():
            self.queued.labels(name).set(n)
        return generate_latest(self.registry)


class ModelMetrics:
    """One model's part of :class:`ServerMetrics` (its ``model`` label, resolved once)."""

    def __init__(self, metrics: ServerMetrics, name: str) -> None:
        self._batches = metrics.batches.labels(name)
        self._sentences = metrics.sentences.labels(name)
        self._characters = metrics.characters.labels(name)
        self.repetition_retries = metrics.repetition_retries.labels(name)

    def batch(self, n_sentences: int) -> None:
        """Count one engine batch of ``n_sentences``."""
        self._batches.observe(n_sentences)

    def translated(self, sentences: list[str]) -> None:
        """Count ``sentences`` (and their characters) as translated."""
        self._sentences.inc(len(sentences))
        self._characters.inc(sum(len(s) for s in sentences))


class MetricsMiddleware:
    """ASGI middleware that counts every HTTP request by route template and status, and
    times it (a plain ASGI wrapper: no per-request task or body copy).

    Args:
        app: the ASGI app it wraps.
        metrics: where to count.
    """

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes the app becomes a 500

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "other"
            self.metrics.request(name, status, time.perf_counter() - started)

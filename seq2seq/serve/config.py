"""``ServeConfig``: the limits and batching of ``seq2seq serve``, checked once when built."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.core import UserError

__all__ = ["ServeConfig"]


@dataclass(frozen=True)
class ServeConfig:
    """Limits and batching of ``seq2seq serve`` (the CLI's options mirror these fields).

    Attributes:
        max_chars: characters per request, all texts together.
        max_sentence_chars: characters per sentence (after splitting paragraphs).
        max_sentences: sentences per request (after splitting paragraphs).
        max_beam: the largest beam size and n-best a request may ask for.
        max_alternatives: the most LibreTranslate ``alternatives`` a request may ask for.
        max_wait_ms: how long the oldest queued sentence waits for others to join its
            batch while the engine is idle.
        max_batch_tokens: source tokens per batch (0: the model's ``decoding.max_tokens``
            times the engine's ``batches_per_call``).
        batching: False translates one request at a time (a baseline for benchmarks).
        lanes: static batches in flight at once (seq2seq.serve.batcher); 0: as many as the
            engine runs at once (``concurrent_calls``: CTranslate2's workers on CPU, 1 for
            the torch engine); more than the engine's are refused when the server starts.
        continuous: with the torch engine, beam-search sentences join a running search
            between its steps and leave it when done (seq2seq.decode.continuous); False (the
            default): static batches only. Sampling, greedy, constraints, the n-gram ban and
            alignments always run in static batches.
        api_keys: the SQLite key file (``seq2seq keys``); None: the server takes no keys
            (unless ``redis`` is set).
        redis: ``redis://HOST:PORT/DB``: API keys, rate-limit counts and translated files live
            in that Redis, shared by every worker and replica (seq2seq.serve.state_redis); it
            is then the key store (no ``api_keys``). None: the key file and this process's
            memory.
        require_api_key: refuse requests without a key (with ``api_keys`` or ``redis``).
        req_limit: requests per minute per key without its own limit, and per address for
            requests without a key; 0: no limit.
        slowdown_delay_s: seconds a request over its limit waits for its 429 (a client that
            retries at once on each of its connections then sends one request a connection
            per delay, not hundreds a second that take CPU from everyone else); 0: at once.
        max_queue: sentences queued for the engine beyond which a request is refused with 503
            and ``Retry-After`` (backpressure); 0: no bound.
        max_file_bytes: the largest file ``POST /translate_file`` takes.
        file_expiry_s: seconds a translated file stays downloadable.
        metrics: count requests, latencies, batches and translated text for ``GET /metrics``.
        max_loaded: at most this many models in memory, the least recently used unloaded
            (:mod:`seq2seq.serve.model_pool`); 0: every model loads at start and stays.
        pivot: the language a pair no model serves is translated through (two legs,
            :mod:`seq2seq.serve.routing`); None: no pivoting.
        read_timeout_s: seconds a request's head and body may take to arrive (from the
            connection or the request's first byte); a slower one is answered 408 or closed
            (:mod:`seq2seq.serve.http_protocol`).
        repetition_guard: search a sentence whose translation loops again with
            ``no_repeat_ngram`` (seq2seq.decode.repetition; not in continuous batching).

    Raises:
        UserError: a limit out of its range (named as the CLI option that sets it).
    """

    max_chars: int = 20_000
    max_sentence_chars: int = 2_000
    max_sentences: int = 500
    max_beam: int = 16
    max_alternatives: int = 8
    max_wait_ms: float = 5.0
    max_batch_tokens: int = 0
    batching: bool = True
    lanes: int = 0
    continuous: bool = False
    api_keys: str | None = None
    redis: str | None = None
    require_api_key: bool = False
    req_limit: int = 0
    slowdown_delay_s: float = 1.0
    max_queue: int = 4096
    max_file_bytes: int = 1_000_000
    file_expiry_s: float = 1800.0
    metrics: bool = True
    max_loaded: int = 0
    pivot: str | None = "en"
    read_timeout_s: float = 30.0
    repetition_guard: bool = True

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_sentence_chars", "max_sentences", "max_beam"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1")
        if self.max_alternatives < 0 or self.max_batch_tokens < 0:
            raise UserError("--max-alternatives and --max-batch-tokens must be >= 0")
        for name in ("req_limit", "max_queue", "lanes", "max_loaded"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must be >= 0")
        if self.max_file_bytes < 1 or self.file_expiry_s <= 0:
            raise UserError("--max-file-bytes and --file-expiry must be > 0")
        if self.api_keys and self.redis:
            raise UserError(
                "--api-keys and --redis exclude each other: with --redis the keys live in Redis "
                "(seq2seq keys add --redis URL)"
            )
        if self.require_api_key and not (self.api_keys or self.redis):
            raise UserError("--require-api-key needs --api-keys FILE or --redis URL")
        if not 0 <= self.slowdown_delay_s <= 60:
            raise UserError(
                f"--slowdown-delay must be between 0 and 60 seconds, got {self.slowdown_delay_s}"
            )
        if not 0 < self.read_timeout_s <= 3600:
            raise UserError(
                f"--read-timeout must be between 0 and 3600 seconds, got {self.read_timeout_s}"
            )
        if not 0 <= self.max_wait_ms <= 10_000:
            raise UserError(f"--max-wait-ms must be between 0 and 10000, got {self.max_wait_ms}")

    @property
    def max_body_bytes(self) -> int:
        """A request body limit that any text within ``max_chars`` fits (JSON escapes a
        character in at most 12 bytes), plus room for the other fields."""
        return 12 * self.max_chars + 65_536

"""The state in Redis (``seq2seq serve --redis redis://HOST:PORT/DB``): API keys, rate-limit
counts and translated files that every worker process and every replica shares
(:class:`~seq2seq.serve.state.State`), through redis-py.

Everything sits under the ``seq2seq:`` prefix of the database:

- ``seq2seq:api_keys``: a hash, key -> its requests per minute ('' for the server's
  ``--req-limit``); ``seq2seq:api_keys:order`` (a sorted set) keeps the order they were added
  in for ``seq2seq keys list``. Nothing caches a key: every request reads the hash, so a key
  added or removed takes effect on every replica at once.
- ``seq2seq:window:key:KEY`` and ``seq2seq:window:addr:ADDRESS``: each client's admissions of
  the last minute, a sorted set scored by Redis' own clock (microseconds), expiring a minute
  after its last admission. One Lua script (:data:`ADMIT_LUA`) looks the key up, trims the
  window and counts, atomically: the same moving window as
  :class:`~seq2seq.serve.access.MovingWindow` (a request is let through when fewer than N were
  let through in the 60 seconds before it), so N requests a minute are N across all replicas,
  whichever server each one reaches, and every replica reads one clock.
- ``seq2seq:file:TOKEN``: a translated file (a hash of name, media type and bytes) with a TTL of
  ``--file-expiry``; ``seq2seq:files`` (tokens by expiry), ``seq2seq:files:size`` and
  ``seq2seq:files:bytes`` bound the bytes held (64 x ``--max-file-bytes``, the oldest dropped
  first, as in memory), kept by one script (:data:`PUT_FILE_LUA`).

The admissions that arrive together (as the answers of a finished batch send its clients'
next requests) go to Redis as one pipeline of ``EVALSHA`` calls, each still atomic on its own:
one round trip and a sixth of redis-py's CPU per admission against one call each (32 at once:
docs/benchmarks.md), which runs on the event loop every request waits for.

Redis not answering (stopped, restarting, unreachable) makes the requests that need it a 503
with ``Retry-After`` (:func:`~seq2seq.serve.state.unavailable`) after at most
:data:`TIMEOUT_S`; redis-py reconnects at the next request, so the server recovers by itself
when Redis is back. The scripts are re-sent if a restarted Redis lost them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
import urllib.parse
from typing import TYPE_CHECKING

from seq2seq.core import UserError
from seq2seq.documents import format_for
from seq2seq.serve.files import StoredFile
from seq2seq.serve.keys import check_req_limit, new_key
from seq2seq.serve.logs import log
from seq2seq.serve.state import Admission, unavailable, who_counts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["PREFIX", "RedisKeyStore", "RedisState", "check_reachable", "shown_url"]

PREFIX = "seq2seq:"
"""The prefix of every Redis key the server writes."""

TIMEOUT_S = 2.0
"""The longest a request waits for Redis (to connect, or for an answer) before its 503."""

ADMIT_LUA = """
local limit = tonumber(ARGV[2])
if ARGV[1] ~= '' then
  local own = redis.call('HGET', KEYS[1], ARGV[1])
  if not own then return {0, 0, -1} end
  if own ~= '' then limit = tonumber(own) end
end
if limit <= 0 then return {1, 0, -1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[2])
if n >= limit then
  local oldest = redis.call('ZRANGE', KEYS[2], n - limit, n - limit, 'WITHSCORES')
  return {1, limit, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', KEYS[2], now, t[1] .. t[2] .. ARGV[4])
redis.call('PEXPIRE', KEYS[2], math.ceil(window / 1000))
return {1, limit, -1}
"""
"""KEYS: the keys hash, the client's window. ARGV: the API key ('' for none), the default
limit, the window (µs), a suffix that makes the admission's member unique (a random tag of the
process and a count). Returns
``{known, limit, wait µs or -1 when admitted}``; nothing is counted unless admitted."""

PUT_FILE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(token)
  local size = redis.call('HGET', KEYS[3], token)
  if size then
    redis.call('DECRBY', KEYS[4], size)
    redis.call('HDEL', KEYS[3], token)
  end
  redis.call('ZREM', KEYS[2], token)
  redis.call('DEL', ARGV[7] .. token)
end
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do drop(token) end
redis.call('HSET', KEYS[1], 'name', ARGV[2], 'media', ARGV[3], 'data', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.len(ARGV[4]))
local total = redis.call('INCRBY', KEYS[4], string.len(ARGV[4]))
while total > tonumber(ARGV[6]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then break end
  drop(oldest[1])
  total = tonumber(redis.call('GET', KEYS[4]) or '0')
end
return total
"""
"""KEYS: the file, the tokens by expiry, their sizes, the bytes held. ARGV: token, name, media
type, bytes, expiry (ms), the most bytes held, the files' key prefix."""

ADMIT_SHA = hashlib.sha1(ADMIT_LUA.encode()).hexdigest()
"""What ``EVALSHA`` calls :data:`ADMIT_LUA` (loaded again whenever Redis has lost it)."""

ADD_KEY_LUA = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
return 1
"""

_KEYS = PREFIX + "api_keys"
_ORDER = PREFIX + "api_keys:order"
_SEQ = PREFIX + "api_keys:seq"
_FILE = PREFIX + "file:"
_FILES = PREFIX + "files"
_SIZES = PREFIX + "files:size"
_BYTES = PREFIX + "files:bytes"


def shown_url(url: str) -> str:
    """``url`` without its password (for logs and errors)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else "***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + netloc))


def _options(url: str) -> dict:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise UserError(
            f"--redis {shown_url(url)}: not a Redis URL (redis://HOST:PORT/DB, rediss://... "
            "or unix:///PATH)"
        )
    try:
        import redis  # noqa: F401
    except ImportError:
        raise UserError("--redis needs redis-py: pip install 'seq2seq[serve]'") from None
    return {"socket_timeout": TIMEOUT_S, "socket_connect_timeout": TIMEOUT_S}


def _sync_client(url: str):
    options = _options(url)
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    try:
        return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 1), **options)
    except ValueError as e:
        raise UserError(f"--redis {shown_url(url)}: {e}") from None


def check_reachable(url: str) -> None:
    """Ping the Redis at ``url`` once (before a server opens its port, or a key command runs).

    Raises:
        UserError: a malformed URL, or no Redis answers there (one line).
    """
    client = _sync_client(url)
    import redis

    try:
        client.ping()
    except redis.RedisError as e:
        raise UserError(f"--redis {shown_url(url)}: Redis does not answer ({e})") from None
    finally:
        client.close()


class RedisState:
    """Keys, counts and files in the Redis at ``url``, shared by every server that uses it.

    Args:
        url: ``redis://[:PASSWORD@]HOST:PORT/DB`` (``rediss://`` for TLS, ``unix:///PATH``).
        file_expiry_s: seconds a translated file stays downloadable.
        max_file_bytes: the most bytes of translated files held at once.
        window_s: the rate-limit window (60: "N per 1 minute"; tests shorten it).

    Raises:
        UserError: a malformed URL (reachability is :func:`check_reachable`'s).
    """

    keys_enabled = True

    def __init__(
        self, url: str, *, file_expiry_s: float, max_file_bytes: int, window_s: float = 60.0
    ) -> None:
        self.url = url
        self.window_us = round(window_s * 1e6)
        self.description = f"Redis at {shown_url(url)}"
        self.file_expiry_ms = max(1, round(1000 * file_expiry_s))
        self.max_file_bytes = max_file_bytes
        self._options = _options(url)
        self._client = None
        self._down = False
        self._pending: list[tuple[list, list, asyncio.Future]] = []
        self._tag, self._count = secrets.token_hex(6) + ":", 0
        self._flushes: set[asyncio.Task] = set()

    async def start(self) -> None:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # One retry: a pooled connection that a restarted Redis closed is reopened at once.
        self._client = aredis.Redis.from_url(self.url, retry=Retry(NoBackoff(), 1), **self._options)
        self._put = self._client.register_script(PUT_FILE_LUA)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @contextlib.asynccontextmanager
    async def _answering(self) -> AsyncIterator[None]:
        """Redis' failures as the 503 of :func:`~seq2seq.serve.state.unavailable`, logged once
        per outage."""
        import redis

        try:
            yield
        except redis.RedisError as e:
            if not self._down:
                log.warning("%s does not answer (%s): 503 until it does", self.description, e)
            self._down = True
            raise unavailable(self.description) from None
        if self._down:
            self._down = False
            log.info("%s answers again", self.description)

    async def admit(self, key: str | None, address: str, req_limit: int) -> Admission:
        self._count += 1  # with the process' random tag, makes each admission's member unique
        async with self._answering():
            known, limit, wait_us = await self._admit_together(
                [_KEYS, PREFIX + "window:" + who_counts(key, address)],
                [key or "", req_limit, self.window_us, f"{self._tag}{self._count}"],
            )
        if not known:
            return Admission(known=False)
        return Admission(True, int(limit), None if wait_us < 0 else wait_us / 1e6)

    async def _admit_together(self, keys: list, args: list) -> list:
        """:data:`ADMIT_LUA` on ``keys`` and ``args``, sent in one pipeline with the other
        admissions of this turn of the event loop."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._pending.append((keys, args, done))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await done

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.ensure_future(self._send(batch))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _send(self, batch: list) -> None:
        """One pipeline of ``EVALSHA``; the calls a restarted Redis lacks the script for are
        sent again after ``SCRIPT LOAD`` (none of them ran)."""
        import redis

        todo = list(range(len(batch)))
        results: list = [None] * len(batch)
        try:
            for attempt in (0, 1):
                async with self._client.pipeline(transaction=False) as pipe:
                    for i in todo:
                        keys, args, _ = batch[i]
                        pipe.evalsha(ADMIT_SHA, len(keys), *keys, *args)
                    answers = await pipe.execute(raise_on_error=False)
                for i, answer in zip(todo, answers):
                    results[i] = answer
                todo = [i for i in todo if isinstance(results[i], redis.exceptions.NoScriptError)]
                if not todo or attempt:
                    break
                await self._client.script_load(ADMIT_LUA)
        except Exception as e:  # Redis down: every admission of the batch fails alike
            results = [e] * len(batch)
        except BaseException:  # cancelled (the loop is closing): no request waits forever
            for _, _, done in batch:
                if not done.done():
                    done.cancel()
            raise
        for (_, _, done), result in zip(batch, results):
            if done.done():  # the request went away
                continue
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)

    async def put_file(self, name: str, data: bytes | str) -> str:
        token = secrets.token_urlsafe(32)
        if isinstance(data, str):
            data = data.encode("utf-8")
        media = format_for(name)[1]
        async with self._answering():
            await self._put(
                keys=[_FILE + token, _FILES, _SIZES, _BYTES],
                args=[token, name, media, data, self.file_expiry_ms,
                      self.max_file_bytes, _FILE],
            )  # fmt: skip
        return token

    async def get_file(self, token: str) -> StoredFile | None:
        async with self._answering():
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hmget(_FILE + token, "name", "media", "data")
                pipe.pttl(_FILE + token)
                (name, media, data), ttl_ms = await pipe.execute()
        if name is None or data is None or ttl_ms < 0:
            return None
        return StoredFile(name.decode(), media.decode(), data, time.monotonic() + ttl_ms / 1000)

    async def ping(self) -> bool:
        import redis

        try:
            return bool(await self._client.ping())
        except redis.RedisError:
            return False


class RedisKeyStore:
    """The keys in Redis, opened for changes (``seq2seq keys --redis URL``): the interface of
    :class:`~seq2seq.serve.keys.KeyStore`.

    Raises:
        UserError: a malformed URL, or no Redis answers there.
    """

    def __init__(self, url: str) -> None:
        check_reachable(url)
        self.where = shown_url(url)
        self._client = _sync_client(url)

    def close(self) -> None:
        self._client.close()

    def add(self, req_limit: int | None = None) -> str:
        """A new key (:func:`~seq2seq.serve.keys.new_key`) with ``req_limit`` per minute (None:
        the server's ``--req-limit``).

        Raises:
            UserError: ``req_limit`` below 1.
        """
        check_req_limit(req_limit)
        while True:
            key = new_key()
            args = [key, "" if req_limit is None else str(req_limit)]
            if self._client.eval(ADD_KEY_LUA, 3, _KEYS, _ORDER, _SEQ, *args):
                return key

    def remove(self, key: str) -> None:
        """Remove ``key``.

        Raises:
            UserError: no such key.
        """
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hdel(_KEYS, key)
            pipe.zrem(_ORDER, key)
            gone, _ = pipe.execute()
        if not gone:
            raise UserError(f"no such API key in Redis at {self.where}: {key}")

    def list(self) -> list[tuple[str, int | None]]:
        """Every ``(key, req_limit)``, in the order they were added."""
        with self._client.pipeline(transaction=True) as pipe:
            pipe.zrange(_ORDER, 0, -1)
            pipe.hgetall(_KEYS)
            order, limits = pipe.execute()
        out = []
        for raw in order:
            limit = limits.get(raw)
            if limit is not None:
                out.append((raw.decode(), int(limit) if limit else None))
        return out

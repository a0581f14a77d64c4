"""``seq2seq serve --redis``: keys, rate limits and translated files shared through a real
``redis-server`` (Debian's package; .ci/run installs it), and ``--workers N``.

The first part runs in this process: the Redis backend against the in-memory one, several
backends (as several replicas) against one Redis, and an app whose Redis is stopped and started
again. The second part (slow) runs real servers: two replicas, one of them with two worker
processes, sharing one Redis; Redis restarted under load; SIGTERM drains every worker. Every
test skips, saying why, where redis-server is not installed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir, run_app
from redis_server import RedisServer, free_port, redis_server_binary
from test_serve_process import ServerProcess

from seq2seq.core import UserError
from seq2seq.decode.translator import Translator
from seq2seq.serve.app import create_app
from seq2seq.serve.bodies import RequestError
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.served_model import model_info
from seq2seq.serve.state_redis import RedisKeyStore, RedisState, check_reachable, shown_url

GOOD = {"source": "en", "target": "de"}
SENTENCES = ["A man runs in the park.", "Two dogs play with a red ball.", "The old car is black."]

BINARY = redis_server_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="redis-server is not installed (apt-get install redis-server)"
)


@pytest.fixture(scope="module")
def redis():
    server = RedisServer(BINARY)
    yield server
    server.stop()


@pytest.fixture
def flushed(redis):
    """The module's Redis, emptied (and running) before the test."""
    if redis.proc is None:
        redis.start()
    import redis as redis_py

    client = redis_py.Redis.from_url(redis.url)
    client.flushdb()
    client.close()
    return redis


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("redis") / "model", train_steps=150)


def keys_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "keys", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def backend(url: str, **kw) -> RedisState:
    return RedisState(url, file_expiry_s=kw.pop("file_expiry_s", 60),
                      max_file_bytes=kw.pop("max_file_bytes", 10**6), **kw)  # fmt: skip


async def started(*states: RedisState) -> None:
    for s in states:
        await s.start()


# ---- the backend, in this process ---------------------------------------------------------------


def test_the_redis_window_counts_like_the_memory_window(flushed):
    """N per window, nothing counted when refused, the wait until the oldest admission leaves
    the window, and the window moving on (shortened to 1 s here)."""
    store = RedisKeyStore(flushed.url)
    own, default = store.add(3), store.add()
    store.close()

    async def main():
        state = backend(flushed.url, window_s=1.0)
        await state.start()
        try:
            got = [await state.admit(own, "1.2.3.4", 100) for _ in range(5)]
            unknown = await state.admit("no-such-key", "1.2.3.4", 100)
            by_default = [await state.admit(default, "1.2.3.4", 2) for _ in range(3)]
            by_address = [await state.admit(None, "5.6.7.8", 2) for _ in range(3)]
            other_address = await state.admit(None, "9.9.9.9", 2)
            unlimited = await state.admit(own, "1.2.3.4", 0)  # the key's own limit still holds
            await asyncio.sleep(1.05)
            later = await state.admit(own, "1.2.3.4", 100)
            return got, unknown, by_default, by_address, other_address, unlimited, later
        finally:
            await state.close()

    got, unknown, by_default, by_address, other_address, unlimited, later = asyncio.run(main())
    assert [a.wait is None for a in got] == [True, True, True, False, False]
    assert all(a.known and a.limit == 3 for a in got)
    assert 0 < got[3].wait <= 1.0 and got[4].wait <= got[3].wait
    assert not unknown.known
    assert [a.wait is None for a in by_default] == [True, True, False] and by_default[0].limit == 2
    assert [a.wait is None for a in by_address] == [True, True, False]
    assert other_address.wait is None
    assert unlimited.wait is not None and unlimited.limit == 3
    assert later.wait is None


def test_replicas_admit_exactly_the_limit_together(flushed):
    """Two backends (two replicas' clients) send 60 concurrent admissions of one key limited to
    7: exactly 7 get through, whichever replica each reached."""
    store = RedisKeyStore(flushed.url)
    key = store.add(7)
    store.close()

    async def main():
        a, b = backend(flushed.url), backend(flushed.url)
        await started(a, b)
        try:
            calls = [(a if i % 2 else b).admit(key, "1.2.3.4", 0) for i in range(60)]
            return await asyncio.gather(*calls)
        finally:
            await a.close()
            await b.close()

    answers = asyncio.run(main())
    assert sum(a.wait is None for a in answers) == 7
    assert all(a.known and a.limit == 7 for a in answers)


def test_keys_from_the_command_line_take_effect_at_once(flushed):
    added = keys_cli("add", "--redis", flushed.url, "--req-limit", "5")
    assert added.returncode == 0, added.stderr
    key = added.stdout.splitlines()[-1]
    second = keys_cli("add", "--redis", flushed.url).stdout.splitlines()[-1]
    listed = keys_cli("list", "--redis", flushed.url).stdout.splitlines()
    assert listed == [f"{key}\t5", f"{second}\tserver --req-limit"]

    async def lookup(k):
        state = backend(flushed.url)
        await state.start()
        try:
            return await state.admit(k, "1.2.3.4", 0)
        finally:
            await state.close()

    assert asyncio.run(lookup(key)).known
    assert keys_cli("remove", key, "--redis", flushed.url).returncode == 0
    assert not asyncio.run(lookup(key)).known  # no cache: gone for every replica at once
    again = keys_cli("remove", key, "--redis", flushed.url)
    assert (
        again.returncode == 2
        and again.stderr.count("\n") == 1
        and "no such API key" in again.stderr
    )
    both = keys_cli("list", "--redis", flushed.url, "--db", "keys.db")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_files_are_shared_expire_and_stay_bounded(flushed):
    async def main():
        a = backend(flushed.url, file_expiry_s=0.5, max_file_bytes=10)
        b = backend(flushed.url, file_expiry_s=0.5, max_file_bytes=10)
        await started(a, b)
        try:
            t1 = await a.put_file("a.de.txt", "äaa")  # 4 bytes
            got = await b.get_file(t1)
            t2 = await b.put_file("b.de.html", "bbbb")
            t3 = await a.put_file("c.de.txt", "cccc")  # 12 bytes held: the oldest goes
            after_bound = [await b.get_file(t) for t in (t1, t2, t3)]
            await asyncio.sleep(0.6)
            expired = [await a.get_file(t) for t in (t2, t3)]
            unknown = await a.get_file("A" * 43)
            return got, after_bound, expired, unknown
        finally:
            await a.close()
            await b.close()

    got, after_bound, expired, unknown = asyncio.run(main())
    assert (got.name, got.media_type, got.data) == (
        "a.de.txt",
        "text/plain; charset=utf-8",
        "äaa".encode(),
    )
    assert after_bound[0] is None
    assert (
        after_bound[1].media_type == "text/html; charset=utf-8" and after_bound[2].data == b"cccc"
    )
    assert expired == [None, None] and unknown is None


def test_unreachable_or_malformed_urls_are_one_line_errors(redis):
    with pytest.raises(UserError, match="Redis does not answer"):
        check_reachable("redis://127.0.0.1:1/0")
    with pytest.raises(UserError, match="not a Redis URL"):
        check_reachable("http://127.0.0.1:6379")
    assert shown_url("redis://:secret@host:6379/0") == "redis://***@host:6379/0"
    assert "secret" not in shown_url("redis://user:secret@host:6379/0")
    ServeConfig(redis=redis.url, require_api_key=True)  # Redis is the key store


# ---- an app whose Redis goes away and comes back ----------------------------------------------


def test_an_app_answers_503_while_redis_is_down_and_recovers(flushed, model_dir):
    translator = Translator.load(model_dir)
    info = model_info(translator, model_dir, "torch")
    config = ServeConfig(redis=flushed.url, slowdown_delay_s=0)

    async def body(client):
        store = RedisKeyStore(flushed.url)
        key = store.add(100)
        store.close()
        ok = await client.post("/translate", json={"q": SENTENCES[0], "api_key": key, **GOOD})
        ready = await client.get("/ready")
        flushed.stop()
        not_ready = await client.get("/ready")
        down = await client.post("/translate", json={"q": SENTENCES[0], "api_key": key, **GOOD})
        download = await client.get("/download_file/" + "A" * 43 + "/x.de.txt")
        keyless = await client.post("/translate", json={"q": SENTENCES[0], **GOOD})  # no state
        languages = await client.get("/languages")
        flushed.start()
        store = RedisKeyStore(flushed.url)
        key = store.add(100)  # nothing was saved: the key is added again
        store.close()
        back = await client.post("/translate", json={"q": SENTENCES[0], "api_key": key, **GOOD})
        ready_again = await client.get("/ready")
        return ok, down, download, keyless, languages, back, (ready, not_ready, ready_again)

    ok, down, download, keyless, languages, back, probes = run_app(
        create_app(translator, info=info, config=config), body
    )
    assert [p.status_code for p in probes] == [200, 503, 200]
    assert probes[1].json() == {
        "ready": False,
        "waiting_for": [f"Redis at {flushed.url} does not answer"],
    }
    assert ok.status_code == 200 and back.status_code == 200
    assert back.json() == ok.json()
    for r in (down, download):
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert r.json() == {
            "error": f"the server's shared state (Redis at {flushed.url}) is not answering; "
            "try again shortly"
        }
    assert keyless.status_code == 200 and languages.status_code == 200


def test_a_file_translated_by_one_app_downloads_from_another(flushed, model_dir):
    translator = Translator.load(model_dir)
    info = model_info(translator, model_dir, "torch")
    config = ServeConfig(redis=flushed.url)
    one = create_app(translator, info=info, config=config)
    other = create_app(translator, info=info, config=config)
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"

    async def make(client):
        r = await client.post("/translate_file", data=GOOD, files={"file": ("n.txt", text)})
        url = r.json()["translatedFileUrl"]
        return url, (await client.get(url)).content

    url, here = run_app(one, make)

    async def fetch(client):
        return await client.get(url), await client.get(url.replace("n.de.txt", "m.de.txt"))

    there, renamed = run_app(other, fetch)
    assert there.status_code == 200 and there.content == here
    assert there.headers["content-disposition"] == 'attachment; filename="n.de.txt"'
    assert renamed.status_code == 404


def test_an_app_with_redis_says_so(flushed, model_dir):
    translator = Translator.load(model_dir)
    info = model_info(translator, model_dir, "torch")
    app = create_app(translator, info=info, config=ServeConfig(redis=flushed.url))

    async def body(client):
        return (await client.get("/v1/models")).json(), (await client.get("/frontend/settings"))

    models, settings = run_app(app, body)
    (entry,) = models["models"]
    assert entry["api_keys"] == {"enabled": True, "required": False}
    assert entry["state"] == "redis"
    assert settings.json()["apiKeys"] is True


def test_request_error_is_what_the_backend_raises(flushed):
    """A backend whose Redis is gone raises the one RequestError 503 (with Retry-After)."""

    async def main():
        state = backend("redis://127.0.0.1:1/0")
        await state.start()
        try:
            with pytest.raises(RequestError) as e:
                await state.admit("k", "a", 1)
            return e.value, await state.ping()
        finally:
            await state.close()

    err, ping = asyncio.run(main())
    assert (err.status, err.retry_after) == (503, 2) and ping is False


# ---- real servers: two replicas, one with two workers, sharing one Redis (slow) ----------------


@pytest.fixture(scope="module")
def replicas(redis, model_dir):
    """Replica A: two worker processes, whose requests wait up to 3 s in the queue for company
    (so that the last test finds them in flight when it stops A); replica B: one process. Both
    take keys from the module's Redis and count keyless requests per address (a limit never
    reached in these tests)."""
    if redis.proc is None:
        redis.start()
    common = ["--redis", redis.url, "--req-limit", "100000", "--slowdown-delay", "0",
              "--file-expiry", "30"]  # fmt: skip
    a = ServerProcess(model_dir, *common, "--workers", "2", "--max-wait-ms", "3000")
    try:
        b = ServerProcess(model_dir, *common)
    except BaseException:
        a.stop()
        raise
    yield a, b
    for srv in (a, b):
        assert srv.stop() == 0, "".join(srv.lines)


def _post(url: str, **fields) -> httpx.Response:
    # a new connection each time, so that the kernel may hand it to either worker
    with httpx.Client(timeout=60, headers={"Connection": "close"}) as client:
        return client.post(f"{url}/translate", json={"q": SENTENCES[0], **GOOD, **fields})


def _worker_pids(url: str, tries: int = 40) -> set[int]:
    pids = set()
    for _ in range(tries):
        with httpx.Client(timeout=30, headers={"Connection": "close"}) as client:
            pids.add(client.get(f"{url}/health").json()["pid"])
        if len(pids) == 2:
            break
    return pids


def _concurrently(fn, n: int) -> list:
    out: list = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = fn(i)
        except BaseException as e:  # reported by the caller's asserts
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


@pytest.mark.slow
def test_a_key_gets_exactly_its_limit_across_workers_and_replicas(replicas, redis):
    a, b = replicas
    assert len(_worker_pids(a.url)) == 2, "replica A does not run two workers"
    added = keys_cli("add", "--redis", redis.url, "--req-limit", "6")
    key = added.stdout.splitlines()[-1]
    # 20 at once to replica A (its two workers), then 20 spread over A and B: the limit is
    # one count in Redis, so 6 in all get through, the rest 429
    first = _concurrently(lambda i: _post(a.url, api_key=key), 20)
    assert sorted(r.status_code for r in first) == [200] * 6 + [429] * 14, first
    other = keys_cli("add", "--redis", redis.url, "--req-limit", "6").stdout.splitlines()[-1]
    spread = _concurrently(lambda i: _post((a, b)[i % 2].url, api_key=other), 20)
    assert sorted(r.status_code for r in spread) == [200] * 6 + [429] * 14, spread
    assert {r.json()["error"] for r in spread if r.status_code == 429} == {
        "Slowdown: 6 per 1 minute"
    }
    # removed: refused by every replica at once (no cache)
    assert keys_cli("remove", other, "--redis", redis.url).returncode == 0
    assert {_post(srv.url, api_key=other).status_code for srv in (a, b, a)} == {403}


@pytest.mark.slow
def test_a_file_translated_on_one_replica_downloads_from_the_other(replicas):
    a, b = replicas
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"
    made = httpx.post(f"{a.url}/translate_file", data=GOOD, files={"file": ("n.txt", text)},
                      timeout=60)  # fmt: skip
    url = made.json()["translatedFileUrl"]
    here = httpx.get(url, timeout=30)
    there = httpx.get(url.replace(a.url, b.url), timeout=30)
    assert here.status_code == there.status_code == 200 and there.content == here.content


@pytest.mark.slow
def test_redis_restarted_under_load_gives_503s_and_nothing_worse(replicas, redis):
    """Keyless requests (counted per address in Redis) to both replicas while Redis stops and
    starts again: every answer is 200 or the documented 503, and 200s come back by
    themselves."""
    a, b = replicas
    answers: list[tuple[float, int, dict, str | None]] = []
    stop = threading.Event()

    def client(i: int) -> None:
        url = (a, b)[i % 2].url
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                r = c.post(f"{url}/translate", json={"q": SENTENCES[i % 3], **GOOD})
                answers.append((time.monotonic(), r.status_code, r.json(),
                                r.headers.get("retry-after")))  # fmt: skip
                time.sleep(0.02)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        redis.stop()
        stopped = time.monotonic()
        time.sleep(1.5)
        redis.start()
        started_again = time.monotonic()
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    statuses = {s for _, s, _, _ in answers}
    assert statuses <= {200, 503}, statuses
    down = [(body, ra) for t, s, body, ra in answers if s == 503]
    assert down and all(ra == "2" and "not answering" in body["error"] for body, ra in down)
    assert any(s == 200 for t, s, _, _ in answers if t < stopped)
    assert any(s == 200 for t, s, _, _ in answers if t > started_again + 0.5)
    assert not any(s == 503 for t, s, _, _ in answers if t > started_again + 0.5)


@pytest.mark.slow
def test_sigterm_drains_every_worker(replicas):
    """Requests wait up to 3 s in each of A's workers for company, so they are in flight when
    SIGTERM reaches A's supervisor: every one is answered, every worker exits, exit 0. (The
    last test of A.)"""
    srv, _b = replicas
    pids = _worker_pids(srv.url)
    answers = []
    threads = [
        threading.Thread(target=lambda i=i: answers.append(_post(srv.url, q=SENTENCES[i % 3])))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    in_flight: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while sum(in_flight.values()) < 6:
        assert time.monotonic() < deadline, "the requests never reached the workers"
        with httpx.Client(timeout=30, headers={"Connection": "close"}) as client:
            health = client.get(f"{srv.url}/health").json()
        in_flight[health["pid"]] = health["in_flight_requests"]
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=60)
    assert srv.proc.wait(timeout=60) == 0, "".join(srv.lines)
    assert [r.status_code for r in answers] == [200] * 6
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_an_unreachable_redis_is_one_line_before_the_port_opens(model_dir):
    port = free_port()
    r = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "serve", str(model_dir), "--port", str(port),
         "--redis", "redis://127.0.0.1:1/0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--redis redis://127.0.0.1:1/0: Redis does not answer" in r.stderr
    assert "serving" not in r.stdout + r.stderr and "Started server" not in r.stdout + r.stderr


def test_workers_need_redis_and_redis_is_the_key_store(model_dir, redis, tmp_path):
    from seq2seq.serve import serve

    with pytest.raises(UserError, match="--workers above 1 needs --redis"):
        serve(model_dir, port=0, workers=2)
    with pytest.raises(UserError, match="--workers must be >= 1"):
        serve(model_dir, port=0, workers=0, config=ServeConfig(redis=redis.url))
    with pytest.raises(UserError, match="--api-keys and --redis exclude each other"):
        ServeConfig(api_keys=str(tmp_path / "k.db"), redis=redis.url)

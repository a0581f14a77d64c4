"""seq2seq.serve.batcher: every result goes back to its own request, in order, whatever the batching.

The batcher is driven here with a scripted translate function (it records each batch and
returns a transformation of each sentence that names the sentence), so every check is exact
and fast; tests/test_serve.py runs it under the real app and model.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from seq2seq.serve.batcher import Batcher, BatcherClosed, EngineFailure


class Script:
    """A fake engine: ``translate(sentences, options)`` -> ``"<options>:<sentence reversed>"``."""

    def __init__(self, *, delay: float = 0.0, poison: str | None = None) -> None:
        self.batches: list[tuple[list[str], object]] = []
        self.threads: set[str] = set()
        self.delay = delay
        self.poison = poison

    def __call__(self, sentences: list[str], options: object) -> list[str]:
        self.threads.add(threading.current_thread().name)
        self.batches.append((list(sentences), options))
        if self.delay:
            time.sleep(self.delay)
        if self.poison is not None and self.poison in sentences:
            raise RuntimeError(f"poisoned by {self.poison}")
        return [f"{options}:{s[::-1]}" for s in sentences]


def words(sentences: list[str]) -> list[int]:
    return [len(s.split()) for s in sentences]


def expected(sentences: list[str], options: object) -> list[str]:
    return [f"{options}:{s[::-1]}" for s in sentences]


def run(coro):
    return asyncio.run(coro)


def make(script: Script, **kwargs) -> Batcher:
    kwargs.setdefault("max_tokens", 1000)
    kwargs.setdefault("max_wait", 0.02)
    return Batcher(script, count_tokens=words, **kwargs)


def test_concurrent_requests_get_their_own_results_in_order():
    script = Script()
    batcher = make(script, max_wait=0.05)
    rng = random.Random(0)
    requests = [
        [f"r{r} s{i} " + "w " * rng.randint(0, 5) for i in range(rng.randint(1, 6))]
        for r in range(60)
    ]

    async def main():
        await batcher.start()
        out = await asyncio.gather(*(batcher.translate(req, "beam5") for req in requests))
        await batcher.close()
        return out

    results = run(main())
    for req, got in zip(requests, results):
        assert got == expected(req, "beam5")
    # They were translated together: far fewer batches than requests, each sentence once.
    assert len(script.batches) < len(requests) / 4
    flat = [s for batch, _ in script.batches for s in batch]
    assert sorted(flat) == sorted(s for req in requests for s in req)
    assert batcher.stats.largest_batch > 10


def test_token_budget_splits_a_long_request_across_batches():
    script = Script()
    batcher = make(script, max_tokens=10)
    long = [f"s{i} x" for i in range(23)]  # 2 tokens each: 5 per batch

    async def main():
        await batcher.start()
        out = await batcher.translate(long, "o")
        await batcher.close()
        return out

    assert run(main()) == expected(long, "o")
    assert [len(b) for b, _ in script.batches] == [5, 5, 5, 5, 3]
    assert [s for b, _ in script.batches for s in b] == long  # first come, first served


def test_a_sentence_over_the_budget_is_a_batch_of_its_own():
    script = Script()
    batcher = make(script, max_tokens=3)
    req = ["a", "b c d e f", "g"]

    async def main():
        await batcher.start()
        out = await batcher.translate(req, "o")
        await batcher.close()
        return out

    assert run(main()) == expected(req, "o")
    assert [b for b, _ in script.batches] == [["a"], ["b c d e f"], ["g"]]


def test_requests_with_other_options_never_share_a_batch():
    script = Script()
    batcher = make(script, max_wait=0.05)
    requests = [([f"q{i} a", f"q{i} b"], "greedy" if i % 3 else "beam10") for i in range(30)]

    async def main():
        await batcher.start()
        out = await asyncio.gather(*(batcher.translate(r, o) for r, o in requests))
        await batcher.close()
        return out

    for (req, opts), got in zip(requests, run(main())):
        assert got == expected(req, opts)
    for batch, opts in script.batches:
        owners = {int(s.split()[0][1:]) for s in batch}
        assert all((i % 3 != 0) == (opts == "greedy") for i in owners)


def test_without_batching_each_batch_is_one_request():
    script = Script()
    batcher = make(script, batching=False)
    requests = [[f"r{r} s{i}" for i in range(3)] for r in range(12)]

    async def main():
        await batcher.start()
        out = await asyncio.gather(*(batcher.translate(req, "o") for req in requests))
        await batcher.close()
        return out

    for req, got in zip(requests, run(main())):
        assert got == expected(req, "o")
    assert len(script.batches) == len(requests)
    for batch, _ in script.batches:
        assert len({s.split()[0] for s in batch}) == 1


def test_an_engine_exception_fails_only_the_request_that_caused_it():
    script = Script(poison="BOOM")
    batcher = make(script, max_wait=0.05)
    good = [[f"g{i}"] for i in range(8)]

    async def main():
        await batcher.start()
        tasks = [batcher.translate(g, "o") for g in good[:4]]
        tasks.append(batcher.translate(["fine", "BOOM", "fine too"], "o"))
        tasks += [batcher.translate(g, "o") for g in good[4:]]
        out = await asyncio.gather(*tasks, return_exceptions=True)
        after = await batcher.translate(["after"], "o")  # the batcher goes on
        await batcher.close()
        return out, after

    out, after = run(main())
    assert isinstance(out[4], EngineFailure)
    assert "RuntimeError: poisoned by BOOM" in str(out[4])
    for req, got in zip(good, out[:4] + out[5:]):
        assert got == expected(req, "o")
    assert after == expected(["after"], "o")
    assert batcher.stats.failed_requests == 1


def test_the_event_loop_keeps_running_while_the_engine_works():
    # The engine blocks until the event loop releases it: were the engine on the loop's
    # thread, nothing could release it (the wait would time out and the test fail).
    busy, release = threading.Event(), threading.Event()
    threads = set()

    def translate(sentences, options):
        threads.add(threading.current_thread().name)
        busy.set()
        if not release.wait(timeout=60):
            raise AssertionError("the event loop never ran while the engine worked")
        return expected(sentences, options)

    batcher = Batcher(translate, count_tokens=words, max_tokens=100, max_wait=0.0)

    async def main():
        await batcher.start()
        first = asyncio.create_task(batcher.translate(["slow one"], "o"))
        while not busy.is_set():
            await asyncio.sleep(0.005)
        # The engine is working: the loop still takes and queues another request.
        second = asyncio.create_task(batcher.translate(["next one"], "o"))
        while batcher.stats.queued_sentences < 1:
            await asyncio.sleep(0.005)
        assert not first.done()
        release.set()
        out = await asyncio.gather(first, second)
        await batcher.close()
        return out

    assert run(main()) == [expected(["slow one"], "o"), expected(["next one"], "o")]
    assert threads and threading.main_thread().name not in threads


def test_the_oldest_sentence_waits_for_company_at_most_max_wait():
    script = Script()
    batcher = make(script, max_wait=1.0)

    async def main():
        await batcher.start()
        first = asyncio.create_task(batcher.translate(["first"], "o"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(batcher.translate(["second"], "o"))
        start = time.perf_counter()
        out = await asyncio.gather(first, second)
        waited = time.perf_counter() - start
        await batcher.close()
        return out, waited

    out, waited = run(main())
    assert out == [expected(["first"], "o"), expected(["second"], "o")]
    assert [b for b, _ in script.batches] == [["first", "second"]]  # joined within the wait
    assert waited >= 0.9  # the batch went out at the first one's deadline, not before


def test_close_finishes_queued_requests_then_refuses_new_ones():
    script = Script(delay=0.05)
    batcher = make(script, max_wait=1.0, max_tokens=4)
    requests = [[f"r{r} s{i}" for i in range(3)] for r in range(5)]

    async def main():
        await batcher.start()
        tasks = [asyncio.create_task(batcher.translate(r, "o")) for r in requests]
        await asyncio.sleep(0.01)
        await batcher.close()  # does not wait out max_wait, and drops nothing
        assert all(t.done() for t in tasks)
        with pytest.raises(BatcherClosed):
            await batcher.translate(["late"], "o")
        return [t.result() for t in tasks]

    for req, got in zip(requests, run(main())):
        assert got == expected(req, "o")


def test_call_runs_on_the_worker_thread_between_batches():
    script = Script()
    batcher = make(script)

    async def main():
        await batcher.start()
        out = await batcher.translate(["x"], "o")
        name = await batcher.call(lambda: threading.current_thread().name)
        with pytest.raises(ZeroDivisionError):
            await batcher.call(lambda: 1 / 0)
        again = await batcher.translate(["y"], "o")
        await batcher.close()
        return out, name, again

    out, name, again = run(main())
    assert out == expected(["x"], "o") and again == expected(["y"], "o")
    assert script.threads == {name}


def test_a_wrong_number_of_results_is_an_engine_failure():
    batcher = Batcher(lambda s, o: s[:-1], count_tokens=words, max_tokens=100, max_wait=0)

    async def main():
        await batcher.start()
        with pytest.raises(EngineFailure, match="1 results for 2"):
            await batcher.translate(["a", "b"], "o")
        await batcher.close()

    run(main())


# ---- continuous batching: a scripted Stream ----------------------------------------------------


class FakeStream:
    """A sentence of n words takes n steps; its result is ``"stream:<sentence reversed>"``.

    Records, per step, the keys that joined and the sentences in the search."""

    def __init__(self, *, poison: str | None = None, delay: float = 0.0) -> None:
        self.left: dict[int, tuple[str, int]] = {}
        self.steps: list[tuple[list[str], list[str]]] = []  # (joined, in the search)
        self.poison = poison
        self.delay = delay
        self.resets = 0

    @property
    def active(self) -> int:
        return len(self.left)

    @property
    def tokens(self) -> int:
        return sum(len(text.split()) for text, _ in self.left.values())

    def advance(self, new):
        for key, text in new:
            self.left[key] = (text, len(text.split()))
        self.steps.append(([t for _, t in new], [t for t, _ in self.left.values()]))
        if self.delay:
            time.sleep(self.delay)
        if self.poison is not None and any(t == self.poison for t, _ in self.left.values()):
            raise RuntimeError("the stream broke")
        done = []
        for key, (text, n) in list(self.left.items()):
            if n <= 1:
                done.append((key, f"stream:{text[::-1]}"))
                del self.left[key]
            else:
                self.left[key] = (text, n - 1)
        return done

    def reset(self) -> None:
        self.left.clear()
        self.resets += 1


def stream_make(script: Script, stream: FakeStream, options="beam5", **kwargs) -> Batcher:
    return make(script, stream_for=lambda o: stream if o == options else None, **kwargs)


def streamed(sentences):
    return [f"stream:{s[::-1]}" for s in sentences]


def test_sentences_join_a_running_search_and_leave_when_done():
    script, stream = Script(), FakeStream(delay=0.005)
    batcher = stream_make(script, stream, max_wait=0.0)
    long = "w " * 30 + "long"  # 31 steps

    async def main():
        await batcher.start()
        first = asyncio.ensure_future(batcher.translate([long], "beam5"))
        await asyncio.sleep(0.03)  # the long sentence is being searched
        short = await batcher.translate(["a b", "c"], "beam5")
        short_done = first.done()
        out = await first
        await batcher.close()
        return short, short_done, out

    short, short_done, out = run(main())
    assert short == streamed(["a b", "c"]) and out == streamed([long])
    assert not short_done  # the short request came back while the long one still ran
    joined_late = [i for i, (joined, _) in enumerate(stream.steps) if "a b" in joined]
    assert joined_late and joined_late[0] > 0  # it joined the running search
    assert long in stream.steps[joined_late[0]][1]  # next to the long sentence
    assert script.batches == []  # nothing went through static batches


def test_the_search_takes_no_more_than_the_token_budget():
    script, stream = Script(), FakeStream()
    batcher = stream_make(script, stream, max_tokens=6, max_wait=0.02)
    requests = [[f"s{i} x y"] for i in range(8)]  # 3 tokens each: two at a time

    async def main():
        await batcher.start()
        out = await asyncio.gather(*(batcher.translate(r, "beam5") for r in requests))
        await batcher.close()
        return out

    assert run(main()) == [streamed(r) for r in requests]
    assert max(len(inside) for _, inside in stream.steps) == 2


def test_other_options_wait_for_the_search_to_drain_then_run():
    script, stream = Script(), FakeStream(delay=0.002)
    batcher = stream_make(script, stream, max_wait=0.0)

    async def main():
        await batcher.start()
        a = asyncio.ensure_future(batcher.translate(["w " * 10 + "x"], "beam5"))
        await asyncio.sleep(0.005)
        b = asyncio.ensure_future(batcher.translate(["other"], "greedy"))
        await asyncio.sleep(0.001)
        c = asyncio.ensure_future(batcher.translate(["later"], "beam5"))
        out = await asyncio.gather(a, b, c)
        await batcher.close()
        return out

    a, b, c = run(main())
    assert a == streamed(["w " * 10 + "x"]) and b == expected(["other"], "greedy")
    assert c == streamed(["later"])
    # "later" arrived after the greedy request: it did not join the search before it ran
    searched_together = [inside for _, inside in stream.steps if "later" in inside]
    assert all("w " * 10 + "x" not in inside for inside in searched_together)
    assert script.batches == [(["other"], "greedy")]


def test_a_stream_exception_fails_only_the_request_that_caused_it():
    script, stream = Script(poison="bad"), FakeStream(poison="bad")
    batcher = stream_make(script, stream, max_wait=0.05)

    async def main():
        await batcher.start()
        out = await asyncio.gather(
            batcher.translate(["a b c"], "beam5"),
            batcher.translate(["x", "bad"], "beam5"),
            batcher.translate(["d e"], "beam5"),
            return_exceptions=True,
        )
        after = await batcher.translate(["f"], "beam5")
        await batcher.close()
        return out, after

    (ok1, bad, ok2), after = run(main())
    assert isinstance(bad, EngineFailure) and "poisoned by bad" in str(bad)
    # the search failed as a whole; each request was retried on its own in a static batch
    assert ok1 == expected(["a b c"], "beam5") and ok2 == expected(["d e"], "beam5")
    assert stream.resets == 1
    assert after == streamed(["f"])  # the next request is searched continuously again


def test_close_finishes_the_search_and_the_queue():
    script, stream = Script(), FakeStream(delay=0.002)
    batcher = stream_make(script, stream, max_wait=0.0)

    async def main():
        await batcher.start()
        running = [
            asyncio.ensure_future(batcher.translate([f"q{i} " * 5], "beam5")) for i in range(5)
        ]
        await asyncio.sleep(0.003)
        await batcher.close()
        return [r.result() for r in running]

    assert run(main()) == [streamed([f"q{i} " * 5]) for i in range(5)]


def test_a_stream_that_cannot_start_falls_back_to_static_batches():
    script = Script()

    def stream_for(options):
        raise RuntimeError("no search today")

    batcher = make(script, stream_for=stream_for)

    async def main():
        await batcher.start()
        out = await batcher.translate(["a b", "c"], "beam5")
        await batcher.close()
        return out

    assert run(main()) == expected(["a b", "c"], "beam5")
    assert script.batches == [(["a b", "c"], "beam5")]


# ---- lanes: several static batches in flight (an engine with workers of its own) ----------


class Gate(Script):
    """A fake engine whose calls block until ``open`` is set; records the calls running at once."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def __call__(self, sentences: list[str], options: object) -> list[str]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            assert self.open.wait(10), "the gate never opened"
            return super().__call__(sentences, options)
        finally:
            with self.lock:
                self.running -= 1


async def _until(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("lanes", [1, 2, 3])
def test_lanes_run_that_many_batches_at_once_and_share_the_queue(lanes):
    gate = Gate()
    batcher = make(gate, max_wait=0.05, lanes=lanes)
    requests = [[f"r{r} s{i}" for i in range(2)] for r in range(12)]  # 24 sentences of 2 tokens

    async def main():
        await batcher.start()
        tasks = [asyncio.ensure_future(batcher.translate(req, "b")) for req in requests]
        # every request is queued before the first batch forms (max_wait), then the free
        # lanes take their shares and block in the engine
        await _until(lambda: gate.running == lanes)
        await asyncio.sleep(0.05)  # no further lane starts while all are busy
        assert gate.running == lanes
        gate.open.set()
        out = await asyncio.gather(*tasks)
        await batcher.close()
        return out

    results = run(main())
    for req, got in zip(requests, results):
        assert got == expected(req, "b")
    assert gate.most == lanes
    first = [len(batch) for batch, _ in gate.batches[:lanes]]
    # Lanes free at the same time split the 24 queued sentences evenly; one lane takes all.
    assert first == [24 // lanes] * lanes
    assert len(gate.threads) == lanes
    flat = sorted(s for batch, _ in gate.batches for s in batch)
    assert flat == sorted(s for req in requests for s in req)


def test_with_lanes_a_call_waits_until_no_batch_runs():
    gate = Gate()
    batcher = make(gate, max_wait=0.0, lanes=2)
    seen = []

    async def main():
        await batcher.start()
        first = asyncio.ensure_future(batcher.translate(["a b"], "x"))
        await _until(lambda: gate.running == 1)
        call = asyncio.ensure_future(batcher.call(lambda: seen.append(gate.running) or "done"))
        later = asyncio.ensure_future(batcher.translate(["c d"], "x"))
        await asyncio.sleep(0.05)
        assert not call.done() and gate.running == 1  # the call waits; so does what follows it
        gate.open.set()
        out = await asyncio.gather(first, call, later)
        await batcher.close()
        return out

    assert run(main()) == [expected(["a b"], "x"), "done", expected(["c d"], "x")]
    assert seen == [0]


def test_with_lanes_close_waits_for_the_batches_in_flight():
    gate = Gate()
    batcher = make(gate, max_wait=0.0, lanes=2)

    async def main():
        await batcher.start()
        tasks = [asyncio.ensure_future(batcher.translate([f"s{i}"], "x")) for i in range(2)]
        await _until(lambda: gate.running == 2)
        closing = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        with pytest.raises(BatcherClosed):
            await batcher.translate(["late"], "x")
        gate.open.set()
        await closing
        return await asyncio.gather(*tasks)

    assert run(main()) == [expected(["s0"], "x"), expected(["s1"], "x")]


def test_with_lanes_an_engine_exception_fails_only_its_request():
    script = Script(poison="bad", delay=0.01)
    batcher = make(script, max_wait=0.02, lanes=2)

    async def main():
        await batcher.start()
        out = await asyncio.gather(
            *(
                batcher.translate([f"ok{i}", "bad" if i == 3 else f"fine{i}"], "x")
                for i in range(8)
            ),
            return_exceptions=True,
        )
        await batcher.close()
        return out

    out = run(main())
    assert isinstance(out[3], EngineFailure)
    for i, got in enumerate(out):
        if i != 3:
            assert got == expected([f"ok{i}", f"fine{i}"], "x")


def test_lanes_are_refused_with_a_continuous_search_or_below_one():
    with pytest.raises(ValueError, match="lanes"):
        make(Script(), lanes=0)
    with pytest.raises(ValueError, match="continuous"):
        make(Script(), lanes=2, stream_for=lambda _o: None)


@pytest.mark.parametrize("gated", [True, False])
def test_batchers_sharing_a_thread_form_a_batch_when_their_turn_comes(gated):
    # Two models' batchers on one engine thread: while A's batch runs, B's requests queue. With
    # the shared gate B forms its batch once A is done, holding all of them; without it, B's
    # first batch was formed at once and waited in the thread's queue as small as it was.
    from seq2seq.serve.batcher import engine_thread

    release = threading.Event()

    def slow_a(sentences, options):
        release.wait(10)
        return list(sentences)

    script_b = Script()
    thread = engine_thread()
    gate = asyncio.Lock() if gated else None
    a = Batcher(
        slow_a, count_tokens=words, max_tokens=1000, max_wait=0.001, executor=thread, gate=gate
    )
    b = make(script_b, max_wait=0.001, executor=thread, gate=gate)

    async def main():
        await a.start()
        await b.start()
        first = asyncio.ensure_future(a.translate(["a one"], "x"))
        await asyncio.sleep(0.05)  # A's batch holds the thread
        waiting = []
        for i in range(3):
            waiting.append(asyncio.ensure_future(b.translate([f"b {i}"], "x")))
            await asyncio.sleep(0.02)
        release.set()
        out = await asyncio.gather(first, *waiting)
        await a.close()
        await b.close()
        return out

    try:
        out = run(main())
    finally:
        thread.shutdown()
    assert out == [["a one"], *(expected([f"b {i}"], "x") for i in range(3))]
    sizes = [len(batch) for batch, _ in script_b.batches]
    assert sizes == ([3] if gated else [1, 2])

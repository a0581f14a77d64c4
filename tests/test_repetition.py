"""The repetition guard (seq2seq.decode.repetition): the loop rule by hand and as properties,
the Translator's retry with ``no_repeat_ngram``, and its count in the server's /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import make_model_dir, run_app
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.data import EOS_ID, Tokenizer
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.repetition import RepetitionGuard, longest_runs, loop_size
from seq2seq.decode.search_base import Hypothesis
from seq2seq.decode.translator import Translator


def test_runs_and_loops_by_hand():
    assert longest_runs([]) == [0, 0, 0, 0]
    assert longest_runs([7]) == [1, 0, 0, 0]
    assert longest_runs([1, 2, 2, 2, 3]) == [3, 1, 1, 1]
    assert longest_runs([1, 2, 1, 2, 1, 2, 1]) == [1, 3, 1, 1]  # "1 2" x3; "1 2 1" then "2 1 2"
    src = [5, 6, 7]  # repeats nothing: s = 1 for every n
    assert loop_size(src, [1, 2, 2, 2, 3]) == 0  # three in a row is no loop
    assert loop_size(src, [1, 2, 2, 2, 2, 3]) == 1  # four is
    assert loop_size(src, [9, 1, 2, 1, 2, 1, 2, 1, 2]) == 2  # "1 2" four times
    assert loop_size(src, [1, 2, 3, 4] * 4) == 4
    assert loop_size(src, [1, 2, 3, 4] * 3) == 0
    ha = [8] * 5  # the source says "ha" five times in a row: s = 5
    assert loop_size(ha, [8] * 7) == 0  # 7 < 5 + 3
    assert loop_size(ha, [8] * 8) == 1
    assert loop_size([], [3, 3, 3, 3]) == 1  # an empty source repeats nothing


tokens = st.lists(st.integers(0, 5), max_size=30)


def runs_by_brute_force(seq: list[int], n: int) -> int:
    """The most copies of one n-gram back to back, by trying every start and count."""
    if len(seq) < n:
        return 0
    best = 1
    for i in range(len(seq) - n + 1):
        k = 1
        while seq[i + k * n : i + (k + 1) * n] == seq[i : i + n]:
            k += 1
        best = max(best, k)
    return best


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=40))
def test_runs_equal_a_brute_force_count(seq):
    assert longest_runs(seq) == [runs_by_brute_force(seq, n) for n in range(1, 5)]


@settings(max_examples=300, deadline=None)
@given(tokens)
def test_a_copy_of_the_source_never_loops(seq):
    assert loop_size(seq, seq) == 0


@settings(max_examples=300, deadline=None)
@given(tokens, tokens, st.lists(st.integers(0, 5), min_size=1, max_size=4))
def test_a_gram_repeated_three_beyond_the_source_loops(src, out, gram):
    n = len(gram)
    k = max(longest_runs(src)[n - 1], 1) + 3
    looped = out + gram * k
    found = loop_size(src, looped)
    assert 1 <= found <= n  # this gram, or a smaller one inside it, loops
    assert longest_runs(looped)[n - 1] >= k


@settings(max_examples=300, deadline=None)
@given(tokens, tokens)
def test_a_loop_is_what_the_rule_says(src, out):
    runs_out, runs_src = longest_runs(out), longest_runs(src)
    want = [n for n in range(1, 5) if runs_out[n - 1] >= max(runs_src[n - 1], 1) + 3]
    assert loop_size(src, out) == (want[0] if want else 0)


class LoopingEngine:
    """Loops ("a a a a ...") unless no_repeat_ngram is set; records the options it saw."""

    def __init__(self, loop_id: int, other: int) -> None:
        self.loop_id, self.other, self.seen = loop_id, other, []

    def translate_ids(self, src, opts, constraints=None):
        self.seen.append((len(src), opts.no_repeat_ngram))
        if opts.no_repeat_ngram:
            out = [self.loop_id, self.other, self.loop_id, EOS_ID]
        else:
            out = [self.loop_id] * 6 + [EOS_ID]
        hyp = Hypothesis(tokens=out, score=-1.0, token_scores=[0.0] * len(out))
        return [[hyp] for _ in src]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("repetition") / "model", train_steps=0)


def test_the_translator_retries_looping_outputs_with_no_repeat_ngram(model_dir):
    tok = Tokenizer.load(model_dir)
    dog, cat = tok.encode_tgt(["dog"])[0][0], tok.encode_tgt(["cat"])[0][0]
    engine = LoopingEngine(dog, cat)
    t = Translator(engine, tok, max_src_positions=64, opts=SearchOptions(method="greedy"))
    assert t.translate(["a man", "two dogs"]).count(tok.decode_tgt([[dog] * 6])[0]) == 2
    counted: list[int] = []
    guard = RepetitionGuard(on_retry=counted.append)
    out = t.translate(["a man", "", "two dogs"], repetition_guard=guard)
    assert out[1] == "" and out[0] == out[2] == tok.decode_tgt([[dog, cat, dog]])[0]
    assert engine.seen[-2:] == [(2, 0), (2, 3)]  # one retry of both, no_repeat_ngram=3
    assert guard.retries == 2 and counted == [2]


def test_an_untrained_model_loops_and_the_guard_stops_it(model_dir):
    t = Translator.load(model_dir, method="greedy")
    sentences = ["a man runs in the park", "two dogs play", "the old car is black", "a red ball"]
    tok = t.tokenizer
    src = [ids[:-1] for ids in t.encode(sentences)]

    def loops(texts):
        return [loop_size(s, tok.encode_tgt([x])[0]) for s, x in zip(src, texts)]

    before = loops(t.translate(sentences))
    assert any(before)  # random weights loop
    guard = RepetitionGuard()
    after = t.translate(sentences, repetition_guard=guard)
    assert guard.retries == sum(1 for n in before if n)
    assert all(n == 0 or n == 4 for n in loops(after))  # a retried loop of n < 4 is gone


def test_the_server_counts_retries_in_metrics(model_dir):
    from seq2seq.serve.app import create_app
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.served_model import model_info

    t = Translator.load(model_dir, method="greedy")
    app = create_app(t, info=model_info(t, model_dir, "torch"), config=ServeConfig())

    async def body(client):
        r = await client.post("/v1/translate", json={"text": "a man runs in the park"})
        return r, await client.get("/metrics")

    r, metrics = run_app(app, body)
    assert r.status_code == 200
    line = [
        x for x in metrics.text.splitlines() if x.startswith("seq2seq_repetition_retries_total")
    ]
    assert line and float(line[0].split()[-1]) >= 1.0, metrics.text[-500:]


@pytest.mark.slow
def test_cli_repetition_guard(model_dir):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SEQ2SEQ_DEBUG"}
    text = "a man runs in the park\ntwo dogs play\n"
    args = [sys.executable, "-m", "seq2seq.cli", "translate", str(model_dir), "--greedy"]
    plain = subprocess.run(args, input=text.encode(), capture_output=True, env=env, timeout=300)
    guarded = subprocess.run(
        [*args, "--repetition-guard"],
        input=text.encode(),
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert plain.returncode == guarded.returncode == 0, guarded.stderr.decode()
    t = Translator.load(model_dir, method="greedy")
    want = t.translate(text.splitlines(), repetition_guard=RepetitionGuard())
    assert guarded.stdout.decode().splitlines() == want != plain.stdout.decode().splitlines()
    assert b"looping translation(s) searched again with no_repeat_ngram" in guarded.stderr

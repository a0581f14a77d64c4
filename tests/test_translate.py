"""Translator and `seq2seq translate`: batching, order, empty and over-long lines, streaming."""

from __future__ import annotations

import dataclasses
import io
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from factories import make_model_dir, synthetic_pairs

from seq2seq.config.schema import DecodingConfig
from seq2seq.core.errors import UserError
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode import rules as rules_module
from seq2seq.decode import torch_engine as engines
from seq2seq.decode.batching import batch_by_tokens
from seq2seq.decode.engines import ENGINES
from seq2seq.decode.lines import LineReader
from seq2seq.decode.options import SearchOptions, max_target_lens, reorder_state
from seq2seq.decode.stream import translate_stream
from seq2seq.decode.translator import Translator

REPO = Path(__file__).resolve().parents[1]
SENTENCES = [
    "Big red",
    "Two dogs play on the grass near the old tree .",
    "A man walks",
    "Young child sits on the bench with a black cat !",
    "Old woman",
    "Three people ride a bike in the park.",
]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    """A tiny model trained to copy (so outputs are distinct and short)."""
    return make_model_dir(tmp_path_factory.mktemp("trained") / "model", train_steps=150)


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory) -> Path:
    """An untrained model with two decoder layers: long, arbitrary outputs."""
    return make_model_dir(
        tmp_path_factory.mktemp("random") / "model",
        cfg_overrides=("model.n_decoder_layers=2", "decoding.max_len_a=0", "decoding.max_len_b=12"),
    )


class SpyEngine:
    """Wraps an engine and records the batches it is given."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.batches: list[list[list[int]]] = []

    def translate_ids(self, src, opts):
        self.batches.append([list(s) for s in src])
        return self.engine.translate_ids(src, opts)


def spy_translator(model_dir: Path, **overrides) -> tuple[Translator, SpyEngine]:
    t = Translator.load(model_dir, **overrides)
    spy = SpyEngine(t.engine)
    return Translator(
        spy, t.tokenizer, max_src_positions=t.max_src_positions, opts=t.opts, cfg=t.cfg
    ), spy


# ---- options and helpers ---------------------------------------------------------------------


def test_search_options_from_config_and_overrides() -> None:
    cfg = DecodingConfig(beam_size=4, len_penalty=0.6)
    opts = SearchOptions.from_config(cfg, nbest=2, top_k=None)
    assert (opts.method, opts.beam_size, opts.nbest, opts.len_penalty) == ("beam", 4, 2, 0.6)
    assert opts.top_k == cfg.top_k  # None = keep the config's value
    assert opts.replace(method="greedy", nbest=1).method == "greedy"
    with pytest.raises(TypeError, match="beam_width"):
        SearchOptions.from_config(cfg, beam_width=3)
    with pytest.raises(UserError, match="nbest"):
        SearchOptions.from_config(cfg, nbest=5)
    with pytest.raises(UserError, match="greedy"):
        SearchOptions.from_config(cfg, method="greedy", nbest=2)
    with pytest.raises(UserError, match="unknown decoding method 'topk'"):
        SearchOptions.from_config(cfg, method="topk")


def test_batch_by_tokens_covers_each_index_once_within_budget() -> None:
    lengths = [5, 1, 9, 3, 3, 12, 7, 2, 30, 4]
    batches = batch_by_tokens(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        cost = len(b) * max(lengths[i] for i in b)
        assert cost <= 12 or len(b) == 1
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # length-sorted
    assert batches[-1] == [8]  # longer than the budget: alone


def test_max_target_lens_is_fairseqs_plus_eos() -> None:
    opts = SearchOptions(max_len_a=1.5, max_len_b=2)
    # fairseq: min(int(a * src_len + b), max_positions - 1) tokens before EOS; +1 for EOS.
    assert max_target_lens([1, 4, 10, 100], opts, max_positions=20) == [4, 9, 18, 20]


def test_unknown_engine_lists_the_available_ones(trained_dir: Path) -> None:
    with pytest.raises(UserError, match="unknown engine 'tensorrt'; available: .*torch"):
        Translator.load(trained_dir, engine="tensorrt")
    assert "torch" in ENGINES


# ---- Translator --------------------------------------------------------------------------------


def test_batches_restore_order_and_match_one_at_a_time(trained_dir: Path) -> None:
    translator, spy = spy_translator(trained_dir, max_tokens=40)
    batched = translator.translate_nbest(SENTENCES)
    assert len(spy.batches) > 1  # the budget forced several length-sorted batches
    for batch in spy.batches:
        assert len(batch) * max(len(s) for s in batch) <= 40 or len(batch) == 1
        assert all(s[-1] == EOS_ID for s in batch)
    singles = [translator.translate_nbest([s])[0] for s in SENTENCES]
    assert [b[0].text for b in batched] == [s[0].text for s in singles]
    for b, s in zip(batched, singles):
        assert b[0].score == pytest.approx(s[0].score, abs=1e-4)
    texts = [b[0].text for b in batched]
    assert len(set(texts)) == len(texts)  # distinct outputs: a permutation would be caught
    # The trained copy model copies short sentences of its vocabulary.
    assert texts[0] == "Big red"
    assert translator.translate(SENTENCES) == texts


def test_empty_lines_give_empty_output_without_the_model(trained_dir: Path) -> None:
    translator, spy = spy_translator(trained_dir)
    out = translator.translate(["", "Big red", "   ", "", "A man walks"])
    assert out[0] == out[2] == out[3] == ""
    assert out[1] and out[4]
    assert sum(len(b) for b in spy.batches) == 2
    assert translator.translate([]) == []
    nbest = translator.translate_nbest(["", "Big red"], nbest=3)
    assert [len(n) for n in nbest] == [3, 3]
    assert all(t.text == "" and t.score == 0.0 for t in nbest[0])


def test_overlong_line_is_truncated_and_reported(trained_dir: Path) -> None:
    translator, spy = spy_translator(trained_dir, method="greedy", max_len_a=0.0, max_len_b=5)
    long_line = " ".join(["people"] * 80)
    reported = []
    out = translator.translate(
        ["Big red", long_line], on_truncated=lambda line, n: reported.append((line, n))
    )
    assert len(out) == 2 and out[1]
    assert len(reported) == 1 and reported[0][0] == 2 and reported[0][1] > 64
    longest = max((s for b in spy.batches for s in b), key=len)
    assert len(longest) == 64 and longest[-1] == EOS_ID  # max_positions - 1 pieces + EOS
    with pytest.warns(UserWarning, match="line 1: .* truncated"):
        translator.translate([long_line])


def test_beam_1_equals_greedy(random_dir: Path, trained_dir: Path) -> None:
    for model_dir in (random_dir, trained_dir):
        translator = Translator.load(model_dir)
        beam = translator.translate_nbest(SENTENCES, method="beam", beam_size=1)
        greedy = translator.translate_nbest(SENTENCES, method="greedy")
        assert [b[0].text for b in beam] == [g[0].text for g in greedy]
        for b, g in zip(beam, greedy):
            assert b[0].score == pytest.approx(g[0].score, abs=1e-4)


@pytest.mark.parametrize("mask", ["causal", "window"])
def test_kv_cache_gives_the_same_hypotheses_as_recomputing(tmp_path: Path, mask: str) -> None:
    model_dir = make_model_dir(
        tmp_path / "m",
        cfg_overrides=(
            f"model.decoder_mask={mask}",
            "model.window=3",
            "model.n_decoder_layers=2",
            "decoding.max_len_a=0",
            "decoding.max_len_b=10",
        ),
    )
    cached = Translator.load(model_dir, engine="torch", beam_size=4, nbest=4)
    uncached = Translator.load(model_dir, engine="torch-nocache", beam_size=4, nbest=4)
    assert cached.engine.use_cache and not uncached.engine.use_cache
    a, b = cached.translate_nbest(SENTENCES), uncached.translate_nbest(SENTENCES)
    for hyps_a, hyps_b in zip(a, b):
        assert [h.text for h in hyps_a] == [h.text for h in hyps_b]
        assert [h.score for h in hyps_a] == pytest.approx([h.score for h in hyps_b], abs=1e-4)
        assert len(hyps_a) == 4


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_fast_paths_give_the_exact_paths_output_bit_for_bit(
    trained_dir: Path, random_dir: Path, method: str, monkeypatch
) -> None:
    """The preallocated KV cache, recycled reorders and the fused candidate selection change
    no token and no score against the plain path (concatenated cache, copying reorders, top-k
    over every (beam, token) continuation): the decoding before they were added."""
    for model_dir in (trained_dir, random_dir):
        translator = Translator.load(model_dir, method=method, beam_size=4, nbest=1)
        fast = translator.translate_nbest(SENTENCES)
        fast4 = translator.translate_nbest(SENTENCES, nbest=4) if method == "beam" else None
        model = translator.engine.model

        def concat_step(prefix, state, model=model):
            hidden, kv, _ = model.decoder(
                prefix[:, state.position :],
                state.cross_kv,
                state.src_pad,
                cache=state.self_kv,
                offset=state.position,
                memory_rows=state.memory_rows,
            )
            log_probs = model.project(hidden[:, -1]).float().log_softmax(dim=-1)
            return log_probs, dataclasses.replace(state, self_kv=kv, position=prefix.size(1))

        with monkeypatch.context() as m:
            m.setattr(rules_module, "_FUSED_MIN_VOCAB", 10**9)
            m.setattr(model, "decode_step", concat_step)
            m.setattr(engines, "_recycling_reorder", reorder_state)
            assert translator.translate_nbest(SENTENCES) == fast
            if fast4 is not None:
                assert translator.translate_nbest(SENTENCES, nbest=4) == fast4
        if model_dir == trained_dir:
            assert len({t[0].text for t in fast}) == len(SENTENCES)  # not a vacuous comparison


def test_bf16_and_int8_engines_translate_close_to_float32(trained_dir: Path) -> None:
    import sacrebleu

    ref = Translator.load(trained_dir).translate_nbest(SENTENCES)
    for engine in ("torch-bf16", "torch-int8"):
        translator = Translator.load(trained_dir, engine=engine)
        assert translator.engine.precision == engine.split("-")[1].replace("bf16", "bfloat16")
        out = translator.translate_nbest(SENTENCES)
        assert all(h[0].score < 0 and len(h[0].token_scores) > 0 for h in out)
        # the copy task survives the rounding (a 32-wide model: coarse for int8)
        chrf = sacrebleu.corpus_chrf([h[0].text for h in out], [[h[0].text for h in ref]])
        assert chrf.score > 50, engine
    assert Translator.load(trained_dir).engine.model.output_proj.weight.dtype == torch.float32
    with pytest.raises(UserError, match="precision"):
        engines.TorchEngine(
            Translator.load(trained_dir).engine.model,
            precision="fp8",
            pad_id=0,
            bos_id=2,
            eos_id=3,
            unk_id=1,
        )


def test_sampling_is_seeded_and_nbest_sorted(random_dir: Path) -> None:
    translator = Translator.load(random_dir, method="sample", nbest=3, seed=7)
    a = translator.translate_nbest(SENTENCES[:3])
    assert a == translator.translate_nbest(SENTENCES[:3])
    for hyps in a:
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    other = translator.translate_nbest(SENTENCES[:3], seed=8)
    assert [h.text for s in a for h in s] != [h.text for s in other for h in s]


# ---- line reading and streaming ----------------------------------------------------------------


def test_line_reader_splits_on_newline_only_and_checks_utf8() -> None:
    data = "\ufeffa\r\nb\u2028c\x0bd\n\nlast".encode()
    assert list(LineReader(io.BytesIO(data), name="x")) == ["a", "b\u2028c\x0bd", "", "last"]
    assert list(LineReader(io.BytesIO(b"one\n"), name="x")) == ["one"]
    assert list(LineReader(io.BytesIO(b""), name="x")) == []
    bad = LineReader(io.BytesIO(b"fine\nbad \xff byte\n"), name="in.txt")
    with pytest.raises(UserError, match=r"in\.txt:2: invalid UTF-8 \(byte 5 of the line\)"):
        list(bad)


def test_translate_stream_resumes_a_partial_output(trained_dir: Path, tmp_path: Path) -> None:
    lines = [s for s, _ in synthetic_pairs(6, seed=3)]
    data = "".join(s + "\n" for s in lines).encode()
    translator, spy = spy_translator(trained_dir, method="greedy")
    expected = translator.translate(lines)
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    # An interrupted run: two complete lines and half a third.
    partial.write_bytes(f"{expected[0]}\n{expected[1]}\n{expected[2][:3]}".encode())
    spy.batches.clear()
    warnings = []
    n = translate_stream(
        translator,
        LineReader(io.BytesIO(data), name="in"),
        stdout=io.BytesIO(),
        output=out,
        resume=True,
        buffer_lines=2,  # the partial's two lines are one block
        warn=warnings.append,
    )
    assert n == 6
    assert out.read_text(encoding="utf-8") == "".join(e + "\n" for e in expected)
    assert not partial.exists()
    assert sum(len(b) for b in spy.batches) == 4  # lines 1-2 were not translated again
    assert warnings and "2 lines already translated" in warnings[0]


def test_translate_stream_nbest_format(trained_dir: Path) -> None:
    translator = Translator.load(trained_dir, beam_size=3, nbest=2)
    stdout = io.BytesIO()
    translate_stream(
        translator,
        LineReader(io.BytesIO(b"Big red\n\nA man walks\n"), name="in"),
        stdout=stdout,
        warn=print,
    )
    rows = [r.split(" ||| ") for r in stdout.getvalue().decode().splitlines()]
    assert [r[0] for r in rows] == ["1", "1", "2", "2", "3", "3"]
    assert rows[2][1] == rows[3][1] == ""
    assert rows[0][1] == "Big red"
    assert float(rows[0][2]) >= float(rows[1][2])


# ---- the command line --------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seq2seq.cli", *args]


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SEQ2SEQ_DEBUG", None)
    return env


def _readline(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of the process' stdout, or fail after ``timeout`` seconds."""
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no output line within {timeout}s (got {buf!r})"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1)
            assert chunk, f"stdout closed early; stderr: {proc.stderr.read().decode()}"
            buf += chunk
    return buf


def test_cli_streams_line_by_line(trained_dir: Path) -> None:
    proc = subprocess.Popen(
        _cli("translate", str(trained_dir), "--greedy"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    try:
        proc.stdin.write(b"Big red\n")
        proc.stdin.flush()
        first = _readline(proc, timeout=60)  # answered while stdin is still open
        assert first == b"Big red\n"
        long_line = " ".join(["grass"] * 80).encode()
        proc.stdin.write(b"\n" + long_line + b"\r\nA man walks")
        proc.stdin.close()
        rest = proc.stdout.read()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0, err
    finally:
        proc.kill()
    lines = (first + rest).decode().split("\n")
    assert lines[-1] == "" and len(lines) == 5  # 4 input lines -> 4 output lines
    assert lines[1] == "" and lines[2] and lines[3]
    warnings = [w for w in err.splitlines() if "truncated" in w]
    assert len(warnings) == 1 and "<stdin>:3:" in warnings[0]


def test_cli_invalid_utf8_is_exit_2_with_the_line(trained_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"Big red\nA man \xe9 walks\n")
    r = subprocess.run(
        _cli("translate", str(trained_dir), "-i", str(src)),
        capture_output=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seq2seq translate: error: ")
    assert f"{src}:2: invalid UTF-8" in err[0]


def test_cli_output_file_appears_only_when_complete(trained_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    proc = subprocess.Popen(
        _cli("translate", str(trained_dir), "-o", str(out), "--greedy"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    try:
        proc.stdin.write(b"Big red\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not (partial.exists() and partial.stat().st_size > 0):
            assert time.monotonic() < deadline, proc.stderr.read1().decode()
            time.sleep(0.05)
        assert not out.exists()  # translated so far, but not complete
        assert partial.read_text(encoding="utf-8") == "Big red\n"
        proc.stdin.write(b"A man walks\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    finally:
        proc.kill()
    assert not partial.exists()
    assert out.read_text(encoding="utf-8").count("\n") == 2
    assert out.read_text(encoding="utf-8").startswith("Big red\n")

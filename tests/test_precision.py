"""training.precision auto: bf16 only with bf16 instructions and a faster measured multiply."""

from __future__ import annotations

import math

import pytest

from seq2seq.config.loading import load_config
from seq2seq.train.module import check_training_config
from seq2seq.train.precision import bf16_speedup, cpu_flags, resolve_precision


def FORWARD():  # the probe's forward (the fakes never call it)
    raise AssertionError("not called")


def _auto(flags: set[str], ratio: float, **kwargs):
    calls = []

    def speedup(forward) -> float:
        calls.append(forward)
        return ratio

    choice = resolve_precision(
        "auto", accelerator="cpu", forward=FORWARD, flags=lambda: flags, speedup=speedup,
        **kwargs,
    )  # fmt: skip
    return choice, calls


def test_auto_keeps_float32_without_bf16_instructions():
    choice, calls = _auto({"avx2", "fma", "avx512f"}, ratio=3.0)
    assert choice.precision == "32" and "no bf16 instructions" in choice.reason
    assert calls == []  # nothing measured


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_auto_takes_bf16_where_supported_and_measured_faster(flag):
    choice, calls = _auto({"avx2", flag}, ratio=2.3)
    assert choice.precision == "bf16-mixed" and calls == [FORWARD]
    assert flag in choice.reason and "2.30x" in choice.reason


def test_auto_keeps_float32_where_bf16_measured_no_faster():
    choice, _ = _auto({"avx512_bf16"}, ratio=1.05)
    assert choice.precision == "32" and "1.05x" in choice.reason


def test_multi_process_runs_decide_by_the_flags_alone():
    choice, calls = _auto({"avx512_bf16"}, ratio=0.5, probe=False)
    assert choice.precision == "bf16-mixed" and calls == []


@pytest.mark.parametrize(
    ("flags", "expected"), [({"avx2", "avx512_bf16"}, "bf16-mixed"), ({"avx2"}, "32")]
)
def test_bf16_native_decides_by_the_flags_alone_never_by_a_timing(flags, expected):
    def speedup(forward) -> float:
        raise AssertionError("bf16-native must not measure")

    choice = resolve_precision(
        "bf16-native", accelerator="cpu", forward=FORWARD, flags=lambda: flags, speedup=speedup
    )
    assert choice.precision == expected
    check_training_config(load_config(None, ["training.precision=bf16-native"]))


def test_explicit_precisions_pass_through_and_auto_is_valid():
    for precision in ("32", "bf16-mixed", "16-mixed"):
        choice = resolve_precision(precision, accelerator="cpu")
        assert choice.precision == precision
    check_training_config(load_config(None, ["training.precision=auto"]))


def test_cpu_flags_reads_proc_cpuinfo_format(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n",
        encoding="utf-8",
    )
    assert cpu_flags(info) == {"fpu", "sse", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_the_probe_times_the_training_step_in_both_precisions():
    """bf16_speedup runs forward under bf16 autocast and without it, and backpropagates."""
    import torch

    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(64, 16)
    dtypes = []

    def forward():
        y = x @ w
        dtypes.append(y.dtype)
        return y.sum()

    ratio = bf16_speedup(forward, rounds=1, reps=1)
    assert ratio > 0 and w.grad is not None
    assert dtypes == [torch.float32, torch.bfloat16] * 2  # warm-up, then one round


def test_the_probe_is_the_configured_models_training_step():
    from seq2seq.train.trainer import _probe_forward

    cfg = load_config(None, ["model.d_model=32", "model.n_heads=2", "model.d_ff=64",
                             "model.n_encoder_layers=1", "model.n_decoder_layers=1",
                             "data.vocab_size=50", "data.max_tokens=240"])  # fmt: skip
    loss = _probe_forward(cfg)()
    assert loss.ndim == 0 and bool(loss.isfinite())
    loss.backward()  # a training step: the gradients flow
    # summed over the first batch's 20 x 12 target tokens, each near ln(50) (random weights)
    assert loss.item() / 240 == pytest.approx(math.log(50), rel=0.5)


def test_the_probe_cycles_through_batch_shapes(monkeypatch):
    """Training's batches vary in shape and bf16's speed with them: each call of the probe's
    forward is another sentence length (about data.max_tokens tokens each), and one round of
    bf16_speedup covers every shape once."""
    from seq2seq.train.module import TranslationModule
    from seq2seq.train.precision import PROBE_SHAPES
    from seq2seq.train.trainer import _probe_forward

    shapes = []
    real = TranslationModule.compute_loss

    def recording(self, src, tgt):
        shapes.append(tuple(src.shape))
        return real(self, src, tgt)

    monkeypatch.setattr(TranslationModule, "compute_loss", recording)
    cfg = load_config(None, ["model.d_model=32", "model.n_heads=2", "model.d_ff=64",
                             "model.n_encoder_layers=1", "model.n_decoder_layers=1",
                             "data.vocab_size=50", "data.max_tokens=240"])  # fmt: skip
    forward = _probe_forward(cfg)
    for _ in range(2 * PROBE_SHAPES):
        forward()
    assert len(set(shapes)) == PROBE_SHAPES and shapes[:PROBE_SHAPES] == shapes[PROBE_SHAPES:]
    assert all(rows * length <= 240 < (rows + 1) * length for rows, length in shapes)
    import torch

    counted = []
    bf16_speedup(lambda: counted.append(1) or torch.ones(2, requires_grad=True).sum(), rounds=1)
    assert len(counted) == 4 * PROBE_SHAPES  # warm-up and one round, both precisions

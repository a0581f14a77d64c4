"""training.precision auto: bf16 only with bf16 instructions and a faster measured multiply."""

from __future__ import annotations

import pytest

from seq2seq.config import load_config
from seq2seq.precision import bf16_speedup, cpu_flags, resolve_precision
from seq2seq.system import check_training_config


def _auto(flags: set[str], ratio: float, **kwargs):
    calls = []

    def speedup(d_model: int, d_ff: int) -> float:
        calls.append((d_model, d_ff))
        return ratio

    choice = resolve_precision(
        "auto", accelerator="cpu", d_model=128, d_ff=256, flags=lambda: flags, speedup=speedup,
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
    assert choice.precision == "bf16-mixed" and calls == [(128, 256)]
    assert flag in choice.reason and "2.30x" in choice.reason


def test_auto_keeps_float32_where_bf16_measured_no_faster():
    choice, _ = _auto({"avx512_bf16"}, ratio=1.05)
    assert choice.precision == "32" and "1.05x" in choice.reason


def test_multi_process_runs_decide_by_the_flags_alone():
    choice, calls = _auto({"avx512_bf16"}, ratio=0.5, probe=False)
    assert choice.precision == "bf16-mixed" and calls == []


def test_explicit_precisions_pass_through_and_auto_is_valid():
    for precision in ("32", "bf16-mixed", "16-mixed"):
        choice = resolve_precision(precision, accelerator="cpu", d_model=8, d_ff=8)
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


def test_the_probe_measures_a_ratio():
    ratio = bf16_speedup(16, 32, rows=64, reps=1)
    assert ratio > 0

"""PaceWatch: the expected duration at start, one warning when the run is much slower."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from seq2seq.config.errors import ConfigError
from seq2seq.config.loading import load_config
from seq2seq.train.module import check_training_config
from seq2seq.train.pace_watch import (
    TWO_PASS_COST,
    PaceWatch,
    format_minutes,
    update_cost,
    update_reached,
)
from seq2seq.train.progress import TextProgress

REPO = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run(watch: PaceWatch, clock: FakeClock, *, seconds_per_update: float, steps: int, start=0):
    trainer = SimpleNamespace(max_steps=1200, global_step=start, is_global_zero=True)
    watch.on_train_start(trainer, None)
    for _ in range(steps):
        clock.now += seconds_per_update
        trainer.global_step += 1
        watch.on_train_batch_end(trainer, None, None, None, 0)


def test_prints_the_expected_duration_and_stays_quiet_at_the_expected_pace():
    lines: list[str] = []
    clock = FakeClock()
    watch = PaceWatch(expected_step_s=0.5, machine="2 cores of X", log=lines.append, clock=clock)
    _run(watch, clock, seconds_per_update=0.6, steps=1200)  # 0.5 s expected: 1.2x is fine
    assert lines == [
        "expected training time: about 10 min for 1,200 updates on 2 cores of X; a slower or "
        "busier machine takes longer and trains the same model"
    ]
    assert not watch.warned


def test_warns_once_when_much_slower():
    lines: list[str] = []
    clock = FakeClock()
    watch = PaceWatch(expected_step_s=0.5, log=lines.append, clock=clock)
    _run(watch, clock, seconds_per_update=1.25, steps=1200)  # 2.5x slower
    assert len(lines) == 2 and watch.warned
    warning = lines[1]
    assert warning.startswith("warning: training runs 2.5x slower than expected")
    assert "1.25 s per update, not 0.50" in warning and "about 25 min" in warning
    # judged only after 5% of the run (60 updates), not on the first few
    clock2, lines2 = FakeClock(), []
    early = PaceWatch(expected_step_s=0.5, log=lines2.append, clock=clock2)
    _run(early, clock2, seconds_per_update=5.0, steps=59)
    assert len(lines2) == 1 and not early.warned
    early.on_train_batch_end(
        SimpleNamespace(max_steps=1200, global_step=60, is_global_zero=True), None, None, None, 0
    )
    assert early.warned and len(lines2) == 2


def test_a_resumed_run_expects_only_its_remaining_updates():
    lines: list[str] = []
    clock = FakeClock()
    watch = PaceWatch(expected_step_s=0.5, log=lines.append, clock=clock)
    _run(watch, clock, seconds_per_update=0.5, steps=10, start=600)
    assert lines[0].startswith("expected training time: about 5 min for 600 updates (of 1,200)")


def test_format_minutes():
    assert format_minutes(20) == "under a minute"
    assert format_minutes(630) == "about 10 min"
    assert format_minutes(85 * 60) == "about 1 h 25 min"


def test_expected_step_s_is_checked():
    with pytest.raises(ConfigError, match="training.expected_step_s must be >= 0"):
        check_training_config(load_config(None, ["training.expected_step_s=-1"]))
    with pytest.raises(ConfigError, match="needs training.max_steps"):
        check_training_config(
            load_config(
                None,
                ["training.expected_step_s=0.5", "training.max_steps=0", "training.max_epochs=3"],
            )
        )


def test_the_demo_config_states_its_expected_duration():
    cfg = load_config(REPO / "configs" / "multi30k_quick.yaml")
    assert cfg.training.max_time is None and cfg.training.max_steps == 1800
    assert 8 < cfg.training.expected_step_s * cfg.training.max_steps / 60 < 12  # ~11 min
    assert cfg.training.precision == "bf16-native"  # by the CPU's flags, never by a timing
    check_training_config(cfg)


def test_a_time_guard_is_mentioned():
    from pytorch_lightning.callbacks import Timer

    lines: list[str] = []
    clock = FakeClock()
    watch = PaceWatch(expected_step_s=0.5, log=lines.append, clock=clock)
    trainer = SimpleNamespace(
        max_steps=1200, global_step=0, is_global_zero=True, callbacks=[Timer("00:01:30:00")]
    )
    watch.on_train_start(trainer, None)
    for _ in range(100):
        clock.now += 2.0
        trainer.global_step += 1
        watch.on_train_batch_end(trainer, None, None, None, 0)
    assert lines[0].endswith("training.max_time may stop a slower run sooner")
    assert lines[1].endswith("training.max_time may stop the run before its last update")


def _guarded(time_left: float, *, expected: float = 0.0, steps: int = 1200, max_steps=8000):
    """A PaceWatch over a run of max_steps with a time guard leaving ``time_left`` s at the
    judging point; each update takes 1.5 s."""
    lines: list[str] = []
    clock = FakeClock()
    watch = PaceWatch(
        expected_step_s=expected,
        log=lines.append,
        clock=clock,
        time_left=lambda trainer: time_left,
    )
    trainer = SimpleNamespace(max_steps=max_steps, global_step=0, is_global_zero=True)
    watch.on_train_start(trainer, None)
    seen_at = None
    for _ in range(steps):
        clock.now += 1.5
        trainer.global_step += 1
        before = len(lines)
        watch.on_train_batch_end(trainer, None, None, None, 0)
        if len(lines) > before and seen_at is None:
            seen_at = trainer.global_step
    return watch, lines, seen_at


def test_a_run_that_cannot_finish_inside_max_time_says_so_within_100_updates():
    # 8,000 updates at 1.5 s = 200 min; after update 100 the guard leaves 150 min - 2.5 min
    watch, lines, seen_at = _guarded(147.5 * 60)
    assert watch.deadline_missed and seen_at == 100
    assert len(lines) == 1  # no expected pace: only the deadline line, once
    # 100 done + floor(8850 s / 1.5 s) = 100 + 5900
    assert lines[0].startswith(
        "warning: training.max_time stops this run near update 6,000 of 8,000"
    )
    assert "set training.max_steps=6000" in lines[0]
    assert "about 2 h 28 min" in lines[0] and "about 3 h 18 min" in lines[0]


def test_a_run_that_fits_inside_max_time_is_quiet_and_a_run_without_a_guard_too():
    watch, lines, _ = _guarded(200 * 60)  # 7,900 x 1.5 s = 197.5 min fits in 200
    assert watch.deadline_judged and not watch.deadline_missed and lines == []
    watch, lines, _ = _guarded(None)
    assert watch.deadline_judged and not watch.deadline_missed and lines == []


def test_a_short_run_is_judged_at_its_middle():
    watch, lines, seen_at = _guarded(10.0, steps=40, max_steps=40)
    assert watch.deadline_missed and seen_at == 20
    assert "near update 26 of 40" in lines[0]  # 20 + floor(10 / 1.5)


def _cheap_then_dear(pace_changes_at: int, *, dear_s: float = 3.0, guard_s: float = 2500.0):
    """2,000 updates, 1 s each, then ``dear_s`` each from update 1,000 (training.rdrop_start=1000),
    under a guard that is a ``guard_s`` clock; the watch's lines and the updates they came at."""
    lines: list[str] = []
    clock = FakeClock()
    t_end = clock.now + guard_s
    watch = PaceWatch(
        expected_step_s=0.0,
        log=lines.append,
        clock=clock,
        time_left=lambda trainer: t_end - clock.now,
        pace_changes_at=pace_changes_at,
    )
    trainer = SimpleNamespace(max_steps=2000, global_step=0, is_global_zero=True)
    watch.on_train_start(trainer, None)
    seen_at = []
    for step in range(2000):
        clock.now += 1.0 if step < 1000 else dear_s
        trainer.global_step += 1
        before = len(lines)
        watch.on_train_batch_end(trainer, None, None, None, 0)
        if len(lines) > before:
            seen_at.append(trainer.global_step)
    return watch, lines, seen_at


def test_a_run_that_turns_dearer_is_judged_within_100_updates_and_again_from_its_new_pace():
    # At update 100 the cheap pace (1 s), with the 1,000 two-pass updates ahead counted at
    # 2 s at least, projects 900 + 2,000 = 2,900 s against the 2,400 left: a warning at once.
    watch, lines, seen_at = _cheap_then_dear(pace_changes_at=1000)
    assert seen_at == [100, 1100] and watch.deadline_missed
    # 2,400 s reach 1,000 + (2,400 - 900) / 2
    assert lines[0].startswith("warning: training.max_time stops this run near update 1,750")
    assert "at 1.00 s per update (the two-pass updates from update 1,000 on at 2.00 s" in lines[0]
    assert "about 48 min" in lines[0] and "set training.max_steps=1750" in lines[0]
    # 100 updates into the dearer part its own pace (3 s) judges again: 1,300 s used, 1,200
    # left at 3 s an update: 1,100 + 400
    assert "near update 1,500 of 2,000: at 3.00 s per update the remaining" in lines[1]
    # without the change point the cheap pace is the only judgement: quiet, and wrong
    watch, lines, _ = _cheap_then_dear(pace_changes_at=0)
    assert lines == [] and not watch.deadline_missed


def test_a_run_whose_two_pass_updates_fit_is_quiet_at_both_judgements():
    # 1,000 x 1 s + 1,000 x 2 s = 3,000 s, the guard exactly
    watch, lines, _ = _cheap_then_dear(pace_changes_at=1000, dear_s=2.0, guard_s=3000.0)
    assert lines == [] and not watch.deadline_missed and watch.deadline_judged


def test_update_cost_counts_two_pass_updates_twice_and_update_reached_inverts_it():
    assert TWO_PASS_COST == 2.0
    assert update_cost(100, 2000) == 1900  # no change point
    assert update_cost(100, 2000, 1000) == 900 + 2 * 1000
    assert update_cost(1000, 2000, 1000) == 2 * 1000  # at the change: all dearer ahead
    assert update_cost(1500, 2000, 1000) == 500  # past the change: the dearer pace's units
    assert update_cost(100, 800, 1000) == 700  # the change lies beyond the end
    assert update_cost(2000, 2000, 1000) == 0
    assert update_reached(100, 900, 1000) == 1000
    assert update_reached(100, 901, 1000) == 1000  # half a two-pass update is not one
    assert update_reached(100, 902, 1000) == 1001
    assert update_reached(1000, 7, 1000) == 1003
    assert update_reached(1500, 10.7, 1000) == 1510
    for step in range(0, 2000, 37):
        for end in range(step, 2001, 113):
            for change in (0, 500, 1000, 1999):
                units = update_cost(step, end, change)
                assert update_reached(step, units, change) == end
                assert update_reached(step, units - 0.5, change) <= end


def test_the_text_progress_eta_counts_the_dearer_updates_and_then_their_own_pace(capsys):
    clock = FakeClock()
    progress = TextProgress(every=100, pace_changes_at=1000, clock=clock)
    trainer = SimpleNamespace(
        max_steps=2000, global_step=0, is_global_zero=True, progress_bar_metrics={}, callbacks=[]
    )
    progress.on_train_start(trainer, None)
    etas = {}
    for step in range(2000):
        clock.now += 1.0 if step < 1000 else 3.0
        trainer.global_step += 1
        progress.on_train_batch_end(trainer, None, None, None, 0)
        line = capsys.readouterr().err.strip()
        if line:
            etas[trainer.global_step] = line.rsplit(" eta ", 1)[1]
    assert etas[100] == "0:48:20"  # 1 s x (900 + 2 x 1,000)
    assert etas[1000] == "0:33:20"  # 1 s x 2 x 1,000, the two-pass updates at 2 s at least
    assert etas[1100] == "0:45:00"  # their own pace from update 1,000: 3 s x 900
    assert etas[1900] == "0:05:00"


def test_rdrop_start_needs_the_two_passes():
    cfg = load_config(
        REPO / "configs/multi30k_best.yaml", ["training.rdrop_start=100", "training.rdrop_alpha=0"]
    )
    with pytest.raises(ConfigError, match="rdrop_start needs training.rdrop_alpha"):
        check_training_config(cfg)
    both = ["training.rdrop_start=100", "training.rdrop_alpha=0.5"]
    cfg = load_config(REPO / "configs/multi30k_best.yaml", both)
    check_training_config(cfg)

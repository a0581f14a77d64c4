"""benchmarks/mbr.py: the MBR choice among a beam's n-best (docs/results.md, "make demo"'s
lever table), on hand-checked lists and as the script runs on a tiny model."""

from __future__ import annotations

import benchmark_scripts
import pytest
from factories import make_model_dir


@pytest.fixture(scope="module")
def mbr():
    return benchmark_scripts.load("mbr")


def test_the_consensus_wins_over_the_outlier_and_the_beams_order(mbr):
    # The first candidate (the beam's best) shares little with the others; the third is
    # closest to all of them (sentence BLEU against each other candidate, summed).
    candidates = [
        "a dog runs across the field .",
        "the cat sat on a mat .",
        "the cat sat on the mat .",
        "the cat sat on the red mat .",
    ]
    assert mbr.mbr_choice(candidates) == 2


def test_a_repeated_candidate_is_chosen_first_of_equals(mbr):
    assert mbr.mbr_choice(["x y z w", "a b c d", "a b c d"]) == 1
    assert mbr.mbr_choice(["only one"]) == 0
    assert mbr.mbr_choice(["same words", "same words"]) == 0


def test_the_script_prints_one_row_per_beam(mbr, tmp_path, capsys):
    model = make_model_dir(tmp_path / "m", train_steps=150)
    src = tmp_path / "src.txt"
    src.write_text("a b c d\nc d e\nb a\n", encoding="utf-8")
    assert mbr.main([str(model), "--src", str(src), "--ref", str(src), "--beams", "2,3"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| 2", "| 3"]


def test_bad_beams_are_a_user_error(mbr, tmp_path):
    model = make_model_dir(tmp_path / "m", train_steps=0)
    src = tmp_path / "src.txt"
    src.write_text("a b\n", encoding="utf-8")
    with pytest.raises(mbr.needs.UserError, match="--beams"):
        mbr.main([str(model), "--src", str(src), "--ref", str(src), "--beams", "five"])

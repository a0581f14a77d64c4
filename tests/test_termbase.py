"""Terminology files (`--terminology`): one target per source term, the matching rule, and a
store without a Python object per entry (issue 34, root cause 6). Time and memory against
the file's size are measured by benchmarks/termbase.py (docs/benchmarks.md)."""

from __future__ import annotations

import gc
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from seq2seq.core.errors import UserError
from seq2seq.decode.terminology import Terminology


def test_a_source_term_with_two_targets_is_an_error_naming_both_lines(tmp_path: Path):
    path = tmp_path / "terms.tsv"
    path.write_text("# terms\ndog\tHund\ncat\tKatze\ndog\tHund\ndog\tKöter\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        Terminology.load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:5: the source term 'dog' has the target 'Köter' here")
    assert f"'Hund' at {path}:2" in msg and "\n" not in msg
    # the first conflict in file order is the one reported
    path.write_text("a\tx\nb\ty\nb\tz\na\tw\n", encoding="utf-8")
    with pytest.raises(UserError, match=rf"{re.escape(str(path))}:3: .*'b'.*at .*:2 "):
        Terminology.load(path)
    with pytest.raises(UserError, match="entry 3: the source term 'dog' .* at entry 1 "):
        Terminology([("dog", "Hund"), ("cat", "Katze"), ("dog ", "Köter")])


def test_the_same_entry_twice_is_one_entry(tmp_path: Path):
    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\ndog\tHund\r\n\ufeffcat\tKatze\n", encoding="utf-8")
    terms = Terminology.load(path)
    assert terms.targets_for("a dog and a \ufeffcat") == ["Hund", "Katze"]
    assert terms.find("the dog") == [("Hund", f"{path}:1")]  # where the first one is


def _regex_reference(entries: list[tuple[str, str]], text: str) -> list[str]:
    """The rule as one regular expression: whole words (re's \\w), leftmost, then longest."""
    ordered = sorted(dict(entries).items(), key=lambda kv: -len(kv[0]))
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(s) for s, _ in ordered) + r")(?!\w)")
    targets = dict(ordered)
    return list(dict.fromkeys(targets[m.group(0)] for m in pattern.finditer(text)))


def test_matching_is_the_regular_expressions_rule():
    terms = Terminology([("New York", "NY"), ("York", "Y"), ("New York City", "NYC")])
    assert terms.targets_for("New York City and York.") == ["NYC", "Y"]
    assert terms.targets_for("Yorkshire, New Yorker") == []  # not inside a longer word
    rng = random.Random(0)
    pieces = ["a", "b", "ab", "é", "C++", ".", "-x", "y_", "1", "ß", "New York"]
    for _ in range(800):
        entries: dict[str, str] = {}
        for _ in range(rng.randint(1, 8)):
            words = [rng.choice(pieces) for _ in range(rng.randint(1, 3))]
            entries.setdefault(rng.choice([" ", ""]).join(words), f"T{len(entries)}")
        pairs = list(entries.items())
        text = "".join(rng.choice([*pieces, " ", " ", ",", "!"]) for _ in range(rng.randint(0, 15)))
        assert Terminology(pairs).targets_for(text) == _regex_reference(pairs, text), (pairs, text)


def _reachable(root: object) -> list[object]:
    """The objects reachable from ``root`` (classes and modules left out)."""
    seen: dict[int, object] = {}
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type) or type(obj).__name__ == "module":
            continue
        seen[id(obj)] = obj
        todo.extend(gc.get_referents(obj))
    return list(seen.values())


def _footprint(objects: list[object]) -> int:
    total = 0
    for obj in objects:
        if isinstance(obj, np.ndarray):
            total += obj.nbytes
        elif isinstance(obj, (bytes, bytearray)):
            total += len(obj)
        else:
            total += sys.getsizeof(obj)
    return total


def test_the_store_has_no_python_object_per_entry(tmp_path: Path):
    def termbase(n: int) -> tuple[Terminology, int]:
        path = tmp_path / f"terms{n}.tsv"
        path.write_text("".join(f"term{i} x\tziel{i}\n" for i in range(n)), encoding="utf-8")
        return Terminology.load(path), path.stat().st_size

    small, _ = termbase(1_000)
    big, size = termbase(20_000)
    n_small, n_big = len(_reachable(small)), len(_reachable(big))
    assert n_big == n_small < 60  # 20x the entries, no more Python objects
    assert _footprint(_reachable(big)) <= 10 * size  # compact: within 10x the file
    assert len(big) == 20_000 and big.targets_for("a term19999 x .") == ["ziel19999"]

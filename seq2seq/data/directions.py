"""Multilingual data: sampling directions with a temperature, and labelling pairs by direction.

A multilingual model's training text is one file pair holding every direction's pairs one
after another (the data module writes it, with each source tagged; :mod:`seq2seq.data.tags`),
so each pair's direction follows from its line number (:func:`direction_of_lines`). Each
epoch draws from direction ``i`` about ``N * p_i`` pairs, ``p_i ∝ (n_i / N) ** (1 / T)``
(fairseq's multilingual translation task, ``--sampling-temperature``; ``T = 1`` keeps the
data's proportions, ``T -> inf`` is uniform over directions), then the token-bucket sampler
batches them by length across directions: batches mix directions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq.core import UserError, atomic_open
from seq2seq.data.tags import tag_for

__all__ = [
    "DirectionSampler",
    "direction_of_lines",
    "read_direction_counts",
    "temperature_probs",
    "write_directions_split",
]


def temperature_probs(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """Sampling probability of each direction: ``p_i ∝ (n_i / N) ** (1 / T)``.

    Args:
        sizes: Pairs per direction, ``n_i`` (each > 0).
        temperature: ``T`` > 0.

    Returns:
        The probabilities, summing to 1.
    """
    n = np.asarray(sizes, dtype=np.float64)
    if n.ndim != 1 or not len(n) or (n <= 0).any():
        raise ValueError(f"sizes must be positive counts, got {list(sizes)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    w = (n / n.sum()) ** (1.0 / temperature)
    return w / w.sum()


def direction_of_lines(lines: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """The direction index of each line number, for a file holding ``counts[0]`` lines of
    direction 0, then ``counts[1]`` of direction 1, and so on."""
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    return np.searchsorted(ends, np.asarray(lines, dtype=np.int64), side="right")


class DirectionSampler:
    """The pairs an epoch trains on, drawn per direction with a temperature.

    Direction ``i`` gets ``k_i = round(N * p_i)`` pairs (:func:`temperature_probs`): a random
    subset of its pairs when ``k_i <= n_i``, else all of them as often as they fit and a random
    subset for the rest. Deterministic in ``(seed, epoch)``, so a resumed run sees the same
    epochs. With ``T = 1`` every pair is used once per epoch.

    Args:
        groups: ``(N,)`` direction index of each pair.
        temperature: ``T``.
        seed: Seed of the draws.
    """

    def __init__(self, groups: np.ndarray, *, temperature: float, seed: int) -> None:
        groups = np.asarray(groups, dtype=np.int64)
        self.members = [np.flatnonzero(groups == g) for g in range(int(groups.max()) + 1)]
        self.members = [m for m in self.members if len(m)]
        sizes = [len(m) for m in self.members]
        self.probs = temperature_probs(sizes, temperature)
        total = len(groups)
        self.counts = [int(round(total * p)) for p in self.probs]
        self.seed = int(seed)

    def __call__(self, epoch: int) -> np.ndarray:
        """The pair indices of ``epoch`` (unordered; a pair may appear more than once)."""
        rng = np.random.default_rng([self.seed, int(epoch), 2])
        picked = []
        for members, k in zip(self.members, self.counts):
            whole, rest = divmod(k, len(members))
            picked += [members] * whole
            if rest:
                picked.append(rng.choice(members, size=rest, replace=False))
        return np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)


def _record_path(out_dir: Path, split: str) -> Path:
    return out_dir / f"{split}.directions.json"


def read_direction_counts(out_dir: str | Path, split: str) -> list[tuple[str, str, int]]:
    """``(source, target, lines)`` of each direction in a split that
    :func:`write_directions_split` wrote, in file order."""
    path = _record_path(Path(out_dir), split)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{path} is missing or unreadable; run prepare_data again") from None
    return [(s, t, int(n)) for s, t, n in record["counts"]]


def _file_key(path: Path) -> list:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def write_directions_split(
    text_dir: str | Path,
    out_dir: str | Path,
    split: str,
    directions: Sequence[tuple[str, str]],
    *,
    limit: int = 0,
) -> list[int]:
    """One line-aligned file pair holding every direction of a split, sources tagged.

    Writes ``out_dir/{split}.src`` and ``{split}.tgt``: for each direction ``(s, t)`` in
    order, the first ``limit`` lines (0: all) of ``text_dir/{split}.{s}`` with ``<2t> `` in
    front and of ``text_dir/{split}.{t}``; a blank source line stays blank (so it is dropped
    as an empty pair, as in a bilingual split). ``{split}.directions.json`` records the
    directions, their line counts and the inputs; a second call with the same inputs
    rewrites nothing (so the stores built from the files stay valid).

    Returns:
        The number of lines of each direction.
    """
    text_dir, out_dir = Path(text_dir), Path(out_dir)
    inputs = []
    for s, t in directions:
        for lang in (s, t):
            path = text_dir / f"{split}.{lang}"
            if not path.is_file():
                raise UserError(f"{split} file not found: {path}")
            inputs.append(_file_key(path))
    wanted = {"directions": [list(d) for d in directions], "limit": limit, "inputs": inputs}
    record_path = _record_path(out_dir, split)
    src_out, tgt_out = out_dir / f"{split}.src", out_dir / f"{split}.tgt"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if (
        src_out.is_file()
        and tgt_out.is_file()
        and {k: record.get(k) for k in wanted} == wanted
        and record.get("outputs") == [_file_key(src_out), _file_key(tgt_out)]
    ):
        return [n for _, _, n in record["counts"]]
    counts = []
    with atomic_open(src_out, "wb") as fs, atomic_open(tgt_out, "wb") as ft:
        for s, t in directions:
            tag = tag_for(t).encode("utf-8") + b" "
            n = 0
            with (
                open(text_dir / f"{split}.{s}", "rb") as a,
                open(text_dir / f"{split}.{t}", "rb") as b,
            ):
                for line_a, line_b in zip(a, b):
                    if limit and n >= limit:
                        break
                    line_a, line_b = line_a.rstrip(b"\n"), line_b.rstrip(b"\n")
                    fs.write((tag + line_a if line_a.strip() else b"") + b"\n")
                    ft.write(line_b + b"\n")
                    n += 1
            counts.append(n)
    record = {
        **wanted,
        "counts": [[s, t, n] for (s, t), n in zip(directions, counts)],
        "outputs": [_file_key(src_out), _file_key(tgt_out)],
    }
    with atomic_open(record_path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    return counts

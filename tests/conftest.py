"""Shared fixtures: the Multi30K offline mirror."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mirror_path() -> Path | None:
    candidates = []
    if os.environ.get("SEQ2SEQ_MIRROR"):
        candidates.append(Path(os.environ["SEQ2SEQ_MIRROR"]))
    candidates.append(REPO.parent / "shared" / "data" / "multi30k")
    for path in candidates:
        if (path / "data" / "task1").is_dir():
            return path.resolve()
    return None


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The Multi30K mirror ($SEQ2SEQ_MIRROR, else ../shared/data/multi30k); skips without one."""
    path = _mirror_path()
    if path is None:
        pytest.skip("Multi30K mirror not found (set SEQ2SEQ_MIRROR)")
    return path


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny test models run fastest on one thread (and the suite shares 2 cores)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

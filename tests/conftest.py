"""Shared fixtures: the offline corpus mirrors.

``SEQ2SEQ_MIRROR`` may be a mirror *root* (one folder per source: ``multi30k/``, ``wit3/``, as
``.ci/run`` sets it) or, in the older one-corpus form, the Multi30K mirror itself. Without it,
the tests that need a mirror skip, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _candidates() -> list[Path]:
    return [Path(os.environ["SEQ2SEQ_MIRROR"])] if os.environ.get("SEQ2SEQ_MIRROR") else []


def _source_folder(name: str, marker: str) -> Path | None:
    """``ROOT/name`` of the first candidate root that has it, or a candidate that is it."""
    for path in _candidates():
        for folder in (path / name, path):
            if (folder / marker).exists():
                return folder.resolve()
    return None


def _mirror_root() -> Path | None:
    for path in _candidates():
        if (path / "multi30k" / "data" / "task1").is_dir():
            return path.resolve()
    return None


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The Multi30K mirror (ROOT/multi30k, or $SEQ2SEQ_MIRROR itself); skips without one."""
    path = _source_folder("multi30k", "data/task1")
    if path is None:
        pytest.skip("Multi30K mirror not found (set SEQ2SEQ_MIRROR)")
    return path


@pytest.fixture(scope="session")
def mirror_root() -> Path:
    """A mirror root holding multi30k/ (and wit3/); skips without one."""
    path = _mirror_root()
    if path is None:
        pytest.skip("no mirror root with a multi30k/ folder (set SEQ2SEQ_MIRROR=ROOT)")
    return path


@pytest.fixture(scope="session")
def wit3_mirror() -> Path:
    """The WIT3 IWSLT17 test archives (ROOT/wit3); skips without them."""
    path = _source_folder("wit3", "2017-01-ted-test/texts/de/en/de-en.tgz")
    if path is None:
        pytest.skip("WIT3 mirror not found (set SEQ2SEQ_MIRROR=ROOT with a wit3/ folder)")
    return path


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny test models run fastest on one thread (and the suite shares 2 cores)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

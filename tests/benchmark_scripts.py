"""Load a script of benchmarks/ as a module, for tests of its pieces.

``load("mbr")`` imports benchmarks/mbr.py under the name ``mbr_benchmark`` (so that it cannot
shadow a package module of the same name), with benchmarks/ on ``sys.path`` while it imports, as
it is when run as a script (its ``import needs`` and the like).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """benchmarks/``name``.py as a fresh module named ``name``_benchmark."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(
            f"{name}_benchmark", BENCHMARKS / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module

"""Lazy public names: a subpackage's ``__init__`` names its API without importing it.

``from seq2seq.decode import Translator`` imports ``seq2seq.decode.translator`` on first use
and nothing else, so ``seq2seq --help`` and the light commands start without torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, homes: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each public name from its home module.

    Args:
        package: the package's ``__name__``.
        homes: public name -> the module (relative to ``package``) that defines it.
    """

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    return __getattr__

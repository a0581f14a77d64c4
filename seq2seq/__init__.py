"""seq2seq: encoder-decoder Transformer translators, from raw corpus to exported model.

Shape letters used in comments and docstrings throughout:
    B batch, S source length, T target length, D model width (d_model), H heads,
    Dh head width (D / H), K beam size, V vocabulary, N rows of a search (B * K),
    L a generic sequence length, Lq / Lk query / key lengths.

Mask convention: a boolean attention mask is True where a query may attend; a padding
indicator is named ``*_pad`` and is True where padding is (see seq2seq/model/masks.py).

The public names below are imported on first use, so ``import seq2seq`` (and the CLI's
start-up) does not pay for torch until a command needs it.
"""

from __future__ import annotations

import importlib

__all__ = [
    "ExperimentConfig",
    "Scorer",
    "Seq2SeqTransformer",
    "Terminology",
    "Translator",
    "UserError",
    "build_model",
    "load_config",
    "load_model_dir",
]
__version__ = "0.1.0"

_HOMES = {
    "ExperimentConfig": "seq2seq.config",
    "load_config": "seq2seq.config",
    "UserError": "seq2seq.core",
    "Seq2SeqTransformer": "seq2seq.model",
    "build_model": "seq2seq.model",
    "load_model_dir": "seq2seq.model",
    "Translator": "seq2seq.decode",
    "Terminology": "seq2seq.decode",
    "Scorer": "seq2seq.decode",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'seq2seq' has no attribute {name!r}")

"""The engines by name: ``seq2seq translate --engine NAME`` (and ``evaluate``, ``serve``, the
Python API's ``Translator.load(engine=NAME)``).

Every engine implements :class:`seq2seq.decode.options.Engine` (``translate_ids(src, opts)``),
so they share options and output:

- ``torch`` (:mod:`seq2seq.decode.torch_engine`): seq2seq's search over the PyTorch model, the
  default; ``torch-nocache`` recomputes the prefix every step (the reference the KV cache is
  tested against), ``torch-bf16`` and ``torch-int8`` run it in lower precision.
- ``ctranslate2`` (:mod:`seq2seq.decode.ctranslate2_engine`) and ``onnx``
  (:mod:`seq2seq.decode.onnx_engine`): over an export folder (``seq2seq export``), which then
  takes the model directory's place (it holds the SentencePiece model(s) and config.yaml with
  the decoding defaults).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from seq2seq.decode.ctranslate2_engine import load_ctranslate2
from seq2seq.decode.onnx_engine import load_onnx
from seq2seq.decode.options import LoadedEngine
from seq2seq.decode.torch_engine import load_torch

__all__ = ["ENGINES"]


ENGINES: dict[str, Callable[..., LoadedEngine]] = {
    "torch": load_torch,
    "torch-nocache": functools.partial(load_torch, use_cache=False),
    "torch-bf16": functools.partial(load_torch, precision="bfloat16"),
    "torch-int8": functools.partial(load_torch, precision="int8"),
    "ctranslate2": load_ctranslate2,
    "onnx": load_onnx,
}
"""Engine name -> ``loader(model_dir, *, device) -> LoadedEngine``. Add runtimes here."""

"""Decoding: search options, greedy/beam/sampling search, constraints, the engines (torch,
CTranslate2, ONNX), ensembles, alignments, forced-decoding scores and the Translator.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "ContinuousSearch": "continuous",
    "Constraints": "constraints",
    "LineConstraints": "stream",
    "Scorer": "scoring",
    "SearchOptions": "options",
    "Terminology": "terminology",
    "TorchEngine": "torch_engine",
    "Translation": "translator",
    "Translator": "translator",
    "fingerprint": "partial_output",
    "format_alignment": "alignments",
    "guard": "partial_output",
    "open_lines": "lines",
    "read_lines": "lines",
    "score_files": "scoring",
    "supports": "continuous",
    "translate_stream": "stream",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

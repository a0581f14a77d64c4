"""Export for inference: the export-folder format, CTranslate2 and ONNX.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "CT2_SUB_BATCH": "ctranslate2",
    "DECODER_FILE": "format",
    "ENCODER_FILE": "format",
    "ExportError": "format",
    "describe": "format",
    "export_model": "exporter",
    "read_export_info": "format",
    "require": "format",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

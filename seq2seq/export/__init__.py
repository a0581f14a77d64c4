"""Export for inference: the export-folder format, CTranslate2 and ONNX.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "CT2_SUB_BATCH": "exporter",
    "DECODER_FILE": "exporter",
    "ENCODER_FILE": "exporter",
    "ExportError": "exporter",
    "describe": "exporter",
    "export_model": "exporter",
    "read_export_info": "exporter",
    "require": "exporter",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

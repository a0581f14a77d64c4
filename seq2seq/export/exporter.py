"""Export a model directory for inference in one of the formats, with the model's defaults.

Every export is written into a temporary sibling folder that becomes ``OUT`` only when
complete (:func:`seq2seq.core.files.atomic_dir`), and then checks itself
(:mod:`seq2seq.export.probe`).
"""

from __future__ import annotations

from pathlib import Path

from seq2seq.config import ExportConfig, load_config
from seq2seq.export.ctranslate2 import export_ctranslate2
from seq2seq.export.format import ExportError
from seq2seq.export.hf import export_hf
from seq2seq.export.onnx import export_onnx

__all__ = ["FORMATS", "export_model"]

FORMATS = ("ctranslate2", "onnx", "hf")


def export_model(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    fmt: str | None = None,
    quantization: str | None = None,
    opset: int | None = None,
    force: bool = False,
) -> Path:
    """Export ``model_dir`` to ``out_dir`` in ``fmt`` (``ctranslate2``, ``onnx`` or ``hf``).

    An option left None takes the model's config.yaml ``export`` section (the defaults of
    :class:`~seq2seq.config.experiment.ExportConfig` without a config.yaml); an ONNX export
    is never quantized.

    Args:
        model_dir: a seq2seq model directory.
        out_dir: the folder to create.
        fmt: ``ctranslate2``, ``onnx`` or ``hf`` (a MarianMT folder for transformers).
        quantization: the CTranslate2 weight type (``none``: float32).
        opset: the ONNX opset.
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        ExportError: an unknown format, a quantized ONNX export, or what the format's own
            export refuses.
    """
    defaults = ExportConfig()
    config = Path(model_dir) / "config.yaml"
    if config.is_file():
        defaults = load_config(config).export
    fmt = fmt or defaults.format
    if quantization is None:
        quantization = defaults.quantization if fmt == "ctranslate2" else "none"
    if opset is None:
        opset = defaults.opset
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "hf":
        if quantization != "none":
            raise ExportError(f"--quantization {quantization} applies to --format ctranslate2 only")
        return export_hf(model_dir, out_dir, force=force)
    if fmt == "onnx":
        if quantization != "none":
            raise ExportError(f"--quantization {quantization} applies to --format ctranslate2 only")
        return export_onnx(model_dir, out_dir, opset=opset, force=force)
    return export_ctranslate2(model_dir, out_dir, quantization=quantization, force=force)

"""Evaluation: sacreBLEU metrics, test-set evaluation with its evidence, and mask and attention
plots.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "attention_maps": "plots",
    "check_png_output": "plots",
    "evaluate": "evaluation",
    "format_scores": "metrics",
    "mask_for_kind": "plots",
    "mask_title": "plots",
    "parse_size": "plots",
    "plot_attention": "plots",
    "plot_mask": "plots",
    "score_corpus": "metrics",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

"""Training: the Lightning module and the trainer, checkpoints and averaging, fine-tuning,
precision, signal stops and the pace of a run.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "average_model_dir": "checkpoints",
    "checkpoints_to_average": "checkpoints",
    "resolve_config": "trainer",
    "train": "trainer",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

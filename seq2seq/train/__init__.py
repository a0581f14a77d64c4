"""Training: the Lightning module with its learning-rate schedule and validation, the trainer
with the config a run uses, its checkpoints, progress display, signal stops and pace,
checkpoint averaging, fine-tuning, and the choice of precision.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "average_model_dir": "checkpoints",
    "checkpoints_to_average": "checkpoints",
    "resolve_config": "run_config",
    "train": "trainer",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

"""Experiment configuration: frozen dataclasses that a YAML file mirrors one to one, loading,
``key=value`` overrides and the comparisons that resume and fine-tuning need.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "ConfigError": "experiment",
    "DecodingConfig": "experiment",
    "ExperimentConfig": "experiment",
    "ExportConfig": "experiment",
    "ModelConfig": "experiment",
    "TrainingConfig": "experiment",
    "apply_overrides": "experiment",
    "config_to_dict": "experiment",
    "dump_config": "experiment",
    "load_config": "experiment",
    "model_data_changes": "experiment",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

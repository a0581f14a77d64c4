"""Experiment configuration: frozen dataclasses that a YAML file mirrors one to one
(:mod:`~seq2seq.config.schema`), the value checks and limits their validation is made of
(:mod:`~seq2seq.config.checks`, with the one check of a language pair), loading, ``key=value``
overrides and the comparisons that resume and fine-tuning need (:mod:`~seq2seq.config.loading`).

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "BEAM_LIMIT": "checks",
    "ConfigError": "errors",
    "InvalidValue": "errors",
    "DecodingConfig": "schema",
    "ExperimentConfig": "schema",
    "ExportConfig": "schema",
    "ModelConfig": "schema",
    "TrainingConfig": "schema",
    "apply_overrides": "loading",
    "config_from_dict": "loading",
    "config_to_dict": "loading",
    "dump_config": "loading",
    "load_config": "loading",
    "model_data_changes": "loading",
    "read_yaml": "loading",
    "split_pair": "checks",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

"""Which config a training run uses: a new run's, a fine-tuned one's, or a resumed one's."""

from __future__ import annotations

from pathlib import Path

from seq2seq.config import ExperimentConfig, apply_overrides, load_config, model_data_changes
from seq2seq.core import UserError
from seq2seq.model import CONFIG_FILE
from seq2seq.train.checkpoints import CHECKPOINT_DIR, LAST

__all__ = ["resolve_config"]


def resolve_config(
    out_dir: str | Path,
    *,
    resume: bool,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    init_from: str | Path | None = None,
) -> ExperimentConfig:
    """The config of a new run (``--config`` + overrides) or of a resumed one.

    A new run with ``init_from`` (or ``training.init_from``) is fine-tuned from that model
    directory: :func:`seq2seq.train.finetune.resolve_init_config` gives its config.

    Resuming reads ``DIR/config.yaml``; overrides (or a ``--config``) may change the training,
    decoding and export sections, never the model or data sections.

    Raises:
        UserError: no config for a new run; nothing to resume; a model or data change on
            resume (the changed keys named).
    """
    out_dir = Path(out_dir)
    overrides = list(overrides or [])
    if not resume:
        if config_path is None and init_from is None:
            raise UserError(
                "give --config FILE, --init-from MODEL_DIR (fine-tune), or --resume DIR"
            )
        cfg = load_config(config_path, overrides) if config_path is not None else None
        parent = init_from or (cfg.training.init_from if cfg is not None else None)
        if parent is None:
            return cfg
        from seq2seq.train.finetune import resolve_init_config

        return resolve_init_config(parent, config_path=config_path, overrides=overrides)
    if init_from is not None:
        raise UserError("give either --init-from (a new run) or --resume DIR, not both")
    saved_path = out_dir / CONFIG_FILE
    if not saved_path.is_file():
        raise UserError(f"nothing to resume: {saved_path} is missing")
    if not (out_dir / CHECKPOINT_DIR / LAST).is_file():
        raise UserError(f"nothing to resume: {out_dir / CHECKPOINT_DIR / LAST} is missing")
    saved = load_config(saved_path)
    requested = (
        load_config(config_path, overrides)
        if config_path is not None
        else apply_overrides(saved, overrides)
    )
    changes = model_data_changes(saved, requested)
    if changes:
        shown = ", ".join(changes[:3]) + (
            f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        )
        raise UserError(
            f"--resume {out_dir}: the model and data of a run cannot change, but {shown} "
            f"differ from {saved_path}; start a new run with --out instead"
        )
    return requested

"""Fine-tuning (continued training): a new run that starts from a trained model directory.

``seq2seq train --init-from PARENT --out DIR [--config X.yaml] [key.sub=value ...]``, or
``training.init_from: PARENT`` in the YAML. PARENT is a model directory (``seq2seq train
--out`` or ``seq2seq average --out``), verified by its manifest.

The new run takes from PARENT:

- the weights (``PARENT/model.safetensors``): the first update starts from them, so the first
  training loss is the parent's loss on that batch;
- the SentencePiece model(s): ``data.spm_model`` becomes PARENT, whose model is copied byte
  for byte into DIR (``data.joint_vocab``, ``vocab_size`` and ``spm_type`` follow it);
- the model shape: every ``model.*`` key except the three dropouts (``model.dropout``,
  ``model.attention_dropout``, ``model.activation_dropout``), which the new run may set.

What starts fresh: the optimizer (new AdamW moments), the schedule (update 1, warmup again),
early stopping, checkpoints and logs, and the data (the config's data section: a new corpus, or
the same one at a lower learning rate).

Which config: without ``--config`` the parent's own ``config.yaml`` is the base and the
overrides go on top (``seq2seq train --init-from PARENT --out DIR training.lr=1e-4``). With
``--config`` that file is the base. Either way, a model key the YAML or an override sets to a
value other than the parent's is an error naming the key; model keys it does not set are the
parent's (a config's defaults never fight the parent). ``data.spm_model`` and
``data.joint_vocab``, when set explicitly, must agree with the parent too.

``DIR/parent.json`` records the parent (its absolute path and its manifest's sha256) and is
listed in DIR's own manifest.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

from seq2seq.config import ConfigError, ExperimentConfig, apply_overrides, load_config
from seq2seq.core import atomic_open
from seq2seq.model import CONFIG_FILE, PARENT_FILE, load_model_dir, verify_model_dir

__all__ = [
    "FREE_MODEL_KEYS",
    "read_parent",
    "resolve_init_config",
    "start_from_parent",
]

FREE_MODEL_KEYS = ("dropout", "attention_dropout", "activation_dropout")
"""Model keys a fine-tuning run may change (they do not change the weights' shapes)."""


def _explicit_keys(config_path: str | Path | None, overrides: list[str]) -> set[str]:
    """The dotted keys the YAML file and the overrides set themselves."""
    keys = {item.split("=", 1)[0].strip() for item in overrides if "=" in item}
    if config_path is not None:
        raw = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}
        for section in ("model", "data"):
            keys |= {f"{section}.{k}" for k in (raw.get(section) or {})}
    return keys


def resolve_init_config(
    parent: str | Path,
    *,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
) -> ExperimentConfig:
    """The config of a run fine-tuned from ``parent`` (see the module docstring).

    Raises:
        ModelDirError: ``parent`` is not a (complete, unaltered) model directory.
        ConfigError: a model key (or ``data.spm_model`` / ``data.joint_vocab``) set to another
            value than the parent's, naming the key.
    """
    parent_dir = Path(parent)
    verify_model_dir(parent_dir)
    parent_cfg = load_config(parent_dir / CONFIG_FILE)
    overrides = list(overrides or [])
    base = load_config(config_path) if config_path is not None else parent_cfg
    cfg = apply_overrides(base, overrides)
    explicit = _explicit_keys(config_path, overrides)
    where = f"--init-from {parent_dir}"

    model = {}
    for f in dataclasses.fields(parent_cfg.model):
        key, mine, theirs = (
            f"model.{f.name}",
            getattr(cfg.model, f.name),
            getattr(parent_cfg.model, f.name),
        )
        if key in explicit and (f.name in FREE_MODEL_KEYS or mine == theirs):
            model[f.name] = mine
        elif key in explicit:
            raise ConfigError(
                f"{key} is {mine!r}, but {where} has {theirs!r}: a fine-tuned model keeps its "
                f"parent's shape (leave {key} out, or set it to {theirs!r})"
            )
        else:
            model[f.name] = theirs
    joint = (parent_dir / "spm.model").is_file()
    if "data.joint_vocab" in explicit and cfg.data.joint_vocab != joint:
        raise ConfigError(
            f"data.joint_vocab is {cfg.data.joint_vocab}, but {where} has "
            f"{'a joint' if joint else 'a separate source and target'} SentencePiece model"
        )
    if (
        "data.spm_model" in explicit
        and cfg.data.spm_model is not None
        and Path(cfg.data.spm_model).resolve() != parent_dir.resolve()
    ):
        raise ConfigError(
            f"data.spm_model is {cfg.data.spm_model}, but {where} takes the parent's "
            "SentencePiece model; leave data.spm_model out"
        )
    data = dataclasses.replace(
        cfg.data,
        spm_model=str(parent_dir.resolve()),
        joint_vocab=joint,
        vocab_size=parent_cfg.data.vocab_size,
        spm_type=parent_cfg.data.spm_type,
    )
    training = dataclasses.replace(cfg.training, init_from=str(parent_dir.resolve()))
    return dataclasses.replace(cfg, model=type(cfg.model)(**model), data=data, training=training)


def start_from_parent(cfg: ExperimentConfig, out_dir: str | Path, *, write_record: bool):
    """A :class:`~seq2seq.train.module.TranslationModule` holding the parent's weights.

    Args:
        cfg: the resolved config; ``cfg.training.init_from`` names the parent.
        out_dir: the new run's directory; ``parent.json`` is written there when
            ``write_record`` (rank 0).

    Raises:
        ModelDirError: the parent is missing or altered.
        UserError: the parent's weights do not fit ``cfg.model`` (a config that skipped
            :func:`resolve_init_config`).
    """
    from seq2seq.core import UserError
    from seq2seq.train.module import TranslationModule

    parent_dir = Path(cfg.training.init_from)
    manifest = verify_model_dir(parent_dir)
    parent = load_model_dir(parent_dir)
    module = TranslationModule(
        cfg=cfg,
        src_vocab_size=parent.tokenizer.src_vocab_size,
        tgt_vocab_size=parent.tokenizer.tgt_vocab_size,
    )
    try:
        module.model.load_state_dict(parent.model.state_dict())
    except RuntimeError as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise UserError(
            f"the weights of {parent_dir} do not fit this run's model: {first}"
        ) from None
    if write_record:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        record = {"path": str(parent_dir.resolve()), "manifest_sha256": manifest["sha256"]}
        with atomic_open(out_dir / PARENT_FILE, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
    return module


def read_parent(model_dir: str | Path) -> dict | None:
    """The parent a model directory records (``path``, ``manifest_sha256``), or None."""
    path = Path(model_dir) / PARENT_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))

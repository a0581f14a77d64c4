"""The models a server is asked to serve, checked before anything loads: ``--model DIR``
(repeated), the positional folders (one model, or an ensemble) and ``--models models.yaml``.

A :class:`ModelSpec` is what the user gave; :func:`plan_model` reads what can be known without
loading weights (the folder exists, the engine and the folder it reads, the directions in its
``config.yaml``, the search-option defaults checked against the model's decoding section) into
a :class:`PlannedModel`. Every mistake is a one-line ``UserError`` naming the file: the CLI
exits 2 before the port opens.

A models file::

    models:
      - path: runs/en-de              # a model directory or an export folder, relative to
        engine: ctranslate2           #   this file; a list of model directories: an ensemble
      - path: runs/multi
        name: multi                   # the name in /v1/models and /metrics (default: folder)
        directions: [en-fr, fr-en]    # serve only these of its directions
        decoding: {beam_size: 2}      # its search-option defaults
        preload: true                 # with --max-loaded: load it at start
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seq2seq.core import UserError

__all__ = [
    "ModelSpec",
    "PlannedModel",
    "check_names",
    "distinct_names",
    "plan_model",
    "read_models_file",
]

_FILE_KEYS = ("path", "name", "engine", "directions", "decoding", "preload")
_ENGINES = ("torch", "torch-nocache", "torch-bf16", "torch-int8", "ctranslate2", "onnx")


@dataclass(frozen=True)
class ModelSpec:
    """One model as the user asked for it.

    Attributes:
        folders: a model directory or an export folder; several model directories: an
            ensemble.
        name: its name (default: the folder's name; an ensemble's ``A+B``).
        engine: its engine (None: :func:`~seq2seq.serve.served_model.choose_engine` chooses).
        directions: serve only these ``(source, target)`` of its directions (None: all).
        search: its search-option defaults (``beam_size`` ...; None values: the model's).
        preload: with ``--max-loaded``, load it when the server starts (None: the default).
        where: where the spec comes from, for messages (``models.yaml, model 2``).
    """

    folders: tuple[Path, ...]
    name: str | None = None
    engine: str | None = None
    directions: tuple[tuple[str, str], ...] | None = None
    search: Mapping[str, Any] = field(default_factory=dict)
    preload: bool | None = None
    where: str = "the command line"


@dataclass(frozen=True)
class PlannedModel:
    """A model checked and ready to load (nothing loaded yet).

    Attributes:
        name: its name (unique on the server).
        engine: the engine it is served with.
        folders: what the engine reads (an export folder, the model directory, or several).
        directions: the directions it serves (its config's, or the ones the spec kept).
        multilingual: whether it is a multilingual model (``data.pairs``).
        search: its search-option defaults.
        preload: with ``--max-loaded``, load it at start.
    """

    name: str
    engine: str
    folders: tuple[Path, ...]
    directions: tuple[tuple[str, str], ...]
    multilingual: bool
    search: Mapping[str, Any]
    preload: bool | None = None
    aliases: tuple[tuple[str, str], ...] = ()
    """A many-language model's own codes (``deu_Latn``) and the served code each stands for
    (``de``): requests may name either, in any case."""

    @property
    def load_target(self) -> Path | list[Path]:
        """What :func:`~seq2seq.serve.served_model.load_translator` takes."""
        return list(self.folders) if len(self.folders) > 1 else self.folders[0]


def _pair(text: Any, where: str) -> tuple[str, str]:
    parts = text.strip().lower().split("-") if isinstance(text, str) else []
    if len(parts) != 2 or not all(parts):
        raise UserError(f"{where}: a direction is written src-tgt (en-de), got {text!r}")
    return parts[0], parts[1]


def plan_model(spec: ModelSpec, search: Mapping[str, Any] | None = None) -> PlannedModel:
    """Check ``spec`` without loading it.

    Args:
        spec: the model.
        search: search-option defaults for every model (the CLI's flags); the spec's own win.

    Raises:
        UserError: a missing folder, one that is neither a model directory nor an export
            folder, an engine it cannot be served with, a direction it does not translate,
            a search option that is unknown or invalid for it.
    """
    from seq2seq.config import load_config
    from seq2seq.data import LANGUAGES_FILE, libre_code, model_languages
    from seq2seq.decode import SearchOptions
    from seq2seq.serve.served_model import choose_engine

    for folder in spec.folders:
        if not folder.is_dir():
            raise UserError(f"{spec.where}: model folder {folder} does not exist")
        if not (folder / "config.yaml").is_file():
            raise UserError(
                f"{spec.where}: {folder} is not a model directory or an export folder "
                "(it has no config.yaml)"
            )
    engine, folders = choose_engine(list(spec.folders), spec.engine)
    cfg = load_config(folders[0] / "config.yaml")
    directions = tuple(cfg.data.directions)
    multilingual = bool(cfg.data.multilingual)
    aliases: tuple[tuple[str, str], ...] = ()
    if (folders[0] / LANGUAGES_FILE).is_file():
        # M2M100 / NLLB: any two of its languages, by their LibreTranslate codes
        codes = model_languages(folders[0])
        libre = [libre_code(c, codes) for c in codes]
        directions = tuple((a, b) for a in libre for b in libre if a != b)
        multilingual = True
        aliases = tuple((c, x) for c, x in zip(codes, libre) if c.lower() != x)
    if not directions:
        raise UserError(f"{folders[0] / 'config.yaml'}: the model names no language direction")
    if spec.directions is not None:
        missing = [d for d in spec.directions if d not in directions]
        if missing:
            have = ", ".join(f"{s}-{t}" for s, t in directions)
            raise UserError(
                f"{spec.where}: the model does not translate "
                f"{', '.join(f'{s}-{t}' for s, t in missing)} (it translates {have})"
            )
        directions = tuple(dict.fromkeys(spec.directions))
    merged = {k: v for k, v in {**(search or {}), **spec.search}.items() if v is not None}
    try:
        SearchOptions.from_config(cfg.decoding, **merged)
    except TypeError:
        names = sorted(f.name for f in dataclasses.fields(SearchOptions))
        unknown = sorted(set(merged) - set(names))
        raise UserError(
            f"{spec.where}: unknown search option(s) {', '.join(unknown)} (valid: "
            f"{', '.join(names)})"
        ) from None
    except UserError as e:
        raise UserError(f"{spec.where}: {e}") from None
    name = spec.name or "+".join(f.resolve().name for f in spec.folders)
    return PlannedModel(
        name=name,
        engine=engine,
        folders=tuple(folders),
        directions=directions,
        multilingual=multilingual,
        search=merged,
        aliases=aliases,
        preload=spec.preload,
    )


def read_models_file(path: str | Path) -> list[ModelSpec]:
    """The models of a ``--models`` file (the module docstring shows one).

    Raises:
        UserError: a file that is missing, not YAML, or not of that shape (the file, the
            model's number and the key named).
    """
    from seq2seq.config import read_yaml

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--models: {path} does not exist")
    data = read_yaml(path)
    if not isinstance(data, dict) or set(data) != {"models"}:
        raise UserError(f"{path}: the file is one mapping with one key, models: (a list)")
    models = data["models"]
    if not isinstance(models, list) or not models:
        raise UserError(f"{path}: models: is a non-empty list of models")
    specs = []
    for i, entry in enumerate(models, 1):
        where = f"{path}, model {i}"
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict):
            raise UserError(f"{where}: a model is a mapping (path: ..., engine: ...)")
        unknown = sorted(set(entry) - set(_FILE_KEYS))
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_FILE_KEYS)})")
        specs.append(_spec_of(entry, path.parent, where))
    return specs


def _spec_of(entry: dict, base: Path, where: str) -> ModelSpec:
    raw = entry.get("path")
    paths = raw if isinstance(raw, list) else [raw]
    if not paths or not all(isinstance(p, str) and p.strip() for p in paths):
        raise UserError(f"{where}: path: is a folder (or a list of model directories)")
    name, engine = entry.get("name"), entry.get("engine")
    if name is not None and (not isinstance(name, str) or not name.strip() or "/" in name):
        raise UserError(f"{where}: name: is a non-empty text without '/'")
    if engine is not None and engine not in _ENGINES:
        raise UserError(f"{where}: engine: is one of {', '.join(_ENGINES)}, got {engine!r}")
    directions = entry.get("directions")
    if directions is not None:
        if not isinstance(directions, list) or not directions:
            raise UserError(f"{where}: directions: is a non-empty list (en-de, de-en)")
        directions = tuple(_pair(d, where) for d in directions)
    decoding = entry.get("decoding", {})
    if not isinstance(decoding, dict):
        raise UserError(f"{where}: decoding: is a mapping of search options (beam_size: 4)")
    preload = entry.get("preload")
    if preload is not None and not isinstance(preload, bool):
        raise UserError(f"{where}: preload: is true or false")
    return ModelSpec(
        folders=tuple(base / p for p in paths),
        name=name,
        engine=engine,
        directions=directions,
        search=dict(decoding),
        preload=preload,
        where=where,
    )


def distinct_names(
    specs: Sequence[ModelSpec], models: Sequence[PlannedModel]
) -> list[PlannedModel]:
    """``models`` with the default names that collide (two ``.../averaged`` folders) made
    ``parent-folder``; a name given in a models file stays."""
    counts: dict[str, int] = {}
    for m in models:
        counts[m.name] = counts.get(m.name, 0) + 1
    out = []
    for spec, m in zip(specs, models):
        if spec.name is None and counts[m.name] > 1:
            m = dataclasses.replace(
                m,
                name="+".join(
                    f"{f.resolve().parent.name}-{f.resolve().name}" for f in spec.folders
                ),
            )
        out.append(m)
    return out


def check_names(models: Sequence[PlannedModel]) -> None:
    """UserError when two models have the same name (name one of them in a models file)."""
    seen: set[str] = set()
    for m in models:
        if m.name in seen:
            raise UserError(
                f"two models are named {m.name!r}; give them names in a models file (name:)"
            )
        seen.add(m.name)

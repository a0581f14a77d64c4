"""Reading and writing experiment configs: YAML load, ``key.sub=value`` overrides, dump, and
the comparisons that resume and fine-tuning need.

A YAML file names only the keys it changes; overrides from the command line are applied on
top. Unknown keys and wrong types are :class:`~seq2seq.config.errors.ConfigError` with the
key, the file and (for typos) the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from seq2seq.config.errors import ConfigError, InvalidValue
from seq2seq.config.schema import ExperimentConfig

__all__ = [
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "load_config",
    "model_data_changes",
    "read_yaml",
]


# ---------------------------------------------------------------------------------------------
# YAML <-> dataclasses


def _all_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        keys.append(name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys.extend(_all_keys(hints[f.name], name + "."))
    return keys


def _unknown_key(key: str, source: str) -> ConfigError:
    valid = _all_keys(ExperimentConfig)
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not near:  # compare the last part alone ("model.dropot" vs "dropout")
        leaf = key.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in valid}
        leaf_near = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)
        near = [by_leaf[leaf_near[0]]] if leaf_near else []
    hint = f"; did you mean {near[0]}?" if near else ""
    shown = key if key.isprintable() else repr(key)  # a key with a newline: still one line
    return ConfigError(f"unknown key {shown} in {source}{hint}")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _wrong(key: str, source: str, text: str) -> ConfigError:
    """A value of the wrong type or shape: ``KEY in SOURCE TEXT``, with its key and text."""
    return ConfigError(f"{key} in {source} {text}", key=key, text=text)


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert where lossless (int -> float)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, source)
            except ConfigError as e:
                errors.append(e)
        raise _wrong(key, source, f"must be {_type_name(tp)}, got {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _wrong(key, source, f"must be a list ({_type_name(tp)}), got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], key, source) for v in value)
        if len(value) != len(args):
            raise _wrong(key, source, f"must have {len(args)} items, got {len(value)}")
        return tuple(_coerce(v, a, key, source) for v, a in zip(value, args))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 3e-4 (no dot) as a string
    elif tp is str:
        if isinstance(value, str):
            return value
    raise _wrong(key, source, f"must be {_type_name(tp)}, got {value!r}")


def _build(cls: type, data: Any, prefix: str, source: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = prefix.rstrip(".") or "the top level"
        raise ConfigError(f"{where} in {source} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = prefix + str(key)
        if key not in names:
            raise _unknown_key(full, source)
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, full + ".", source)
        else:
            kwargs[key] = _coerce(value, tp, full, source)
    return cls(**kwargs)


def config_from_dict(data: dict, source: str = "<dict>") -> ExperimentConfig:
    """Build an :class:`ExperimentConfig` from nested dicts; ``source`` names them in errors."""
    return _build(ExperimentConfig, data, "", source)


def config_to_dict(cfg: Any) -> dict:
    """Nested plain dicts (tuples become lists) of a config, every key included."""
    out = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            value = config_to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.second = key, first, second


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (PyYAML keeps the
    last one silently: a second ``model:`` section would replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged keys may be overridden, as YAML says
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # PyYAML reports an unhashable key itself
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> dict:
    """A YAML file's data, read strictly (duplicate keys refused); ``ConfigError`` names the
    file and line of what is wrong."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        loader = _StrictLoader(text)  # a SafeLoader that refuses duplicate keys
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except _DuplicateKey as e:
        key = e.key if not isinstance(e.key, str) or e.key.isprintable() else repr(e.key)
        raise ConfigError(
            f"{path}:{e.second}: duplicate key {key} (first given at line {e.first}); "
            "give each key once"
        ) from None
    except PermissionError:
        raise ConfigError(f"config file {path} cannot be read: permission denied") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not valid UTF-8 (byte {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}{where}: {problem}") from None
    except (ValueError, RecursionError) as e:  # PyYAML: a bad date or !!float, deep nesting
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise ConfigError(f"{path}: invalid YAML value ({reason})") from None
    return data or {}


def _field_type(key: str) -> Any:
    """The annotation of a dotted key, or None when the key does not exist."""
    cls: Any = ExperimentConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return None
        cls = hints[part]
    return cls


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.sub=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if _field_type(key) in (str, str | None) and raw.strip().lower() not in ("null", "~"):
        return key, raw  # a string field takes the text as written (YAML would read 1:00 as 60)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, RecursionError):  # PyYAML raises all three
        value = raw
    return key, value


def _validated(cfg: ExperimentConfig, source: str, overridden: set[str]) -> ExperimentConfig:
    """``cfg`` once every section is valid; an :class:`InvalidValue` names where its key came
    from (the command line for an override, else ``source``)."""
    try:
        cfg.validate()
    except InvalidValue as e:
        raise e.at("the command line" if e.key in overridden else source) from None
    return cfg


def apply_overrides(cfg: ExperimentConfig, overrides: list[str]) -> ExperimentConfig:
    """Return ``cfg`` with ``key.sub=value`` overrides applied (values parsed as YAML), and
    the result validated (:meth:`ExperimentConfig.validate`).

    Raises:
        ConfigError: an unknown key, a wrong type, or a value that cannot work.
    """
    cfg, keys = _apply(cfg, overrides)
    return _validated(cfg, "the config", keys)


def _apply(cfg: ExperimentConfig, overrides: list[str]) -> tuple[ExperimentConfig, set[str]]:
    if not overrides:
        return cfg, set()
    keys: set[str] = set()
    data = config_to_dict(cfg)
    for item in overrides:
        key, value = _parse_override(item)
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                raise _unknown_key(key, "the command line")
            if i == len(parts) - 1:
                if isinstance(node[part], dict):
                    raise ConfigError(
                        f"{key} on the command line is a section; set one of its keys"
                    )
                node[part] = value
                keys.add(key)
            else:
                node = node[part]
    return config_from_dict(data, "the command line"), keys


def _diff(a: dict, b: dict, prefix: str, defaults: dict | None = None) -> list[str]:
    out = []
    defaults = defaults or {}
    for key in sorted(set(a) | set(b)):
        # A key the old config lacks is an option added since: its default is the behaviour
        # the old config had (new options default to what was done before them).
        va = a[key] if key in a else defaults.get(key)
        vb = b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _diff(va, vb, f"{prefix}{key}.", defaults.get(key))
        elif va != vb:
            out.append(f"{prefix}{key} ({va!r} -> {vb!r})")
    return out


def model_data_changes(old: ExperimentConfig | dict, new: ExperimentConfig | dict) -> list[str]:
    """The keys of the model and data sections that differ, as ``key (old -> new)``."""
    old = old if isinstance(old, dict) else config_to_dict(old)
    new = new if isinstance(new, dict) else config_to_dict(new)
    defaults = config_to_dict(ExperimentConfig())
    changes = []
    for section in ("model", "data"):
        changes += _diff(
            old.get(section, {}), new.get(section, {}), f"{section}.", defaults[section]
        )
    return changes


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load a YAML config (or the defaults when ``path`` is None), apply overrides, and
    validate the result (every section, :meth:`ExperimentConfig.validate`).

    Raises:
        ConfigError: a missing or unreadable file, invalid YAML, a duplicate key (the file and
            both lines named), an unknown key, a wrong type, or a value that cannot work (the
            key named, with the file or the command line it came from).
    """
    if path is None:
        cfg, source = ExperimentConfig(), "the defaults"
    else:
        path = Path(path)
        cfg, source = config_from_dict(read_yaml(path), str(path)), str(path)
    cfg, keys = _apply(cfg, overrides or [])
    return _validated(cfg, source, keys)


def dump_config(cfg: ExperimentConfig, path: str | Path | None = None) -> str:
    """The full resolved config as YAML text; also written to ``path`` when given."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text

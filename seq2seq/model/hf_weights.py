"""A Hugging Face folder's weights, read one tensor at a time (for the converters).

``model.safetensors`` or ``pytorch_model.bin``, or their shards listed by an ``.index.json``
(``save_pretrained(max_shard_size=...)``); safetensors first. Nothing is read until a tensor is
asked for, and a tensor is read anew each time (never kept), so a converter that turns one
tensor into the next holds one at a time: converting a 2.4 GB model needs about its largest
tensor twice, not the model twice. safetensors files are read with
:class:`~seq2seq.model.tensor_files.SafetensorsReader` (no memory map); a ``.bin`` file only
through ``torch.load(weights_only=True, mmap=True)``, which runs no pickled code and maps the
file rather than reading it (its pages count as the process's memory once touched).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from seq2seq.core import UserError
from seq2seq.model.tensor_files import SafetensorsReader

__all__ = ["PICKLE_FILE", "SAFETENSORS_FILE", "HFWeights", "read_hf_weights", "read_json"]

SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"


def read_json(path: Path) -> dict:
    """A folder's JSON file (config, index, tokenizer config), which must hold an object.

    Raises:
        UserError: not readable, not JSON, or not an object, naming the file.
    """
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


class _Pickled:
    """A ``.bin`` file's tensors, memory-mapped by ``torch.load``."""

    def __init__(self, path: Path) -> None:
        try:
            tensors = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # noqa: BLE001 (an unpickling error of any kind is the same)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{path} cannot be read safely ({first})") from None
        if not isinstance(tensors, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()
        ):
            raise UserError(f"{path} does not hold a state dict")
        self.tensors = tensors
        self.shapes = {k: tuple(v.shape) for k, v in tensors.items()}

    def read(self, name: str) -> torch.Tensor:
        return self.tensors[name]


class _Safe:
    """A safetensors file's tensors, read on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with SafetensorsReader(path) as f:
                self.shapes = {k: info.shape for k, info in f.infos.items()}
        except (OSError, ValueError) as e:
            raise UserError(f"{path} is not a safetensors file ({e})") from None

    def read(self, name: str) -> torch.Tensor:
        try:
            with SafetensorsReader(self.path) as f:
                return f.read(name)
        except (OSError, ValueError) as e:
            raise UserError(f"{self.path} cannot be read ({e})") from None


def _open(path: Path) -> _Safe | _Pickled:
    return _Safe(path) if path.suffix == ".safetensors" else _Pickled(path)


class HFWeights(Mapping[str, torch.Tensor]):
    """The tensors of a folder's weights files, by name; each read when it is looked up.

    Attributes:
        path: the weights file, or the shard index (what messages name).
        shapes: every tensor's shape, from the headers (nothing read).
    """

    def __init__(self, path: Path, files: dict[str, _Safe | _Pickled]) -> None:
        self.path = path
        self._where = files  # tensor name -> the file that holds it
        self.shapes = {name: f.shapes[name] for name, f in files.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._where[name].read(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _sharded(index: Path) -> HFWeights:
    """The tensors of a sharded checkpoint: ``index``'s ``weight_map`` names each one's file."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index} has no weight_map")
    names = sorted(set(weight_map.values()), key=str)
    for name in names:
        if not isinstance(name, str) or Path(name).name != name:
            raise UserError(f"{index}: shard {name!r} is not a file name in {index.parent}")
        if not (index.parent / name).is_file():
            raise UserError(f"{index.parent / name} not found: {index.name} lists it")
    shards = {name: _open(index.parent / name) for name in names}
    where = {}
    for key, name in weight_map.items():
        if key not in shards[name].shapes:
            raise UserError(f"{index.parent / name}: weight {key} is missing")
        where[key] = shards[name]
    return HFWeights(index, where)


def read_hf_weights(hf_dir: Path) -> HFWeights:
    """The folder's tensors, read lazily and without running pickled code: one file, or shards
    that an ``.index.json`` lists; safetensors first.

    Raises:
        UserError: no weights file, an unreadable one, or an index naming a file outside the
            folder or a missing one.
    """
    for name in (SAFETENSORS_FILE, PICKLE_FILE):
        path = hf_dir / name
        if path.is_file():
            f = _open(path)
            return HFWeights(path, {k: f for k in f.shapes})
        index = hf_dir / f"{name}.index.json"
        if index.is_file():
            return _sharded(index)
    raise UserError(
        f"no weights in {hf_dir} (expected {SAFETENSORS_FILE}, {PICKLE_FILE} or a sharded "
        f"{SAFETENSORS_FILE}.index.json)"
    )

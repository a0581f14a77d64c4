"""safetensors files read and written one tensor at a time, so that no second copy is made.

A model of NLLB-600M's shape is 2.4 GB of float32. ``safetensors.torch.load_file`` returns
every tensor at once, and ``safe_open`` maps the whole file, whose pages stay in the process's
resident memory once touched: copying such a file into a model built beforehand costs the
model plus the file. :class:`SafetensorsReader` reads each tensor with ``readinto`` straight
into the tensor it fills (a parameter of the model, when the dtypes agree), through the page
cache, which is not the process's memory. :func:`write_safetensors` writes a file from a
layout (names, dtypes, shapes) and a function that makes each tensor when its turn comes, so
a converter holds one converted tensor at a time.

The bytes written are the ones ``safetensors.torch.save`` writes (tensors ordered by dtype
alignment, largest first, then by name), with the header as canonical JSON (sorted keys, no
spaces, padded with spaces to a multiple of 8 bytes): the same tensors give the same bytes,
and so the same sha256 in a model directory's manifest.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, NamedTuple

import torch

__all__ = ["SafetensorsReader", "TensorInfo", "layout_of", "write_safetensors"]

# safetensors' dtype names, with their rank in its Dtype enum (the write order sorts by it)
_DTYPES: dict[str, tuple[torch.dtype, int]] = {
    "BOOL": (torch.bool, 0),
    "U8": (torch.uint8, 4),
    "I8": (torch.int8, 5),
    "I16": (torch.int16, 9),
    "F16": (torch.float16, 11),
    "BF16": (torch.bfloat16, 12),
    "I32": (torch.int32, 13),
    "F32": (torch.float32, 15),
    "F64": (torch.float64, 17),
    "I64": (torch.int64, 18),
}
_NAMES = {dtype: name for name, (dtype, _) in _DTYPES.items()}
_MAX_HEADER = 100 << 20  # safetensors' own limit on the header's size


class TensorInfo(NamedTuple):
    """One tensor of a safetensors file: its dtype name (``F32``), shape, and byte range."""

    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute offsets in the file
    end: int

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`dtype`."""
        return _DTYPES[self.dtype][0]


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor (no copy)."""
    flat = (
        tensor.reshape(-1).view(torch.uint8)
        if tensor.numel()
        else torch.empty(0, dtype=torch.uint8)
    )
    return memoryview(flat.numpy()).cast("B")


class SafetensorsReader:
    """An open safetensors file whose tensors are read one at a time (a context manager).

    Raises:
        ValueError: a file that is not a well-formed safetensors file (the message says what);
            OSError: a file that cannot be read.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        try:
            self.infos, self.metadata = self._parse()
        except BaseException:
            self._file.close()
            raise

    def _parse(self) -> tuple[dict[str, TensorInfo], dict[str, str]]:
        size = os.fstat(self._file.fileno()).st_size
        head = self._file.read(8)
        if len(head) < 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > min(_MAX_HEADER, size - 8):
            raise ValueError(f"header length {length} does not fit the file")
        try:
            header = json.loads(self._file.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        start = 8 + length
        metadata = header.pop("__metadata__", None) or {}
        infos: dict[str, TensorInfo] = {}
        for name, entry in header.items():
            try:
                dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            except (TypeError, KeyError, ValueError):
                raise ValueError(f"tensor {name!r} has no dtype, shape and data_offsets") from None
            if dtype not in _DTYPES:
                raise ValueError(f"tensor {name!r} has dtype {dtype!r}, which is not read here")
            ints = [begin, end, *shape] if isinstance(shape, list) else None
            if ints is None or not all(type(x) is int and x >= 0 for x in ints):
                raise ValueError(f"tensor {name!r} has a malformed shape or data_offsets")
            numel = 1
            for n in shape:
                numel *= n
            nbytes = numel * _DTYPES[dtype][0].itemsize
            if end - begin != nbytes or start + end > size:
                raise ValueError(
                    f"tensor {name!r}: its data_offsets do not fit its shape or the file"
                )
            infos[name] = TensorInfo(dtype, tuple(shape), start + begin, start + end)
        return infos, metadata

    def keys(self) -> list[str]:
        """The tensors' names, in the header's order."""
        return list(self.infos)

    def read(self, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Tensor ``name``, read into ``out`` when it is a contiguous CPU tensor of the same
        dtype and number of elements (then ``out`` is returned), else into a new tensor.

        Raises:
            KeyError: no such tensor; ValueError: the file ends early.
        """
        info = self.infos[name]
        dtype = info.torch_dtype
        if (
            out is None
            or out.dtype != dtype
            or out.device.type != "cpu"
            or not out.is_contiguous()
            or out.numel() != (info.end - info.begin) // dtype.itemsize
        ):
            out = torch.empty(info.shape, dtype=dtype)
        view = _as_bytes(out)
        self._file.seek(info.begin)
        done = 0
        while done < len(view):
            n = self._file.readinto(view[done:])
            if not n:
                raise ValueError(f"tensor {name!r}: the file ends early")
            done += n
        return out

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> SafetensorsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Layout = dict[str, tuple[torch.dtype, tuple[int, ...]]]
"""Tensor name -> (dtype, shape): what a file will hold, before any tensor exists."""


def layout_of(tensors: Mapping[str, torch.Tensor]) -> Layout:
    """The layout of tensors that exist (on any device, the meta device included)."""
    return {name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}


def write_safetensors(
    f: BinaryIO | io.BytesIO,
    layout: Layout,
    make: Callable[[str], torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a safetensors file to ``f``, making each tensor only when it is written.

    Args:
        f: a binary file open for writing (or a ``BytesIO``).
        layout: every tensor's name, dtype and shape (:func:`layout_of`).
        make: returns the tensor of a name (any dtype: it is cast to the layout's); called
            once per name, in the order written, and its result is dropped once written.
        metadata: string pairs for the header's ``__metadata__`` (None: none).

    Raises:
        ValueError: a made tensor whose shape is not the layout's, or a dtype not written here.
    """
    for name, (dtype, _) in layout.items():
        if dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {dtype} is not written to safetensors here")
    order = sorted(layout, key=lambda n: (-_DTYPES[_NAMES[layout[n][0]]][1], n))
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        dtype, shape = layout[name]
        numel = 1
        for n in shape:
            numel *= n
        size = numel * dtype.itemsize
        header[name] = {
            "dtype": _NAMES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    text += b" " * (-len(text) % 8)
    f.write(struct.pack("<Q", len(text)) + text)
    for name in order:
        dtype, shape = layout[name]
        tensor = make(name)
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, the layout says {shape}")
        tensor = tensor.detach().to("cpu", dtype).contiguous()
        f.write(_as_bytes(tensor))
        del tensor

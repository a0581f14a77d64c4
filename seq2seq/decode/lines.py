"""Strict UTF-8 text lines from a file or standard input, available as soon as they arrive
(``seq2seq translate`` translates typed lines one by one), and whole files of lines.
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from seq2seq.core import UserError

__all__ = ["LineReader", "open_lines", "read_lines"]


class LineReader:
    """Strict UTF-8 lines from a byte stream, available as soon as they arrive.

    Lines end at ``b"\\n"`` only (a trailing ``b"\\r"`` is dropped; no other character splits
    a line); a last line without a newline counts. :meth:`read_chunk` blocks until at least one
    line (or the end) is there, then takes whatever more lines are already readable, up to
    ``max_lines``: typed lines are translated one by one, a file or pipe in big chunks.

    Args:
        stream: a binary stream (``sys.stdin.buffer``, ``open(path, "rb")``).
        name: shown in errors (``<stdin>`` or the path).
    """

    def __init__(self, stream: BinaryIO, *, name: str) -> None:
        self.stream = stream
        self.name = name
        self.line_no = 0  # lines returned so far
        self._buf = b""
        self._eof = False
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            self._fd = None

    def _ready(self) -> bool:
        try:
            return bool(select.select([self._fd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _fill(self) -> None:
        data = os.read(self._fd, 1 << 16) if self._fd is not None else self.stream.readline()
        if data:
            self._buf += data
        else:
            self._eof = True

    def _decode(self, raw: bytes) -> str:
        self.line_no += 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(
                f"{self.name}:{self.line_no}: invalid UTF-8 (byte {e.start + 1} of the line)"
            ) from None
        if self.line_no == 1 and text.startswith("\ufeff"):
            text = text[1:]  # a byte-order mark is not part of the sentence
        return text

    def read_chunk(self, max_lines: int) -> list[str]:
        """The next 1..max_lines lines; [] at the end of the stream."""
        lines: list[str] = []
        while len(lines) < max_lines:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                lines.append(self._decode(raw))
                continue
            if self._eof:
                if self._buf:
                    raw, self._buf = self._buf, b""
                    lines.append(self._decode(raw))
                break
            if lines and (self._fd is None or not self._ready()):
                break  # translate what we have rather than wait for more
            self._fill()
        return lines

    def __iter__(self) -> Iterator[str]:
        while chunk := self.read_chunk(1024):
            yield from chunk


def open_lines(path: str | Path) -> LineReader:
    """A :class:`LineReader` over a file, or standard input for ``-``.

    Raises:
        UserError: the file does not exist or cannot be read.
    """
    import sys

    if str(path) == "-":
        return LineReader(sys.stdin.buffer, name="<stdin>")
    try:
        return LineReader(open(path, "rb"), name=str(path))  # noqa: SIM115 (lives with the reader)
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def read_lines(path: str | Path) -> list[str]:
    """Every line of a text file (strict UTF-8, split on newlines only, see :class:`LineReader`).

    Raises:
        UserError: a missing file, or invalid UTF-8 (naming the file and line).
    """
    reader = open_lines(path)
    try:
        return list(reader)
    finally:
        reader.stream.close()

"""``.txt``: every non-empty line is a run (its sentences cut by the translator); the output
has one line per input line, empty lines where they were and each line's indentation kept
(``\\r\\n`` and ``\\r`` are read as ``\\n``; trailing whitespace is dropped).

:func:`decode` is every text format's check that the bytes are text: UTF-8 (a BOM is dropped)
without NUL bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import RunTranslation

__all__ = ["TextDocument", "decode", "read"]


def decode(data: bytes, name: str) -> str:
    """``data`` as text; UserError for bytes that are not UTF-8 text."""
    if b"\0" in data[:65_536]:
        raise UserError(f"{name}: not a text file (it holds NUL bytes: a binary file?)")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{name} is not valid UTF-8 (byte {e.start + 1}: 0x{data[e.start]:02x})"
        ) from None


@dataclass
class TextDocument:
    """Lines of text, one run per non-empty line."""

    lines: list[str]

    @property
    def texts(self) -> list[str]:
        return [line.strip() for line in self.lines if line.strip()]

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return [()] * len(self.texts)

    def write(self, translations: list[RunTranslation]) -> bytes:
        out, k = [], 0
        for line in self.lines:
            if not line.strip():
                out.append("")
                continue
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + translations[k].text)
            k += 1
        return "\n".join(out).encode("utf-8")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> TextDocument:
    text = decode(data, name)
    return TextDocument(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))

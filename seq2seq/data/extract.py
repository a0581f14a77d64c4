"""Reading a corpus' parts: archive members, gzip, and the formats their sentences come in.

A :class:`~seq2seq.data.corpus.Part` is a file, or a member of a ``.tgz``/``.tar``/``.zip``
archive, gzip-compressed or not (:func:`open_member`); :func:`write_part` turns its lines into
one sentence a line the way the reference tools read its format (plain text, sacreBLEU's
WMT/IWSLT SGML-XML, prepare-iwslt14.sh's ``train.tags`` and ``<seg id>`` filters).
"""

from __future__ import annotations

import contextlib
import gzip
import re
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from seq2seq.core import READ_CHUNK, UserError
from seq2seq.data.download import NotAvailableError

__all__ = ["open_member", "read_lines", "write_part"]


@contextlib.contextmanager
def open_member(path: Path, member: str | None) -> Iterator[BinaryIO]:
    """The bytes of ``path`` (or of its archive ``member``), gunzipped when they are gzip."""
    with contextlib.ExitStack() as stack:
        if member is None:
            raw: BinaryIO = stack.enter_context(open(path, "rb"))
        elif zipfile.is_zipfile(path):
            archive = stack.enter_context(zipfile.ZipFile(path))
            try:
                raw = stack.enter_context(archive.open(member))
            except KeyError:
                raise NotAvailableError(f"{path} has no member {member}") from None
        else:
            try:
                tar = stack.enter_context(tarfile.open(path, "r:*"))
                extracted = tar.extractfile(member)
            except KeyError:
                raise NotAvailableError(f"{path} has no member {member}") from None
            except tarfile.TarError as e:
                raise UserError(f"{path} is not a readable archive ({e})") from None
            if extracted is None:
                raise NotAvailableError(f"{path}: {member} is not a regular file")
            raw = stack.enter_context(extracted)
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw))
        yield raw


# sacreBLEU's FakeSGMLDataset._convert_format and Dataset._clean, on decoded text
_SACREBLEU_SEG = re.compile(r"<seg.*?>(.*)</seg>.*?")
_SACREBLEU_SPACE = re.compile(r"\s+")
# prepare-iwslt14.sh, train: grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>' |
# sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g'
_IWSLT_DROP = (b"<url>", b"<talkid>", b"<keywords>")
_IWSLT_STRIP = re.compile(rb"</?(?:title|description)>")
# prepare-iwslt14.sh, valid/test: grep '<seg id' | sed -e 's/<seg id="[0-9]*">\s*//g' |
# sed -e 's/\s*<\/seg>\s*//g'
_FAIRSEQ_SEG_OPEN = re.compile(rb'<seg id="[0-9]*">[ \t\n\r\f\v]*')
_FAIRSEQ_SEG_CLOSE = re.compile(rb"[ \t\n\r\f\v]*</seg>[ \t\n\r\f\v]*")


def _decode(raw: bytes, where: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{where}:{lineno}: invalid UTF-8 (byte {e.start + 1} of the line)"
        ) from None


def write_part(src: BinaryIO, fmt: str, out: BinaryIO, where: str = "") -> int:
    """Copy one part's sentences to ``out``, one a line.

    Args:
        src: The part's bytes (:func:`open_member`).
        fmt: Its :attr:`~seq2seq.data.corpus.Part.format`.
        out: Where the sentences go.
        where: The part's name in an invalid-UTF-8 error.

    Returns:
        The number of lines written.
    """
    lines = 0
    if fmt == "text":
        last = b"\n"
        while chunk := src.read(READ_CHUNK):
            out.write(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
        if last != b"\n":  # a missing final newline must not glue two parts together
            out.write(b"\n")
            lines += 1
        return lines
    for lineno, raw in enumerate(src, 1):  # binary iteration splits on b"\n" only
        if fmt == "sgm":
            # sacreBLEU: `if line.startswith("<seg "): line = _clean(re.sub(...))`
            if not raw.startswith(b"<seg "):
                continue
            text = _SACREBLEU_SEG.sub(r"\1", _decode(raw, where, lineno))
            line = _SACREBLEU_SPACE.sub(" ", text.strip()).encode("utf-8")
        elif fmt == "fairseq_seg":
            if b"<seg id" not in raw:
                continue
            line = _FAIRSEQ_SEG_CLOSE.sub(b"", _FAIRSEQ_SEG_OPEN.sub(b"", raw.rstrip(b"\n")))
        else:  # iwslt_tags
            line = raw.rstrip(b"\n")
            if any(tag in line for tag in _IWSLT_DROP):
                continue
            line = _IWSLT_STRIP.sub(b"", line)
        out.write(line + b"\n")
        lines += 1
    return lines


def read_lines(path: Path) -> Iterator[str]:
    """The lines of an extracted file, decoded, without their ``\\n``."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            yield _decode(raw[:-1] if raw.endswith(b"\n") else raw, str(path), lineno)

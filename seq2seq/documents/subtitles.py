"""``.srt`` (SubRip) and ``.vtt`` (WebVTT) subtitles: each cue's text is translated as one run
(its lines joined) and put back over the same number of lines; cue numbers, identifiers,
timings, cue settings, ``NOTE``/``STYLE``/``REGION`` blocks and the line endings keep their
bytes, and tags inside a cue (``<i>``, ``<b>``, ``<u>``, SubRip's ``<font color>``) stay around the
words they covered and WebVTT's voice, class and timestamp tags (``<v Name>``) are kept as
placeholders (:mod:`seq2seq.documents.strings`).

Parsed here, line by line, rather than with pysrt or webvtt-py: both rewrite what they read
(timestamps, numbering, blank lines, notes), and both accept broken timings that a translation
should refuse. A cue whose timing line does not parse, or ends before it starts, is a
UserError naming the cue and its line. The tests read every output with pysrt and webvtt-py.
"""

from __future__ import annotations

import re

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import RunTranslation
from seq2seq.documents.strings import Strings, rewrap
from seq2seq.documents.text import decode

__all__ = ["read"]

_SRT_TIME = r"(\d{1,3}):([0-5]\d):([0-5]\d)[,.](\d{3})"
_VTT_TIME = r"(?:(\d{1,3}):)?([0-5]\d):([0-5]\d)\.(\d{3})"


def _ms(groups) -> int:
    h, m, s, ms = (int(g or 0) for g in groups)
    return ((h * 60 + m) * 60 + s) * 1000 + ms


class Subtitles:
    """A subtitle file: its lines, and per cue the line numbers of its text."""

    def __init__(self, text: str, *, name: str, vtt: bool, inline: bool) -> None:
        self.newline = "\r\n" if "\r\n" in text else "\n"
        self.lines = text.replace("\r\n", "\n").split("\n")
        self.cues: list[list[int]] = []
        clock = _VTT_TIME if vtt else _SRT_TIME
        timing = re.compile(rf"\s*{clock}\s+-->\s+{clock}(\s.*)?")
        if vtt and not re.match(r"WEBVTT(\s|$)", self.lines[0]):
            raise UserError(f"{name}: not a WebVTT file (its first line is not 'WEBVTT')")
        i, n = (1 if vtt else 0), len(self.lines)
        found = 0
        while i < n:
            if not self.lines[i].strip():
                i += 1
                continue
            block = i
            while i < n and self.lines[i].strip():
                i += 1
            head = self.lines[block:i]
            if vtt and re.match(r"(NOTE|STYLE|REGION)(\s|$)", head[0]):
                continue
            arrow = next((k for k, line in enumerate(head[:2]) if "-->" in line), None)
            where = f"{name}: cue {found + 1} (line {block + 1})"
            if arrow is None:
                raise UserError(f"{where}: no timing line ('start --> end')")
            if not vtt and (arrow != 1 or not head[0].strip().isdigit()):
                raise UserError(f"{where}: a SubRip cue is a number, then its timing line")
            m = timing.fullmatch(head[arrow])
            if m is None:
                raise UserError(f"{where}: broken timing {head[arrow].strip()!r}")
            if _ms(m.groups()[:4]) > _ms(m.groups()[4:8]):
                raise UserError(f"{where}: the cue ends before it starts")
            found += 1
            self.cues.append(list(range(block + arrow + 1, i)))
        if not found:
            raise UserError(f"{name}: no subtitle cues found")
        self.strings = Strings(
            [" ".join(self.lines[k].strip() for k in cue) for cue in self.cues],
            inline=inline,
            tags=frozenset({"i", "b", "u"} if vtt else {"i", "b", "u", "font"}),
        )

    @property
    def texts(self) -> list[str]:
        return self.strings.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.strings.boundaries

    def write(self, translations: list[RunTranslation]) -> bytes:
        lines = list(self.lines)
        for cue, text in zip(self.cues, self.strings.apply(translations)):
            if cue:
                for k, line in zip(cue, rewrap(text, len(cue))):
                    lines[k] = line
        return self.newline.join(lines).encode("utf-8")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> Subtitles:
    return Subtitles(
        decode(data, name), name=name, vtt=name.lower().endswith(".vtt"), inline=inline
    )

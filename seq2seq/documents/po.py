"""``.po`` (gettext), read and written with polib: every entry's ``msgstr`` becomes the
translation of its ``msgid`` (plural entries: ``msgstr[0]`` from ``msgid``, the other forms
from ``msgid_plural``). The header, obsolete entries, ``msgctxt``, comments, references, flags
and the order of entries stay as they were; placeholders (``{name}``, ``%s``, ``%(n)d``) and
tags (``<b>``) inside a string stay in the translation (:mod:`seq2seq.documents.strings`).
"""

from __future__ import annotations

import polib

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import RunTranslation
from seq2seq.documents.strings import ALL, Strings
from seq2seq.documents.text import decode

__all__ = ["read"]


class PoDocument:
    def __init__(self, text: str, *, name: str, inline: bool) -> None:
        try:
            self.po = polib.pofile(text, wrapwidth=78)
        except (OSError, ValueError) as e:
            raise UserError(f"{name}: not a valid PO file ({e})") from None
        self.entries = [e for e in self.po if e.msgid and not e.obsolete]
        if not self.entries and not self.po.metadata:
            raise UserError(f"{name}: not a PO file (no entries)")
        sources = []
        for e in self.entries:
            sources.append(e.msgid)
            if e.msgid_plural:
                sources.append(e.msgid_plural)
        self.strings = Strings(sources, inline=inline, tags=ALL)

    @property
    def texts(self) -> list[str]:
        return self.strings.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.strings.boundaries

    def write(self, translations: list[RunTranslation]) -> bytes:
        done = iter(self.strings.apply(translations))
        for e in self.entries:
            one = next(done)
            if e.msgid_plural:
                many = next(done)
                forms = sorted(e.msgstr_plural) or [0, 1]
                e.msgstr_plural = {k: one if k == 0 else many for k in forms}
            else:
                e.msgstr = one
        return str(self.po).encode("utf-8")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> PoDocument:
    return PoDocument(decode(data, name), name=name, inline=inline)

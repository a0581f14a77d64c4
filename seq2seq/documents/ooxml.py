"""What Word, PowerPoint and Excel files share: a zip of XML parts whose paragraphs hold runs
(:mod:`seq2seq.documents.runs`). Each format names its parts and its tags; only the parts with
text are parsed and written back, every other entry of the archive (images, styles, layouts,
metadata, relationships) keeps its bytes.

The zip + XML route rather than python-docx / python-pptx / openpyxl: those libraries rewrite
every part they load (and openpyxl drops images and charts it does not model), while a
translation only has to change the text of a few parts. The tests read every output back with
those libraries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from seq2seq.documents.base import Limits
from seq2seq.documents.runs import Group, Run, RunParagraphs
from seq2seq.documents.zipped import Archive, ZippedXml, parse_xml

__all__ = ["OoxmlDocument", "Tags"]


@dataclass(frozen=True)
class Tags:
    """The tags (Clark notation, ``{namespace}name``) of one format's paragraphs.

    Attributes:
        paragraphs: the tags of a paragraph (``w:p``).
        run: a run (``w:r``); its text sits in ``text`` children.
        text: a run's text element (``w:t``).
        groups: elements inside a paragraph that hold runs and move with them (hyperlinks).
        bare: a paragraph-level text element that is its own run (Excel's ``si/t``), or "".
        markers: a part is parsed only when it holds one of these byte strings (none: always;
            Excel's sheets hold text only as inline strings, which most have none of).
    """

    paragraphs: tuple[str, ...]
    run: str
    text: str
    groups: frozenset[str] = frozenset()
    bare: str = ""
    markers: tuple[bytes, ...] = ()


def _items(container, tags: Tags) -> list:
    items = []
    for child in container:
        if child.tag == tags.run:
            texts = [t for t in child if t.tag == tags.text]
            if texts:
                items.append(Run(child, texts))
        elif child.tag in tags.groups:
            sub = _items(child, tags)
            if sub:
                items.append(Group(child, sub))
        elif tags.bare and child.tag == tags.bare:
            items.append(Run(child, [child]))
    return items


class OoxmlDocument(ZippedXml):
    """The paragraphs of the parts ``parts`` (names matching the pattern) of an archive."""

    def __init__(
        self,
        data: bytes,
        *,
        name: str,
        kind: str,
        required: str,
        parts: str,
        tags: Tags,
        inline: bool,
        limits: Limits,
    ) -> None:
        self.archive = Archive.read(data, name=name, limits=limits, kind=kind)
        self.archive.require(required, kind)
        pattern = re.compile(parts)
        self.trees = {}
        paragraphs = []
        for info in self.archive.infos:
            blob = self.archive.data[info.filename]
            if not pattern.fullmatch(info.filename):
                continue
            if tags.markers and not any(m in blob for m in tags.markers):
                continue
            tree = parse_xml(blob, where=f"{name}:{info.filename}")
            found = [_items(p, tags) for p in tree.iter(*tags.paragraphs)]
            if any(found):  # a part without text is not rewritten
                self.trees[info.filename] = tree
                paragraphs.extend(found)
        self.runs = RunParagraphs(paragraphs, inline=inline)

"""``.xlf`` / ``.xliff`` (XLIFF 1.2 and 2.x): every translation unit's ``<source>`` is
translated into its ``<target>`` (made after the source when there is none; an existing
target's content is replaced, its attributes kept). Inline codes stay with their words:
``<g>``, ``<mrk>``, ``<pc>`` are elements around the words they covered, ``<x/>``, ``<ph>``,
``<bpt>``, ``<ept>``, ``<it>``, ``<sc/>``, ``<ec/>`` and the like are kept as points
(:mod:`seq2seq.documents.html`). A unit with ``translate="no"`` is copied as it is.

Parsed with lxml behind the hardened check of :func:`~seq2seq.documents.zipped.parse_xml`
rather than with translate-toolkit's XLIFF store: the store re-serializes the whole file and
flattens inline codes to placeables, while this keeps every element and attribute it does not
translate (notes, contexts, alt-trans, skeletons, metadata) as it was."""

from __future__ import annotations

import copy

from seq2seq.core import UserError
from seq2seq.documents.base import Limits
from seq2seq.documents.html import RunTranslation
from seq2seq.documents.projected import Projections
from seq2seq.documents.zipped import parse_xml, serialize_xml

__all__ = ["read"]

_INLINE = frozenset({"g", "mrk", "pc"})
_UNITS = frozenset({"trans-unit", "segment"})


def _local(el) -> str:
    return el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""


def _kind(el) -> str:
    if not isinstance(el.tag, str):
        return "other"
    name = _local(el)
    if name == "target":
        return "block"
    return "inline" if name in _INLINE else "whole"


def _translatable(el) -> bool:
    while el is not None:
        if el.get("translate") == "no":
            return False
        el = el.getparent()
    return True


class XliffDocument:
    def __init__(self, data: bytes, *, name: str, inline: bool) -> None:
        self.original = data
        self.tree = parse_xml(data, where=name)
        root = self.tree.getroot()
        if _local(root) != "xliff":
            raise UserError(f"{name}: not an XLIFF file (its root element is <{_local(root)}>)")
        self.runs = Projections()
        found = 0
        for unit in root.iter():
            if _local(unit) not in _UNITS:
                continue
            source = next((c for c in unit if _local(c) == "source"), None)
            if source is None:
                continue
            found += 1
            if not _translatable(unit) or not "".join(source.itertext()).strip():
                continue
            target = next((c for c in unit if _local(c) == "target"), None)
            content = copy.deepcopy(source)
            if target is None:
                target = content
                target.tag = source.tag[: len(source.tag) - len("source")] + "target"
                target.tail = source.tail
                source.addnext(target)
            else:
                for c in list(target):
                    target.remove(c)
                target.text = content.text
                for c in content:
                    target.append(c)
            self.runs.add(target, inline=inline, kind=_kind)
        if not found:
            raise UserError(f"{name}: no translation units (<trans-unit> or <segment>)")

    @property
    def texts(self) -> list[str]:
        return self.runs.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.runs.boundaries

    def write(self, translations: list[RunTranslation]) -> bytes:
        self.runs.apply(translations)
        return serialize_xml(self.tree, self.original)


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> XliffDocument:
    return XliffDocument(data, name=name, inline=inline)

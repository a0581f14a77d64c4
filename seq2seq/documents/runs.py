"""Paragraphs whose text sits in runs (OOXML: ``w:p``/``w:r``/``w:t`` in Word,
``a:p``/``a:r``/``a:t`` in PowerPoint, ``si``/``r``/``t`` in Excel), translated with the inline
projection of ``format: "html"`` (:class:`~seq2seq.documents.html.HtmlDocument`).

Each paragraph is mirrored as an HTML ``<p>`` in which every run is a ``<span>`` and every
group of runs (a Word hyperlink) an ``<a>``; the projection puts each span around the target
words aligned to its source words, and the words come back into the runs they landed in:

- every run keeps its element (its formatting: bold, italic, colour, the hyperlink around it)
  and gets the words of its span, so the paragraph keeps its number of runs;
- a word outside every span (aligned to nothing) joins the run before it at its level (or
  the one after it, at the start);
- runs and groups take the order of their spans in the translation (a reordering moves the
  formatting with the words); everything else in the paragraph (properties, bookmarks,
  drawings, fields) keeps its place;
- a paragraph of one run is translated as plain text (it needs no alignments);
- a run's text goes into its first text element; any other text element of that run is
  emptied (tabs and breaks stay where they were).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lxml.html

from seq2seq.documents.html import HtmlDocument, RunTranslation

__all__ = ["Group", "Run", "RunParagraphs"]


@dataclass(eq=False)
class Run:
    """A run: the element that moves (``el``) and the elements holding its text."""

    el: object
    texts: list
    source: str = ""

    def __post_init__(self) -> None:
        self.source = self.text

    @property
    def text(self) -> str:
        return "".join(t.text or "" for t in self.texts)


@dataclass(eq=False)
class Group:
    """Runs inside one element (a hyperlink) that moves with them."""

    el: object
    items: list = field(default_factory=list)


def _has_text(item) -> bool:
    if isinstance(item, Run):
        return any(c.isalpha() for c in item.text)
    return any(_has_text(i) for i in item.items)


class RunParagraphs:
    """Paragraphs of runs as one document of runs to translate.

    Args:
        paragraphs: per paragraph, its items (:class:`Run` and :class:`Group`, direct
            children of the paragraph element, in order).
        inline: translate a paragraph as a whole (formatting put back from alignments);
            False: each run on its own.
    """

    def __init__(self, paragraphs: list[list], *, inline: bool) -> None:
        self.items: list = []  # by data-k
        root = lxml.html.fromstring("<div></div>")
        self.paragraphs = []
        for items in paragraphs:
            if not any(_has_text(i) for i in items):
                continue
            p = lxml.html.Element("p")
            root.append(p)
            if len(items) == 1 and isinstance(items[0], Run):
                p.text = items[0].text  # one run: its text needs no alignment to go back
            else:
                for item in items:
                    p.append(self._mirror(item))
            self.paragraphs.append((p, items))
        self.html = HtmlDocument(root, inline=inline)

    def _mirror(self, item):
        k = str(len(self.items))
        self.items.append(item)
        if isinstance(item, Run):
            el = lxml.html.Element("span", {"data-k": k})
            el.text = item.text
            return el
        el = lxml.html.Element("a", {"data-k": k})
        for sub in item.items:
            el.append(self._mirror(sub))
        return el

    @property
    def texts(self) -> list[str]:
        return self.html.texts

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return self.html.boundaries

    def apply(self, translations: list[RunTranslation]) -> None:
        """Put the translations into the runs (the XML is changed in place)."""
        self.html.rebuild(translations)
        for p, items in self.paragraphs:
            if len(p):
                self._settle(p, items)
            else:
                _set_text(items[0], p.text or "")

    def _settle(self, container, items: list) -> None:
        """Give each run of ``container`` its words and the XML its projected order."""
        kids = list(container)
        slots: list[list[str]] = [[] for _ in kids]  # free text appended to each kid's run
        leads: list[list[str]] = [[] for _ in kids]  # free text put before each kid's run
        free = [container.text or ""] + [k.tail or "" for k in kids]
        for at, text in enumerate(free):
            if not text or not kids:
                continue
            # before kid `at` (0 = the container's own text): the previous run at this level,
            # else the next one, else into the neighbouring group
            before = self.items[int(kids[at - 1].get("data-k"))] if at > 0 else None
            after = self.items[int(kids[at].get("data-k"))] if at < len(kids) else None
            if (
                not text.strip()
                and before is not None
                and after is not None
                and not _last_run(before).source[-1:].isspace()
                and _first_run(after).source[:1].isspace()
            ):
                leads[at].append(text)  # the space was the next run's in the source
            elif at > 0 and kids[at - 1].tag == "span":
                slots[at - 1].append(text)
            elif at < len(kids) and kids[at].tag == "span":
                leads[at].append(text)
            elif at > 0:
                slots[at - 1].append(text)
            else:
                leads[at].append(text)
        ordered = []
        for kid, lead, slot in zip(kids, leads, slots):
            item = self.items[int(kid.get("data-k"))]
            ordered.append(item)
            if isinstance(item, Run):
                _set_text(item, "".join(lead) + (kid.text or "") + "".join(slot))
            else:
                self._settle(kid, item.items)
                first, last = _first_run(item), _last_run(item)
                if lead:
                    _set_text(first, "".join(lead) + first.text)
                if slot:
                    _set_text(last, last.text + "".join(slot))
        _reorder([i.el for i in items], [i.el for i in ordered])


def _first_run(item) -> Run:
    return item if isinstance(item, Run) else _first_run(item.items[0])


def _last_run(item) -> Run:
    return item if isinstance(item, Run) else _last_run(item.items[-1])


_XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


def _set_text(run: Run, text: str) -> None:
    first, *rest = run.texts
    first.text = text
    if text != text.strip() and first.tag.endswith("}t") and "wordprocessingml" in first.tag:
        first.set(_XML_SPACE, "preserve")
    for t in rest:
        t.text = ""


def _reorder(old: list, new: list) -> None:
    """Put the elements ``new`` (a permutation of ``old``) into the slots ``old`` held."""
    if old == new:
        return
    parents = [(e.getparent(), e.getparent().index(e), e.tail) for e in old]
    for e in old:
        e.getparent().remove(e)
    for (parent, index, tail), e in sorted(zip(parents, new), key=lambda x: (id(x[0][0]), x[0][1])):
        parent.insert(index, e)
        e.tail = tail

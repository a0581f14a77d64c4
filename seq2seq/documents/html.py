"""``"format": "html"``: translate the text of an HTML document or fragment and keep its markup.

The markup is parsed with lxml (``lxml.html``, libxml2's HTML parser: it reads real-world HTML,
and entities come in as characters and go out escaped again). Nothing but text changes: every
element keeps its tag and attributes, comments stay, and the content of ``<script>``,
``<style>``, ``<noscript>``, ``<template>``, ``<textarea>``, ``<pre>``, ``<svg>``, ``<math>``,
``<iframe>``, ``<object>``, ``<head>`` (the title too) and of any element with
``translate="no"`` (or class ``notranslate``) is left as it is.

**Runs.** Text is translated a *run* at a time: the text of one block element (``<p>``,
``<li>``, ``<td>``, ...) up to its next block child, together with the inline elements inside it
(``<b>``, ``<a href>``, ``<span>``, ...), so that a sentence with inline markup is translated as
one sentence. A run's whitespace is collapsed (as a browser shows it), its leading and trailing
whitespace kept.

**Inline markup in the translation** (:meth:`HtmlDocument.apply`), from the word alignments of
:mod:`seq2seq.decode.alignments` (source word ``i`` - target word ``j``):

1. Each source word belongs to the innermost inline element holding its first character.
2. An inline element covers the target words aligned to its source words: from the first to
   the last of them (one contiguous span, so the element appears once, as in the source).
3. An element with no aligned word, and an element kept whole (``<br>``, ``<img>``, ``<code>``,
   ``<kbd>``, ``<var>``, ``<samp>``, or ``translate="no"``: its words are not sent to the model)
   becomes a point: right after the target word aligned to the last source word before it
   (the start of the run when there is none).
4. Spans are made to nest as in the source: a child is clipped to its parent's span; siblings
   are ordered by where their span starts in the translation (so markup follows a reordering)
   and a sibling that overlaps the previous one starts where that one ends.
5. The run is rebuilt from the target words joined by single spaces: text outside every span
   at its level, each element around its span; spaces at an element's edge stay outside it.

Without alignments (an engine that gives no attention: onnx), every text node is translated on
its own, as LibreTranslate does, so inline markup splits sentences.
"""

from __future__ import annotations

import bisect
import html as _html
import re
from dataclasses import dataclass, field

import lxml.html

__all__ = ["MAX_INLINE_ELEMENTS", "HtmlDocument", "HtmlLimitError", "RunTranslation", "html_kind"]

_SKIP = frozenset(
    "script style noscript template textarea pre svg math head title iframe object".split()
)
_INLINE = frozenset(
    "a abbr b bdi bdo big cite del dfn em font i ins label mark q s small span strike strong "
    "sub sup time tt u".split()
)
_WHOLE = frozenset("br wbr img code kbd samp var input".split())  # kept whole, as a point
_DOCUMENT = re.compile(r"\s*(<!doctype|<html|<\?xml)", re.IGNORECASE)
_WORD = re.compile(r"\S+")

MAX_INLINE_ELEMENTS = 1_000
"""The most inline elements (``<b>``, ``<a>``, ``<br>``, ...) one run (a paragraph) may hold;
a document with a larger run is refused (:class:`HtmlLimitError`). Reading and rebuilding a run
is linear in its elements; the bound keeps one request's work small all the same."""


class HtmlLimitError(ValueError):
    """A run holds more inline elements than :data:`MAX_INLINE_ELEMENTS`."""


def _tag(el) -> str | None:
    """An element's tag name, lowercase and without its namespace (None: a comment or PI)."""
    return el.tag.rsplit("}", 1)[-1].lower() if isinstance(el.tag, str) else None


def html_kind(el) -> str:
    """What an HTML element is to the projection: ``"block"``, ``"inline"``, ``"whole"`` (an
    inline point kept as it is), ``"space"`` (a point that separates words: ``<br>``),
    ``"skip"`` (left untranslated with its content) or ``"other"`` (a comment or PI).

    Another markup (ODF, XLIFF, XHTML) passes its own function of this shape to
    :class:`HtmlDocument`."""
    tag = _tag(el)
    if tag is None:
        return "other"
    untranslated = (
        tag in _SKIP
        or el.get("translate", "").lower() == "no"
        or "notranslate" in el.get("class", "").split()
    )
    if tag == "br":
        return "space"
    if tag in _WHOLE or (tag in _INLINE and untranslated):
        return "whole"
    if tag in _INLINE:
        return "inline"
    return "skip" if untranslated else "block"


@dataclass(frozen=True)
class RunTranslation:
    """A run's translation, sentence by sentence.

    Attributes:
        sentences: per sentence of the run, ``(source, translation, pairs)``; ``pairs`` are the
            sentence's word alignment (``(source word, target word)``, 0-based), or None.
    """

    sentences: list[tuple[str, str, list[tuple[int, int]] | None]]

    @property
    def text(self) -> str:
        """The run's translation: its sentences' translations joined by single spaces."""
        return " ".join(t.strip() for _, t, _ in self.sentences if t.strip())


@dataclass(eq=False)
class _Run:
    parent: object
    owner: object  # the element whose .text (owner is parent) or .tail holds the leading text
    children: list = field(default_factory=list)  # consecutive inline children of parent
    raw: str = ""
    spans: dict = field(default_factory=dict)  # element -> (start, end) characters of raw
    points: list = field(default_factory=list)  # (element, character offset) kept whole
    kids: dict = field(default_factory=dict)  # element or None (the run) -> inline children
    preorder: list = field(default_factory=list)  # the elements of spans, in document order
    up: dict = field(default_factory=dict)  # element -> its container (None: the run)

    @property
    def text(self) -> str:
        """The run's text as sent to the model: its words joined by single spaces."""
        return " ".join(self.raw.split())


class HtmlDocument:
    """An HTML document or fragment, cut into runs of text to translate.

    Args:
        markup: the HTML (a whole document when it starts with a doctype or ``<html>``), or an
            element already parsed (any XML tree; :meth:`rebuild` then changes it in place).
        inline: keep sentences with inline markup whole (needs alignments); False: every text
            node is translated on its own.
        kind: what each element is (:func:`html_kind`, the default, for HTML).
        letters: translate only runs with a letter in them (a number, a date or a code alone
            is left as it is: a file's tables keep their figures).

    Raises:
        lxml.etree.ParserError: markup that is no document at all (a lone doctype).
        HtmlLimitError: a run with more than :data:`MAX_INLINE_ELEMENTS` inline elements.
    """

    def __init__(
        self, markup, *, inline: bool = True, kind=html_kind, letters: bool = False
    ) -> None:
        self.inline = inline
        self.letters = letters
        self._kind = kind
        self.runs: list[_Run] = []
        self._inline_memo: dict = {}
        if not isinstance(markup, str):
            self.root, self.whole_document, self._doctype = markup, False, ""
            self._visit(self.root)
            self._inline_memo.clear()
            return
        self.whole_document = bool(_DOCUMENT.match(markup))
        if self.whole_document:
            self.root = lxml.html.document_fromstring(markup)
            # libxml2 invents an HTML 4 doctype for a document without one: keep only a real one
            has_doctype = re.match(r"\s*<!doctype", markup, re.IGNORECASE)
            self._doctype = self.root.getroottree().docinfo.doctype if has_doctype else ""
        else:
            self.root = lxml.html.fragment_fromstring(markup, create_parent="div")
            self._doctype = ""
        self._visit(self.root)
        self._inline_memo.clear()

    @property
    def texts(self) -> list[str]:
        """Per run, the text to translate (never empty)."""
        return [r.text for r in self.runs]

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        """Per run, the word positions where its inline markup begins or ends (position k:
        before word k of :attr:`texts`; empty: a run without inline markup)."""
        out = []
        for run in self.runs:
            if not run.children:
                out.append(())
                continue
            starts = [m.start() for m in _WORD.finditer(run.raw)]
            offsets = [x for a, b in run.spans.values() for x in (a, b)]
            offsets += [offset for _, offset in run.points]
            out.append(tuple(sorted({bisect.bisect_left(starts, x) for x in offsets})))
        return out

    @property
    def needs_alignments(self) -> bool:
        """Whether some run holds inline markup (and so its translation needs alignments)."""
        return any(r.children for r in self.runs)

    # ---- reading ---------------------------------------------------------------------------

    def _whole(self, el) -> bool:
        return self._kind(el) in ("whole", "space")

    def _inline(self, el) -> bool:
        """An element that may sit inside a sentence: inline all the way down."""
        kind = self._kind(el)
        if kind in ("whole", "space"):
            return True
        return kind == "inline" and all(self._inline(c) for c in el)

    def _is_inline(self, el) -> bool:
        """:meth:`_inline`, remembered per element: a deep tree is walked once, not once per
        level."""
        if not self.inline:
            return False
        known = self._inline_memo.get(el)
        if known is None:
            kind = self._kind(el)
            known = kind in ("whole", "space") or (
                kind == "inline" and all(self._is_inline(c) for c in el)
            )
            self._inline_memo[el] = known
        return known

    def _visit(self, parent) -> None:
        if self._kind(parent) == "skip" or (not self.inline and self._whole(parent)):
            return
        run = _Run(parent, parent)
        for child in list(parent):
            if self._is_inline(child):
                run.children.append(child)
                continue
            self._close(run)
            if _tag(child) is not None:
                self._visit(child)
            run = _Run(parent, child)
        self._close(run)

    def _close(self, run: _Run) -> None:
        raw: list[str] = []
        size = 0

        def emit(text: str | None) -> None:
            nonlocal size
            if text:
                raw.append(text)
                size += len(text)

        def walk(el, container) -> None:
            run.kids.setdefault(container, []).append(el)
            if len(run.up) >= MAX_INLINE_ELEMENTS:
                raise HtmlLimitError(
                    f"a paragraph has more than {MAX_INLINE_ELEMENTS:,} inline elements "
                    "(the limit per paragraph)"
                )
            run.up[el] = container
            if self._whole(el):
                run.points.append((el, size))
                if self._kind(el) == "space":
                    emit(" ")  # a line break separates words
                return
            run.preorder.append(el)
            start = size
            emit(el.text)
            for c in el:
                walk(c, el)
                emit(c.tail)
            run.spans[el] = (start, size)

        emit(run.owner.text if run.owner is run.parent else run.owner.tail)
        for child in run.children:
            walk(child, None)
            emit(child.tail)
        run.raw = "".join(raw)
        if run.text and (not self.letters or any(c.isalpha() for c in run.raw)):
            self.runs.append(run)

    # ---- writing ---------------------------------------------------------------------------

    def apply(self, translations: list[RunTranslation | None]) -> str:
        """The document with each run replaced by its translation (None: left as it is).

        Args:
            translations: one per run (:attr:`texts`), in order.

        Returns:
            The translated HTML.
        """
        self.rebuild(translations)
        return self._serialize()

    def rebuild(self, translations: list[RunTranslation | None]) -> None:
        """Replace each run by its translation in the tree (:attr:`root`), in place."""
        if len(translations) != len(self.runs):
            raise ValueError(f"{len(translations)} translations for {len(self.runs)} runs")
        for run, tr in zip(self.runs, translations):
            if tr is not None:
                self._rebuild(run, tr)

    def _rebuild(self, run: _Run, tr: RunTranslation) -> None:
        lead = run.raw[: len(run.raw) - len(run.raw.lstrip())]
        trail = run.raw[len(run.raw.rstrip()) :] if run.raw.strip() else ""
        words = [m.start() for m in _WORD.finditer(run.raw)]  # source words' first characters
        target: list[str] = []
        align: dict[int, list[int]] = {}  # source word -> target words (run-wide indices)
        src_at = 0
        for source, translation, pairs in tr.sentences:
            n_src, t_words = len(source.split()), translation.split()
            for i, j in pairs or ():
                if 0 <= i < n_src and 0 <= j < len(t_words):
                    align.setdefault(src_at + i, []).append(len(target) + j)
            src_at += n_src
            target.extend(t_words)
        text = " ".join(target)
        starts, pos = [], 0
        for w in target:
            starts.append(pos)
            pos += len(w) + 1
        # Per source word, the last target word aligned to it (None: none), and the last
        # source word at or before it that has one (-1: none): each point is then a lookup.
        n = len(words)
        last_j: list[int | None] = [None] * n
        first_j: list[int | None] = [None] * n
        for k, js in align.items():
            first_j[k], last_j[k] = min(js), max(js)
        aligned_before, prev = [-1] * n, -1
        for k in range(n):
            if last_j[k] is not None:
                prev = k
            aligned_before[k] = prev

        def char_span(first: int, last: int) -> tuple[int, int]:
            return starts[first], starts[last] + len(target[last])

        def point(offset: int) -> int:
            """After the target word aligned to the last source word before ``offset`` (and
            after the space that follows it when the source had a space there)."""
            k = bisect.bisect_left(words, offset) - 1  # the last source word before offset
            k = aligned_before[k] if k >= 0 else -1
            if k < 0:
                return 0
            j = last_j[k]
            end = starts[j] + len(target[j])
            spaced = run.raw[offset - 1 : offset].isspace() and end < len(text)
            return end + 1 if spaced else end

        # Each source word's innermost element (rule 1), by one sweep over the elements in
        # document order with a stack of the open ones; then each element's first and last
        # aligned target word, folded from its own words and its children's (children come
        # after their parent in document order, so a reversed pass has them first).
        lo: dict = {}  # element -> its first aligned target word
        hi: dict = {}  # element -> its last one
        stack: list = []
        k = 0

        def own_words(upto: float) -> None:
            nonlocal k
            while k < n and words[k] < upto:
                while stack and run.spans[stack[-1]][1] <= words[k]:
                    stack.pop()
                if stack and last_j[k] is not None:
                    el = stack[-1]
                    lo[el] = min(lo.get(el, first_j[k]), first_j[k])
                    hi[el] = max(hi.get(el, last_j[k]), last_j[k])
                k += 1

        for el in run.preorder:
            own_words(run.spans[el][0])
            stack.append(el)
        own_words(float("inf"))
        for el in reversed(run.preorder):
            container = run.up[el]
            if el in lo and container is not None:
                lo[container] = min(lo.get(container, lo[el]), lo[el])
                hi[container] = max(hi.get(container, hi[el]), hi[el])
        spans: dict = {el: char_span(lo[el], hi[el]) if el in lo else None for el in run.spans}
        spaced_end = set()
        padded = set()  # points with a space after them in the source, and before them here
        for el, offset in run.points:
            spans[el] = (point(offset), point(offset))
            if run.raw[offset : offset + 1].isspace() and (
                text[spans[el][0] - 1 : spans[el][0]] == " " or spans[el][0] == 0 < len(text)
            ):
                padded.add(el)
            if run.raw[offset - 1 : offset].isspace() and 0 < spans[el][0] == len(text):
                spaced_end.add(el)  # "word %s": the point ends the text, after a space
        for el, offset in ((e, run.spans[e][0]) for e in run.spans if spans[e] is None):
            spans[el] = (point(offset), point(offset))

        def place(container, begin: int, end: int) -> list:
            """Items (text, element) of ``container``'s span ``[begin, end)``, elements
            filled."""
            kids = run.kids.get(container, [])
            rank = {e: i for i, e in enumerate(kids)}
            order = sorted(kids, key=lambda e: (spans[e][0], spans[e][1], rank[e]))
            items: list = []
            at = begin
            pad = False
            for el in order:
                a, b = spans[el]
                a = min(max(a, at), end)
                b = min(max(b, a), end)
                if at < a:
                    items.append((" " if pad and text[at] != " " else "") + text[at:a])
                if not self._whole(el):
                    _fill(el, place(el, a, b))
                elif el in spaced_end and a == len(text):
                    items.append(" ")
                items.append(el)
                at, pad = b, el in padded
            if at < end:
                items.append((" " if pad and text[at] != " " else "") + text[at:end])
            return items

        items = place(None, 0, len(text))
        items = [lead, *items, trail]
        parent = run.parent
        for child in run.children:
            parent.remove(child)
        head, rest = _leading_text(items)
        if run.owner is parent:
            parent.text = head
            _insert(parent, None, rest)
        else:
            run.owner.tail = head
            _insert(parent, run.owner, rest)

    def _serialize(self) -> str:
        if self.whole_document:
            body = lxml.html.tostring(self.root, encoding="unicode", method="html")
            return (self._doctype + "\n" if self._doctype else "") + body
        out = [_html.escape(self.root.text or "", quote=False)]
        out += [lxml.html.tostring(c, encoding="unicode", method="html") for c in self.root]
        return "".join(out)


def _leading_text(items: list) -> tuple[str, list]:
    """The text before the first element of ``items``, and the rest."""
    head = []
    for k, item in enumerate(items):
        if isinstance(item, str):
            head.append(item)
        else:
            return "".join(head), items[k:]
    return "".join(head), []


def _insert(parent, after, items: list) -> None:
    """Insert ``items`` (elements, each followed by its tail text) into ``parent`` right after
    its child ``after`` and that child's tail (None: at its start). Each element goes next to
    the one before it (``addnext``), never by index, which lxml finds by walking the children:
    a run's rebuild stays linear in its elements."""
    last = after
    for item in items:
        if isinstance(item, str):
            if last is not None and last is not after:
                last.tail = (last.tail or "") + item
            continue
        item.tail = None
        if last is None:
            parent.insert(0, item)
        else:
            last.addnext(item)
        last = item


def _fill(el, items: list) -> None:
    """Make ``items`` the whole content of ``el`` (its text, then elements with tails)."""
    for c in list(el):
        el.remove(c)
    head, rest = _leading_text(items)
    el.text = head or None
    _insert(el, None, rest)

"""``.md`` (CommonMark with tables), parsed with markdown-it-py: the text of every paragraph,
heading, list item, quote and table cell is translated, and everything else keeps its bytes:
code blocks and fences, HTML blocks, front matter (``---`` ... ``---``), link reference
definitions, blank lines, list markers, quote markers and indentation.

markdown-it-py parses but does not write Markdown, so the translation is put back into the
source lines: each inline block's source text (its lines, found in the source lines) is
replaced by its translation, line for line (a soft or hard line break stays a line break).
Inside a block, emphasis, strong emphasis, strikethrough and links are elements of the
projection of ``format: "html"`` (:mod:`seq2seq.documents.html`) and come back around the words
they covered, written back with the markers they had; inline code, images, autolinks and
inline HTML are kept as they are (never sent to the model); a link keeps its destination and
title as written.
"""

from __future__ import annotations

import re

import lxml.html
from markdown_it import MarkdownIt

from seq2seq.documents.base import Limits
from seq2seq.documents.html import HtmlDocument, RunTranslation
from seq2seq.documents.text import decode

__all__ = ["read"]

_FRONT = re.compile(r"---[ \t]*\n(?:.*\n)*?(?:---|\.\.\.)[ \t]*(?:\n|$)")
_PAIRS = {"strong": "b", "em": "i", "s": "s", "link": "a"}


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.normalizeLink = lambda url: url  # keep destinations as written
    md.normalizeLinkText = lambda url: url
    md.validateLink = lambda url: True
    return md


class _Block:
    """One inline block: its source lines (line number, start, end in that line) and its
    projection tree."""

    def __init__(self, token, places: list[tuple[int, int, int]], inline: bool) -> None:
        self.places = places
        self.lines = token.content.split("\n")
        self.raw: dict[str, str] = {}  # data-k -> what a kept element is written as
        root = lxml.html.fromstring("<div><p></p></div>")
        p = root[0]
        stack = [p]
        for t in token.children or []:
            top = stack[-1]
            kind = t.type.rsplit("_", 1)
            if t.type == "text":
                _append_text(top, t.content)
            elif kind[-1] == "open" and kind[0] in _PAIRS and t.markup != "autolink":
                el = lxml.html.Element(_PAIRS[kind[0]], {"data-k": str(len(self.raw))})
                if kind[0] == "link":
                    title = t.attrs.get("title")
                    dest = str(t.attrs.get("href", ""))
                    self.raw[el.get("data-k")] = f"]({dest}" + (f' "{title}")' if title else ")")
                else:
                    self.raw[el.get("data-k")] = t.markup
                top.append(el)
                stack.append(el)
            elif len(kind) == 2 and kind[1] == "close" and kind[0] in _PAIRS:
                if len(stack) > 1:
                    stack.pop()
            else:
                k = str(len(self.raw))
                if t.type in ("softbreak", "hardbreak"):
                    el = lxml.html.Element("br", {"data-k": k})
                    self.raw[k] = "\n"
                else:
                    el = lxml.html.Element("var", {"data-k": k})
                    self.raw[k] = _kept(t)
                top.append(el)
        self.root = root
        self.doc = HtmlDocument(root, inline=inline)

    def render(self, el=None) -> str:
        el = self.root[0] if el is None else el
        out = [el.text or ""]
        for c in el:
            raw = self.raw[c.get("data-k")]
            if c.tag == "a":
                out.append("[" + self.render(c) + raw)
            elif c.tag in ("b", "i", "s"):
                out.append(raw + self.render(c) + raw)
            else:
                out.append(raw)
            out.append(c.tail or "")
        return "".join(out)


def _append_text(el, text: str) -> None:
    if len(el):
        el[-1].tail = (el[-1].tail or "") + text
    else:
        el.text = (el.text or "") + text


def _kept(t) -> str:
    """An inline token kept as it is, written back as Markdown."""
    if t.type == "code_inline":
        pad = " " if t.content[:1] in ("`", " ") or t.content[-1:] in ("`", " ") else ""
        return f"{t.markup}{pad}{t.content}{pad}{t.markup}"
    if t.type == "image":
        title = t.attrs.get("title")
        return f"![{t.content}]({t.attrs.get('src', '')}" + (f' "{title}")' if title else ")")
    if t.type == "link_open" and t.markup == "autolink":
        return f"<{t.attrs.get('href', '')}>"
    return t.content


class MarkdownDocument:
    def __init__(self, text: str, *, inline: bool) -> None:
        self.newline = "\r\n" if "\r\n" in text else "\n"
        text = text.replace("\r\n", "\n")
        self.lines = text.split("\n")
        parse = text
        front = _FRONT.match(text)
        if front:  # blank the front matter for the parser; its lines stay as they are
            n = front.group().count("\n")
            parse = "\n" * n + text[front.end() :]
        tokens = _parser().parse(parse)
        self.blocks: list[_Block] = []
        cursor: dict[int, int] = {}
        for t in tokens:
            if t.type != "inline" or t.map is None or not any(c.isalpha() for c in t.content):
                continue
            # autolinks come as link_open/text/link_close: keep them whole
            children, skip = [], False
            for c in t.children or []:
                if c.type == "link_open" and c.markup == "autolink":
                    children.append(c)
                    skip = True
                elif skip:
                    skip = c.type != "link_close"
                else:
                    children.append(c)
            t.children = children
            places = self._find(t, cursor)
            if places is not None:
                self.blocks.append(_Block(t, places, inline))

    def _find(self, token, cursor: dict[int, int]):
        """Where each line of ``token``'s content is in the source lines, or None."""
        places = []
        line = token.map[0]
        for part in token.content.split("\n"):
            while line < token.map[1]:
                at = self.lines[line].find(part, cursor.get(line, 0))
                if at >= 0:
                    break
                line += 1
            else:
                return None
            places.append((line, at, at + len(part)))
            cursor[line] = at + len(part)
            line += 1
        return places

    @property
    def texts(self) -> list[str]:
        return [t for b in self.blocks for t in b.doc.texts]

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        return [a for b in self.blocks for a in b.doc.boundaries]

    def write(self, translations: list[RunTranslation]) -> bytes:
        edits: dict[int, list[tuple[int, int, str]]] = {}
        at = 0
        for b in self.blocks:
            n = len(b.doc.runs)
            b.doc.rebuild(translations[at : at + n])
            at += n
            out = b.render().split("\n")
            if len(out) != len(b.places):  # never: each break is kept once
                continue
            for (line, start, end), source, new in zip(b.places, b.lines, out):
                tail = re.search(r"(\\|[ \t]*)$", source).group() if new is not out[-1] else ""
                edits.setdefault(line, []).append((start, end, new.strip() + tail))
        lines = list(self.lines)
        for line, changes in edits.items():
            s = lines[line]
            for start, end, new in sorted(changes, reverse=True):
                s = s[:start] + new + s[end:]
            lines[line] = s
        return self.newline.join(lines).encode("utf-8")


def read(data: bytes, *, name: str, inline: bool, limits: Limits) -> MarkdownDocument:
    return MarkdownDocument(decode(data, name), inline=inline)

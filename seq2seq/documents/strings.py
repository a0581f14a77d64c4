"""Plain strings (a PO entry, a subtitle cue, a line of text) with placeholders and tags kept
as they are, translated with the inline projection (:class:`~seq2seq.documents.html.HtmlDocument`).

A string becomes an HTML fragment: each placeholder (``{name}``, ``%s``, ``%(n)d``, ``%1$s``,
``${x}``, ``{{ x }}``) a ``<var>`` that is never sent to the model and comes back after the
target word aligned to the source word before it; with ``markup=True`` HTML-like tags
named by ``tags`` (``<b>``, ``<i>``, ``<a href>``, a subtitle's ``<font>``) stay elements around the words they
covered. Without alignments each piece between placeholders is translated on its own.
"""

from __future__ import annotations

import html
import re

import lxml.html

from seq2seq.documents.html import HtmlDocument, RunTranslation, html_kind

__all__ = ["PLACEHOLDER", "Strings", "rewrap"]

PLACEHOLDER = re.compile(
    r"\{\{.*?\}\}"  # {{ jinja }}
    r"|\$\{[^{}]*\}"  # ${shell}
    r"|\{[A-Za-z0-9_.:!\[\]-]*\}"  # {name} {0} {n:>3}
    r"|%(?:\d+\$)?(?:\([A-Za-z0-9_]+\))?[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa%@]"  # printf
)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
ALL = frozenset({"*"})
"""``tags=ALL``: every HTML-like tag stays an element."""
_VAR = re.compile(r'<var class="s2s-ph">(.*?)</var>', re.DOTALL)


def _kind(el) -> str:
    if el.tag == "var" and el.get("class") == "s2s-ph":
        return "whole"
    kind = html_kind(el)
    return "inline" if kind == "block" and el.getparent() is not None else kind


def _is_element(token: str, tags) -> bool:
    """Whether the tag ``token`` stays an element (a name of ``tags``, or any with ``ALL``)."""
    m = _TAG.fullmatch(token)
    if m is None:
        return False
    return tags is ALL or re.match(r"</?([A-Za-z0-9]+)", token).group(1).lower() in tags


def _fragment(text: str, tags) -> str:
    """``text`` as HTML: placeholders (and tags not in ``tags``) wrapped in ``<var>``, the
    tags of ``tags`` kept as elements, everything else escaped."""
    out, at = [], 0
    pattern = re.compile(f"{PLACEHOLDER.pattern}|{_TAG.pattern}") if tags else PLACEHOLDER
    for m in pattern.finditer(text):
        out.append(html.escape(text[at : m.start()], quote=False))
        token = m.group()
        if tags and _is_element(token, tags):
            out.append(token)
        else:
            out.append(f'<var class="s2s-ph">{html.escape(token, quote=False)}</var>')
        at = m.end()
    out.append(html.escape(text[at:], quote=False))
    return "".join(out)


class Strings:
    """Strings to translate, each a document of one or more runs.

    Args:
        strings: the source strings.
        inline: translate a string with placeholders or tags whole (needs alignments).
        tags: the names of the HTML-like tags the strings may hold that stay elements around
            their words (:data:`ALL`: every tag); any other tag is kept as a placeholder.
            Empty: tags are text.
    """

    def __init__(
        self, strings: list[str], *, inline: bool, tags: frozenset[str] = frozenset()
    ) -> None:
        markup = tags
        self.docs = []
        self.shape = []  # per string, its lines (each line is translated on its own)
        for string in strings:
            lines = string.split("\n")
            self.shape.append(lines)
            for s in lines:
                self._add(s, inline, markup)

    def _add(self, s: str, inline: bool, markup: bool) -> None:
        if True:
            m = markup if markup and _TAG.search(s) else frozenset()
            if not any(c.isalpha() for c in s):
                self.docs.append(None)
                return
            if not m and not PLACEHOLDER.search(s):
                self.docs.append(s)  # the common case: a plain string, one run
                return
            root = lxml.html.fragment_fromstring(_fragment(s, m), create_parent="div")
            self.docs.append((HtmlDocument(root, inline=inline, kind=_kind), bool(m)))

    @property
    def texts(self) -> list[str]:
        out = []
        for d in self.docs:
            if isinstance(d, str):
                out.append(" ".join(d.split()))
            elif d is not None:
                out.extend(d[0].texts)
        return out

    @property
    def boundaries(self) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for d in self.docs:
            if isinstance(d, str):
                out.append(())
            elif d is not None:
                out.extend(d[0].boundaries)
        return out

    def apply(self, translations: list[RunTranslation]) -> list[str]:
        """Per string, its translation (a line with nothing to translate: itself; the line
        breaks and each line's leading and trailing whitespace as they were)."""
        lines = self._apply([s for ls in self.shape for s in ls], translations)
        out, at = [], 0
        for ls in self.shape:
            done = []
            for s, t in zip(ls, lines[at : at + len(ls)]):
                lead = s[: len(s) - len(s.lstrip())]
                trail = s[len(s.rstrip()) :] if s.strip() else ""
                done.append(lead + t.strip() + trail if s.strip() else s)
            out.append("\n".join(done))
            at += len(ls)
        return out

    def _apply(self, source: list[str], translations: list[RunTranslation]) -> list[str]:
        out, at = [], 0
        for s, d in zip(source, self.docs):
            if d is None:
                out.append(s)
            elif isinstance(d, str):
                out.append(translations[at].text)
                at += 1
            else:
                doc, m = d
                n = len(doc.runs)
                doc.rebuild(translations[at : at + n])
                at += n
                root = doc.root
                body = html.escape(root.text or "", quote=False) + "".join(
                    lxml.html.tostring(c, encoding="unicode") for c in root
                )
                body = _VAR.sub(lambda v: "\0" + v.group(1) + "\0", body)
                pieces = _TAG.split(body) if m else [body]
                found = _TAG.findall(body) if m else []
                text = html.unescape(pieces[0]) + "".join(
                    t + html.unescape(p) for t, p in zip(found, pieces[1:])
                )
                out.append(_unmark(text))
        return out


def _unmark(text: str) -> str:
    """Placeholders came back escaped between NULs: unescape them (once) and drop the NULs."""
    return text.replace("\0", "")


def rewrap(text: str, n_lines: int) -> list[str]:
    """``text``'s words over ``n_lines`` lines of about equal length (a subtitle's layout)."""
    words = text.split()
    if n_lines <= 1 or len(words) <= 1:
        return [" ".join(words)] + [""] * (n_lines - 1) if n_lines > 1 else [" ".join(words)]
    total = sum(len(w) + 1 for w in words)
    lines: list[list[str]] = [[]]
    size = 0
    for w in words:
        if size >= total * len(lines) / n_lines and len(lines) < n_lines and lines[-1]:
            lines.append([])
        lines[-1].append(w)
        size += len(w) + 1
    lines += [[] for _ in range(n_lines - len(lines))]
    return [" ".join(line) for line in lines]

"""Target-language tags: how a multilingual model is told which language to write.

The convention (Johnson et al., 2017): the source sentence of a multilingual model starts with
the tag of the language to translate into, ``<2xx>`` with ``xx`` the target's code as the config
names it (``<2fr> A man is riding a bike.``). Each tag is one user-defined SentencePiece piece
(:func:`seq2seq.data.tokenizer.train_tokenizer`'s ``user_symbols``), so it is exactly one
source token, the first; :meth:`seq2seq.data.tokenizer.Tokenizer.encode_src` turns a leading
tag followed by a space into that one id, never ``▁`` + tag. Because the tag is part of the
source text, everything that encodes a source (training, validation, the Translator, scoring,
the CTranslate2 and ONNX exports) carries it without knowing about it.

A bilingual model has no tags: its sources are encoded exactly as they always were.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from seq2seq.core import UserError

__all__ = ["TAG_RE", "resolve_direction", "split_tag", "tag_for", "tag_source", "tags_for"]

TAG_RE = re.compile(r"<2([a-z]{2,3}(?:[_-][A-Za-z0-9]+)?)>(?=\s|$)")
"""A target-language tag at the start of a source sentence (followed by a space or the end)."""


def tag_for(lang: str) -> str:
    """The tag that asks for ``lang``: ``tag_for("fr") == "<2fr>"``."""
    return f"<2{lang.lower()}>"


def tags_for(directions: Iterable[tuple[str, str]]) -> list[str]:
    """The tags of the directions' target languages, each once, sorted: a model's
    user-defined pieces."""
    return sorted({tag_for(tgt) for _, tgt in directions})


def tag_source(text: str, lang: str) -> str:
    """``text`` with the tag asking for ``lang`` in front (``<2fr> text``)."""
    return f"{tag_for(lang)} {text}"


def split_tag(text: str) -> tuple[str | None, str]:
    """``(tag, rest)`` when ``text`` starts with a tag and a space, else ``(None, text)``.

    The rest loses the space after the tag only, so ``tag + " " + rest == text``.
    """
    m = TAG_RE.match(text)
    if m is None:
        return None, text
    return m.group(0), text[m.end() + 1 :] if m.end() < len(text) else ""


def _listing(directions: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{s}-{t}" for s, t in directions) or "none"


def resolve_direction(
    directions: tuple[tuple[str, str], ...],
    source_lang: str | None = None,
    target_lang: str | None = None,
    *,
    languages: Sequence[str] = (),
) -> tuple[str | None, str | None]:
    """The direction a request asks a model for, checked against the ones it knows.

    The one check of ``--source-lang`` / ``--target-lang`` (the CLI, the Python API and the
    server's native body all come here through the Translator). Either may be left out when
    the other (or the model, with one direction) settles it; a multilingual model needs the
    target, since its tag is what selects the output language.

    Args:
        directions: The model's ``(source, target)`` directions (``cfg.data.directions``);
            empty: nothing to check against, the languages are taken as given.
        source_lang: The language of the input, or None.
        target_lang: The language to translate into, or None.

    Returns:
        ``(source, target)``, lowercased; the source stays None when it is not given and
        several directions lead to the target.

        languages: The codes of a many-language model (M2M100, NLLB-200: every direction
            between them); each language is then resolved among them
            (:func:`seq2seq.data.lang_codes.resolve_language`: the model's code or ISO 639-1),
            and one left out is the one of the model's first direction.

    Raises:
        UserError: A direction (or language) the model does not know, or a request that
            leaves the target open; one line listing the directions the model knows.
    """
    if languages:
        return _resolve_among(languages, directions, source_lang, target_lang)
    src = source_lang.strip().lower() if source_lang else None
    tgt = target_lang.strip().lower() if target_lang else None
    if not directions:
        return src, tgt
    known = f"the model translates {_listing(directions)}"
    fits = [(s, t) for s, t in directions if src in (None, s) and tgt in (None, t)]
    if not fits:
        sources = {s for s, _ in directions}
        shown = src or (next(iter(sources)) if len(sources) == 1 else "?")
        asked = f"{shown}-{tgt or '?'}"
        raise UserError(f"the model does not translate {asked}; {known}")
    targets = {t for _, t in fits}
    if len(targets) > 1:
        raise UserError(f"give the target language (--target-lang); {known}")
    sources = {s for s, _ in fits}
    return (src or (sources.pop() if len(sources) == 1 else None)), targets.pop()


def _resolve_among(
    languages: Sequence[str],
    directions: tuple[tuple[str, str], ...],
    source_lang: str | None,
    target_lang: str | None,
) -> tuple[str, str]:
    from seq2seq.data.lang_codes import resolve_language

    default = directions[0] if directions else (None, None)
    out = []
    for given, fallback, what in (
        (source_lang, default[0], "source language"),
        (target_lang, default[1], "target language"),
    ):
        code = given if given and given.strip() else fallback
        if code is None:
            raise UserError(f"give the {what} (--{what.split()[0]}-lang)")
        out.append(resolve_language(code, languages, what=what))
    return out[0], out[1]

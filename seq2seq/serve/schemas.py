"""The request bodies of the server's APIs as pydantic models: what validates them and what
``GET /docs`` shows (LibreTranslate's ``POST /translate``, the native ``POST /v1/translate`` and
``POST /v1/attention``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

__all__ = [
    "SEARCH_FIELDS",
    "AttentionRequest",
    "GlossaryEntry",
    "GlossaryFields",
    "LibreTranslateRequest",
    "TranslateRequest",
]

SEARCH_FIELDS = (
    "method", "beam_size", "nbest", "len_penalty", "min_len", "max_len_a", "max_len_b",
    "no_repeat_ngram", "unk_penalty", "temperature", "top_k", "top_p", "seed",
)  # fmt: skip
"""The :class:`SearchOptions` a request may set (``max_tokens`` is the server's)."""


def _text_or_list(value: Any, name: str) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"must be a string or a list of strings, got {_shape(value)}")


def _shape(value: Any) -> str:
    """What a JSON value is, in words, for an error message (``a list of 2 strings``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        if not value:
            return "an empty list"
        kinds = {_shape(v).removeprefix("a ").removeprefix("an ") for v in value}
        if len(kinds) > 1:
            return f"a list of {len(value)} mixed items"
        (kind,) = kinds
        plural = {"empty list": "empty lists"}
        if kind.startswith("list"):
            kind = "list"
        return f"a list of {len(value)} {kind if len(value) == 1 else plural.get(kind, kind + 's')}"
    return type(value).__name__


def _is_phrases(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _per_text(name: str, value: Any, text: Any) -> Any:
    """``value`` of the per-text field ``name`` (``prefix``: a string; ``constraints``,
    ``avoid``: a list of phrases), checked against ``text``: for one text, that value; for a
    list of texts, a list with one entry per text, each that value or null.

    Raises:
        ValueError: any other shape (a list of strings for a list of texts would otherwise be
            read one character per phrase), saying the expected one.
    """
    one = "a string" if name == "prefix" else "a list of strings"
    fits = (lambda v: isinstance(v, str)) if name == "prefix" else _is_phrases
    if value is None or not isinstance(text, (str, list)):
        return value  # null, or text itself is wrong (reported for text)
    if isinstance(text, str):
        if not fits(value):
            raise ValueError(f"for one text, expected {one} or null, got {_shape(value)}")
        return value
    n = len(text)
    if not (
        isinstance(value, list) and len(value) == n and all(v is None or fits(v) for v in value)
    ):
        raise ValueError(
            f"for a list of {n} text{'s' * (n != 1)}, expected a list with one entry per "
            f"text ({n}), each {one} or null; got {_shape(value)}"
        )
    return value


class GlossaryEntry(BaseModel):
    """One entry of a request's glossary: where ``source`` occurs, the translation holds
    ``target`` (docs/serving.md, "Glossaries")."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = Field(description="the source term (whole words; lowercase: any case)")
    target: str = Field(description="its translation")

    @field_validator("source", "target")
    @classmethod
    def _term(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an empty term")
        if "\t" in value or "\n" in value or "\r" in value:
            raise ValueError("a term holds no tab or line break")
        return value


def _keep_terms(value: Any) -> Any:
    if value is None or not _is_phrases(value):
        return value  # the type error is pydantic's
    for i, term in enumerate(value):
        if not term.strip():
            raise ValueError(f"entry {i}: an empty term")
    return value


class GlossaryFields(BaseModel):
    """The glossary fields every translating route takes: ``glossary`` (entries, or the name
    of a glossary stored for the request's API key) and ``do_not_translate``."""

    model_config = ConfigDict(extra="ignore", strict=True)

    glossary: str | list[GlossaryEntry] | None = Field(
        None, description="[{source, target}, ...], or the name of a stored glossary"
    )
    do_not_translate: list[str] | None = Field(
        None, description="terms that come back exactly as they are"
    )

    @field_validator("do_not_translate", mode="before")
    @classmethod
    def _keep(cls, value: Any) -> Any:
        return _keep_terms(value)

    @field_validator("glossary", mode="before")
    @classmethod
    def _glossary(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError(
                f"expected a glossary's name or a list of {{source, target}} objects, got "
                f"{_shape(value)}"
            )
        out = []
        for i, entry in enumerate(value):
            if not isinstance(entry, dict):
                raise ValueError(
                    f"entry {i}: expected an object {{source, target}}, got {_shape(entry)}"
                )
            try:
                out.append(GlossaryEntry.model_validate(entry))
            except ValidationError as e:
                first = e.errors()[0]
                loc = ".".join(str(p) for p in first["loc"])
                msg = {"missing": "missing", "extra_forbidden": "unknown field"}.get(
                    first["type"], first["msg"].removeprefix("Value error, ")
                )
                raise ValueError(f"entry {i}: {loc + ': ' if loc else ''}{msg}") from None
        return out


class LibreTranslateRequest(GlossaryFields):
    """LibreTranslate's ``POST /translate`` body (JSON, or the same fields as a form).

    Fields are strict: ``alternatives`` is a JSON integer (not ``true``, ``2.5`` or ``"2"``);
    a form's ``alternatives`` is its decimal digits (:func:`seq2seq.serve.bodies.read_libre_fields`
    reads it as the integer).
    """

    model_config = ConfigDict(extra="ignore", strict=True)  # api_key, secret, ... are accepted

    q: str | list[str] = Field(description="text, or a list of texts, to translate")
    source: str = Field(description="source language code, or auto", examples=["en"])
    target: str = Field(description="target language code", examples=["de"])
    format: Literal["text", "html"] | None = Field(
        "text", description="text, or html: the text nodes translated, the markup kept"
    )
    alternatives: int = Field(0, ge=0, description="alternative translations wanted")
    api_key: str | None = Field(None, description="the API key (servers with --api-keys)")

    @field_validator("q", mode="before")
    @classmethod
    def _q(cls, value: Any) -> Any:
        return _text_or_list(value, "q")


class TranslateRequest(GlossaryFields):
    """The native ``POST /v1/translate`` body.

    Search options left out (or null) keep the server's defaults (the model's ``decoding``
    section and the ``seq2seq serve`` options). Every field is strict (``"beam_size": true``,
    ``4.7`` or ``"4"`` is a 400); the search options' ranges are checked by the one check of
    search options (:meth:`seq2seq.config.DecodingConfig.validate`), as for the command line.
    Later fields join this model without changing the existing ones: ``models`` (ids from
    ``GET /v1/models``) for an ensemble.

    ``alignments``: per sentence, each hypothesis' Moses ``i-j`` word pairs (the rule and format
    of ``seq2seq translate --alignments``, :mod:`seq2seq.decode.alignments`); the engine must give
    cross-attention (torch, ctranslate2; onnx is a 400).

    Constrained decoding (docs/translating.md, "Constrained decoding"): ``prefix`` (a text), ``constraints``
    and ``avoid`` (lists of phrases) for a single ``text``; for a list of texts, lists aligned
    with it, one entry per text (``null`` / ``[]`` for a text without). Any other shape is a 400
    that says the expected one (``["zeta", "kappa"]`` for two texts is not read as phrases of
    one character). A text with any of them is translated as one sentence (it may not hold a
    line break).

    Glossaries (docs/serving.md, "Glossaries"): ``glossary`` (``{source, target}`` entries, or
    the name of a glossary stored for the request's API key) and ``do_not_translate`` apply to
    every sentence of every text.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] = Field(description="a text or a list of texts")
    source: str | None = Field(None, description="checked against the model if given")
    target: str | None = Field(None, description="checked against the model if given")
    source_lang: str | None = Field(
        None, description="the input's language (as --source-lang); checked against the model"
    )
    target_lang: str | None = Field(
        None,
        description="the language to translate into (as --target-lang); a multilingual "
        "model needs it (or target)",
    )
    split_sentences: bool = Field(
        True, description="cut paragraphs into sentences (line breaks are always kept)"
    )
    scores: bool = Field(
        False, description="per sentence: each hypothesis' score and token log-probs"
    )
    alignments: bool = Field(
        False, description="per sentence: each hypothesis' Moses i-j word alignment"
    )
    method: Literal["beam", "greedy", "sample"] | None = None
    beam_size: int | None = Field(None, description=">= 1")
    nbest: int | None = Field(None, description="hypotheses per sentence, >= 1")
    len_penalty: float | None = Field(None, description="a finite number")
    min_len: int | None = Field(None, description=">= 0")
    max_len_a: float | None = Field(None, description=">= 0")
    max_len_b: int | None = Field(None, description=">= 0")
    no_repeat_ngram: int | None = Field(None, description=">= 0")
    unk_penalty: float | None = None
    temperature: float | None = Field(None, description="> 0")
    top_k: int | None = Field(None, description=">= 0 (0: all)")
    top_p: float | None = Field(None, description="in (0, 1]")
    seed: int | None = Field(None, description="in [0, 2**64)")
    prefix: str | None | list[str | None] = Field(
        None, description="per text: the output starts with this text (a list for a list of texts)"
    )
    constraints: list[str] | list[list[str] | None] | None = Field(
        None, description="per text: phrases the output must hold (a list of lists for a list)"
    )
    avoid: list[str] | list[list[str] | None] | None = Field(
        None, description="per text: phrases the output must not hold (as constraints)"
    )
    ordered: bool = Field(False, description="the constraints appear in their order")

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _text_or_list(value, "text")

    @field_validator("prefix", "constraints", "avoid", mode="before")
    @classmethod
    def _per_text(cls, value: Any, info: ValidationInfo) -> Any:
        return _per_text(info.field_name or "", value, info.data.get("text"))


class AttentionRequest(BaseModel):
    """``POST /v1/attention``: the text to translate and draw."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="one text (cut into sentences: one map each)")
    source: str | None = Field(None, description="source language (default: the server's)")
    target: str | None = Field(None, description="target language (default: the server's)")
    layer: int | None = Field(None, description="decoder layer, 0-based, -1 the last")
    head: int | None = Field(None, description="head, 0-based (default: mean of heads)")

"""The request bodies of the server's APIs as pydantic models: what validates them and what
``GET /docs`` shows (LibreTranslate's ``POST /translate``, the native ``POST /v1/translate`` and
``POST /v1/attention``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["SEARCH_FIELDS", "AttentionRequest", "LibreTranslateRequest", "TranslateRequest"]

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
    raise ValueError("must be a string or a list of strings")


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's ``POST /translate`` body (JSON, or the same fields as a form)."""

    model_config = ConfigDict(extra="ignore")  # api_key, secret, ... are accepted

    q: str | list[str] = Field(description="text, or a list of texts, to translate")
    source: str = Field(description="source language code, or auto", examples=["en"])
    target: str = Field(description="target language code", examples=["de"])
    format: Literal["text", "html"] | None = Field(
        "text", description="text only (html is refused with a 400)"
    )
    alternatives: int = Field(0, ge=0, description="alternative translations wanted")
    api_key: str | None = Field(None, description="ignored (no keys on this server)")

    @field_validator("q", mode="before")
    @classmethod
    def _q(cls, value: Any) -> Any:
        return _text_or_list(value, "q")


class TranslateRequest(BaseModel):
    """The native ``POST /v1/translate`` body.

    Search options left out (or null) keep the server's defaults (the model's ``decoding``
    section and the ``seq2seq serve`` options). Later fields join this model without changing
    the existing ones: ``models`` (ids from ``GET /v1/models``) for an ensemble.

    ``alignments``: per sentence, each hypothesis' Moses ``i-j`` word pairs (the rule and format
    of ``seq2seq translate --alignments``, :mod:`seq2seq.decode.alignments`); the engine must give
    cross-attention (torch, ctranslate2; onnx is a 400).

    Constrained decoding (docs/translating.md, "Constrained decoding"): ``prefix`` (a text), ``constraints``
    and ``avoid`` (lists of phrases) for a single ``text``; for a list of texts, lists aligned
    with it (``null`` / ``[]`` for a text without). A text with any of them is translated as one
    sentence (it may not hold a line break).
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
    beam_size: int | None = Field(None, ge=1)
    nbest: int | None = Field(None, ge=1, description="hypotheses per sentence")
    len_penalty: float | None = None
    min_len: int | None = Field(None, ge=0)
    max_len_a: float | None = Field(None, ge=0)
    max_len_b: int | None = Field(None, ge=0)
    no_repeat_ngram: int | None = Field(None, ge=0)
    unk_penalty: float | None = None
    temperature: float | None = Field(None, gt=0)
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    prefix: str | None | list[str | None] = Field(
        None, description="per text: the output starts with this text (a list for a list of texts)"
    )
    constraints: list[str] | list[list[str]] | None = Field(
        None, description="per text: phrases the output must hold (a list of lists for a list)"
    )
    avoid: list[str] | list[list[str]] | None = Field(
        None, description="per text: phrases the output must not hold (as constraints)"
    )
    ordered: bool = Field(False, description="the constraints appear in their order")

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _text_or_list(value, "text")


class AttentionRequest(BaseModel):
    """``POST /v1/attention``: the text to translate and draw."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="one text (cut into sentences: one map each)")
    layer: int | None = Field(None, description="decoder layer, 0-based, -1 the last")
    head: int | None = Field(None, description="head, 0-based (default: mean of heads)")

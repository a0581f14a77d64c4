"""Translator: a model directory -> ``translate(list[str]) -> list[str]``.

Three layers, each replaceable:

- :class:`~seq2seq.decode.options.SearchOptions`: how to search (beam, greedy or sampling, and
  their knobs); built from the config's ``decoding`` section plus overrides.
- an *engine* (:class:`seq2seq.decode.options.Engine` protocol): source ids in, hypotheses out.
  :class:`seq2seq.decode.torch_engine.TorchEngine` runs seq2seq's search over the model's
  KV-cached ``decode_step``; other runtimes (CTranslate2, ONNX) plug in by adding a loader to
  :data:`seq2seq.decode.engines.ENGINES`.
- :class:`Translator`: text in, text out. SentencePiece encoding, truncation of over-long
  lines, length-sorted batches of at most ``max_tokens`` source tokens
  (:func:`seq2seq.decode.batching.batch_by_tokens`), input order restored, detokenization.

The command-line side (reading lines, ``seq2seq translate``'s loop) is
:mod:`seq2seq.decode.lines` and :mod:`seq2seq.decode.stream`.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from seq2seq.config import ExperimentConfig
from seq2seq.core import UserError
from seq2seq.decode.batching import batch_by_tokens
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.engines import ENGINES
from seq2seq.decode.options import Engine, SearchOptions
from seq2seq.decode.search_base import Hypothesis
from seq2seq.decode.terminology import Terminology

__all__ = ["Translation", "TruncationCallback", "Translator"]


class Translation(NamedTuple):
    """One hypothesis as text: ``(text, score, token_scores, tokens, alignment)``."""

    text: str
    score: float
    """Length-normalized log-probability (see seq2seq.decode.search_base)."""
    token_scores: list[float]
    """Log-probability of each generated SentencePiece token, EOS included."""
    tokens: list[int] = []
    """The generated target ids, EOS included (``tokenizer.tgt_pieces`` names them)."""
    alignment: list[tuple[int, int]] | None = None
    """Word alignment ``(source word, target word)`` pairs (seq2seq.decode.alignments), when
    asked."""


TruncationCallback = Callable[[int, int], None]
"""``on_truncated(line_no, n_src_tokens)``: 1-based line number, source tokens before cutting."""


def _sentence_name(i: int) -> str:
    return f"sentence {i + 1}"


def _warn_truncated(line_no: int, n_tokens: int) -> None:
    warnings.warn(f"line {line_no}: {n_tokens} source tokens, truncated", stacklevel=3)


class Translator:
    """Translates sentences with an engine and a SentencePiece tokenizer.

    Args:
        engine: anything with ``translate_ids`` (see :class:`Engine`).
        tokenizer: a :class:`seq2seq.data.tokenizer.Tokenizer`.
        max_src_positions: the model's max positions; longer sources are truncated to
            ``max_src_positions - 1`` pieces + EOS.
        opts: default search options (per-call overrides are allowed).
        cfg: the model's experiment config, when known (kept for callers such as evaluate).

    Attributes:
        source_lang: The direction used when a call names none (the command line's
            ``--source-lang``; set it with :meth:`set_direction`).
        target_lang: As ``source_lang``, ``--target-lang``.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer,
        *,
        max_src_positions: int,
        opts: SearchOptions,
        cfg: ExperimentConfig | None = None,
    ) -> None:
        from seq2seq.data import EOS_ID

        if max_src_positions < 2:
            raise ValueError(f"max_src_positions must be >= 2, got {max_src_positions}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_src_positions = max_src_positions
        self.opts = opts
        self.cfg = cfg
        self.eos_id = EOS_ID
        self.source_lang: str | None = None
        self.target_lang: str | None = None

    @classmethod
    def load(
        cls,
        model_dir: str | Path | Sequence[str | Path],
        *,
        device: str = "cpu",
        engine: str = "torch",
        **overrides: object,
    ) -> Translator:
        """Load a model directory with the named engine; ``overrides`` change search options.

        Several directories make an ensemble (:func:`seq2seq.decode.ensemble.load_ensemble`): their
        probabilities are averaged at every step; the decoding defaults are the first's.

        Raises:
            UserError: an unknown engine (the message lists the available ones), a bad model
                directory, invalid options, ensemble members with other vocabularies.
        """
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r}; available: {', '.join(sorted(ENGINES))}")
        dirs = [model_dir] if isinstance(model_dir, (str, os.PathLike)) else list(model_dir)
        if not dirs:
            raise UserError("give a model directory")
        if len(dirs) > 1:
            from seq2seq.decode.ensemble import load_ensemble

            loaded = load_ensemble(dirs, device=device, engine=engine)
        else:
            loaded = ENGINES[engine](Path(dirs[0]), device=device)
        opts = SearchOptions.from_config(loaded.cfg.decoding, **overrides)
        return cls(
            loaded.engine,
            loaded.tokenizer,
            max_src_positions=loaded.max_src_positions,
            opts=opts,
            cfg=loaded.cfg,
        )

    def encode(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        source_lang: str | None = None,
    ) -> list[list[int]]:
        """Source ids (pieces + EOS) per sentence; [] for a sentence without any piece.

        Over-long sentences keep their first ``max_src_positions - 1`` pieces + EOS and are
        reported through ``on_truncated(line_no, n_tokens)`` (default: a warning). A
        many-language model's source also carries the language token of ``source_lang``
        (the model's code; None: the default direction's): ``[lang] pieces </s>``
        (:attr:`languages`).
        """
        report = on_truncated or _warn_truncated
        out = []
        extra = 1 if self.languages else 0  # the source's language token
        if extra and source_lang is None:  # the default direction's (token counts)
            source_lang = self.direction(self.source_lang, self.target_lang)[0]
        pieces = self.tokenizer.encode_src(list(sentences)) if sentences else []
        for i, ids in enumerate(pieces):
            if not ids:
                out.append([])
                continue
            if len(ids) + 1 + extra > self.max_src_positions:
                report(i + 1, len(ids) + 1 + extra)
                ids = ids[: self.max_src_positions - 1 - extra]
            if extra:
                out.append(self.tokenizer.source_ids(ids, source_lang))
            else:
                out.append(list(ids) + [self.eos_id])
        return out

    @property
    def languages(self) -> list[str]:
        """A many-language model's codes (M2M100, NLLB-200: language tokens of its
        vocabulary, :mod:`seq2seq.data.lang_tokens`); [] for any other model."""
        return list(getattr(self.tokenizer, "languages", ()))

    def language_prefix(
        self, constraints: list[Constraints] | None, n: int, target_lang: str
    ) -> list[Constraints] | None:
        """A many-language model's constraints: the target's language token forced first,
        counted as a generated token (transformers' forced BOS: log-probability 0), before
        any prefix of the user's. Other models: ``constraints`` as they are."""
        if not self.languages:
            return constraints
        lang = self.tokenizer.language_id(target_lang)
        if constraints is None:
            return [Constraints(prefix=(lang,), counted=1) for _ in range(n)]
        return [
            dataclasses.replace(c, prefix=(lang, *c.prefix), counted=c.counted + 1)
            for c in constraints
        ]

    def translate_nbest(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        alignments: bool = False,
        constraints: list[list[str]] | None = None,
        ordered: bool = False,
        prefix: list[str | None] | None = None,
        avoid: list[list[str]] | None = None,
        terminology: Terminology | None = None,
        where: Callable[[int], str] | None = None,
        source_lang: str | None = None,
        target_lang: str | None = None,
        **overrides: object,
    ) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first, in input order.

        An empty sentence (no SentencePiece piece) gets ``nbest`` empty translations of score
        0 without running the model, so every input has the same number of entries.
        ``alignments``: fill each translation's word ``alignment`` from the cross-attention
        (:mod:`seq2seq.decode.alignments`; the engine must return attention: torch, ctranslate2).

        Constrained decoding (docs/translating.md, "Constrained decoding"), each a list with one entry per
        sentence (None: nothing for any sentence):

        - ``constraints``: phrases that must appear in the output (``ordered``: in this order).
        - ``prefix``: text the output starts with (None or "" for none); the search continues
          after it, and the returned text includes it.
        - ``avoid``: phrases that must never appear.
        - ``terminology``: the target terms of the source terms a sentence contains become
          constraints of that sentence (after its own ``constraints``).

        Phrases are matched as their SentencePiece pieces (each phrase encoded on its own).
        ``where(i)`` names sentence i (0-based) in errors (default: ``sentence i+1``).

        ``source_lang`` / ``target_lang``: the direction (:meth:`direction`); a multilingual
        model puts the target's tag (``<2fr>``) before each sentence, and alignments skip it.

        Raises:
            UserError: a constraint no output can meet (naming the sentence), or one the
                engine cannot do (the CTranslate2 engine and positive constraints).
        """
        opts = self.opts.replace(**overrides) if overrides else self.opts
        name = where or _sentence_name
        tagged = self.tag(sentences, source_lang=source_lang, target_lang=target_lang)
        if source_lang is None and target_lang is None:
            source_lang, target_lang = self.source_lang, self.target_lang
        src_lang, tgt_lang = self.direction(source_lang, target_lang)
        src = self.encode(tagged, on_truncated=on_truncated, source_lang=src_lang)
        cons = self.constraints_for(
            sentences,
            constraints=constraints,
            ordered=ordered,
            prefix=prefix,
            avoid=avoid,
            terminology=terminology,
            no_repeat_ngram=opts.no_repeat_ngram,
            where=where,
        )
        if self.languages:
            cons = self.language_prefix(cons, len(sentences), tgt_lang)
        results: list[list[Translation]] = [[Translation("", 0.0, [])] * opts.nbest for _ in src]
        todo = [i for i, ids in enumerate(src) if ids]
        # An engine that splits batches itself takes larger calls (Engine.batches_per_call).
        per_call = opts.max_tokens * getattr(self.engine, "batches_per_call", 1)
        for batch in batch_by_tokens([len(src[i]) for i in todo], per_call):
            idx = [todo[j] for j in batch]
            extra = {"attention": True} if alignments else {}
            if cons is not None:
                extra["constraints"] = [cons[i] for i in idx]
            hyps = self.engine.translate_ids([src[i] for i in idx], opts, **extra)
            if cons is not None:
                for i, sent_hyps in zip(idx, hyps):
                    if not sent_hyps:
                        raise UserError(
                            f"{name(i)}: no output meets its constraints within the "
                            "length limit (an avoided phrase or --no-repeat-ngram blocks them)"
                        )
            # One SentencePiece call for the whole batch (each call starts its threads).
            flat = self.detokenize([h for sent_hyps in hyps for h in sent_hyps])
            start = 0
            for i, sent_hyps in zip(idx, hyps):
                results[i] = flat[start : start + len(sent_hyps)]
                if alignments:
                    skip = int(tagged[i] is not sentences[i])  # the tag's column
                    if self.languages and not self.tokenizer.legacy:
                        skip = 1  # the source's language token
                    results[i] = self._align(tagged[i], src[i], sent_hyps, results[i], skip)
                start += len(sent_hyps)
        if alignments:  # empty sentences: nothing to align
            results = [[t._replace(alignment=t.alignment or []) for t in r] for r in results]
        return results

    def _align(
        self,
        sentence: str,
        src: list[int],
        hyps: list[Hypothesis],
        out: list[Translation],
        skip: int = 0,
    ) -> list[Translation]:
        """Word alignments of ``out``; the first ``skip`` source pieces (a language tag) are
        not words of the sentence, so they and their attention columns are left out."""
        from seq2seq.decode.alignments import align_pieces

        src_pieces = self.tokenizer.src_pieces(sentence)[: len(src) - 1]  # as encoded, no EOS
        if self.languages:  # the language token, before the pieces or (legacy) after EOS
            src_pieces = ["<lang>", *src_pieces] if skip else src_pieces
        lead = 1 if self.languages else 0  # the target's forced language token
        aligned = []
        for h, t in zip(hyps, out):
            if h.attention is None:
                raise UserError("this engine returns no attention: no alignments")
            tokens = [x for x in h.tokens if x != self.eos_id][lead:]
            tgt_pieces = self.tokenizer.tgt_pieces(tokens)
            rows = h.attention.tolist() if hasattr(h.attention, "tolist") else h.attention
            rows = rows[lead:]
            attention = [row[skip:] for row in rows] if skip else rows
            pairs = align_pieces(attention, src_pieces[skip:], tgt_pieces)
            aligned.append(t._replace(alignment=pairs))
        return aligned

    @property
    def directions(self) -> tuple[tuple[str, str], ...]:
        """The ``(source, target)`` directions the model translates (() when unknown)."""
        return self.cfg.data.directions if self.cfg is not None else ()

    @property
    def multilingual(self) -> bool:
        """Whether the model reads a target-language tag before each source sentence."""
        return self.cfg is not None and self.cfg.data.multilingual

    def direction(
        self, source_lang: str | None = None, target_lang: str | None = None
    ) -> tuple[str | None, str | None]:
        """The ``(source, target)`` a request asks for, checked against :attr:`directions`
        (:func:`seq2seq.data.tags.resolve_direction`; a direction the model does not know is
        a one-line ``UserError`` listing those it knows)."""
        from seq2seq.data import resolve_direction

        return resolve_direction(
            self.directions, source_lang, target_lang, languages=self.languages
        )

    def set_direction(self, source_lang: str | None, target_lang: str | None) -> None:
        """Check a direction (:meth:`direction`) and make it the default of every call."""
        self.source_lang, self.target_lang = self.direction(source_lang, target_lang)

    def tag(
        self,
        sentences: list[str],
        *,
        source_lang: str | None = None,
        target_lang: str | None = None,
    ) -> list[str]:
        """The sentences as the model reads them: for a multilingual model, each non-blank
        one behind the target's tag (``<2fr> ...``); for a bilingual one, as they are (the
        same list), once the direction is checked."""
        from seq2seq.data import tag_source

        if source_lang is None and target_lang is None:
            source_lang, target_lang = self.source_lang, self.target_lang
        _, tgt = self.direction(source_lang, target_lang)
        if not self.multilingual:
            return sentences
        return [tag_source(s, tgt) if s.strip() else s for s in sentences]

    def constraints_for(
        self,
        sentences: list[str],
        *,
        constraints: list[list[str]] | None = None,
        ordered: bool = False,
        prefix: list[str | None] | None = None,
        avoid: list[list[str]] | None = None,
        terminology: Terminology | None = None,
        no_repeat_ngram: int = 0,
        where: Callable[[int], str] | None = None,
    ) -> list[Constraints] | None:
        """Per sentence, its :class:`~seq2seq.decode.constraints.Constraints` in target ids; None
        when there are none at all. (See :meth:`translate_nbest`.)"""
        from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

        name = where or _sentence_name
        n = len(sentences)
        for arg, given in (("constraints", constraints), ("prefix", prefix), ("avoid", avoid)):
            if given is not None and len(given) != n:
                raise ValueError(f"{arg} has {len(given)} entries for {n} sentences")
        if constraints is None and prefix is None and avoid is None and terminology is None:
            return None
        include_text = [list(constraints[i]) if constraints else [] for i in range(n)]
        term_where: list[dict[str, str]] = [{} for _ in range(n)]  # target term -> its entry
        if terminology is not None:
            for i, text in enumerate(sentences):
                term_where[i] = dict(terminology.find(text))
                include_text[i] += list(term_where[i])
        avoid_text = [list(avoid[i]) if avoid else [] for i in range(n)]
        prefix_text = [(prefix[i] or "") if prefix else "" for i in range(n)]
        # One SentencePiece call for every phrase of the batch.
        flat = [p for row in include_text for p in row] + [p for row in avoid_text for p in row]
        flat += [p for p in prefix_text if p]
        for p in flat:
            if not isinstance(p, str):
                raise UserError(f"a constraint must be text, got {type(p).__name__}")
        ids = iter(self.tokenizer.encode_tgt(flat) if flat else [])
        include_ids = [[next(ids) for _ in row] for row in include_text]
        avoid_ids = [[next(ids) for _ in row] for row in avoid_text]
        prefix_ids = [next(ids) if p else [] for p in prefix_text]
        out = []
        for i in range(n):
            c = Constraints(
                prefix=prefix_ids[i], include=include_ids[i], ordered=ordered, avoid=avoid_ids[i]
            )
            # Errors name a phrase by the user's text, and a term by its termbase entry.
            own = set(include_text[i][: len(constraints[i])] if constraints else ())
            names: dict[tuple[int, ...], str] = {}
            phrases = [
                *zip(include_text[i], include_ids[i]),
                *zip(avoid_text[i], avoid_ids[i]),
                (prefix_text[i], prefix_ids[i]),
            ]
            for text, ids_ in phrases:
                origin = None if text in own else term_where[i].get(text)
                shown = f"{text!r} (terminology {origin})" if origin else repr(text)
                names.setdefault(tuple(int(t) for t in ids_), shown)
            try:
                c.check(
                    special=(PAD_ID, BOS_ID, EOS_ID), no_repeat_ngram=no_repeat_ngram, names=names
                )
            except UserError as e:
                raise UserError(f"{name(i)}: {e}") from None
            for _, ids_ in [*zip(include_text[i], include_ids[i]), phrases[-1]]:
                if UNK_ID in ids_:
                    raise UserError(
                        f"{name(i)}: {names[tuple(int(t) for t in ids_)]} has characters the "
                        "target vocabulary lacks (they would be output as the unknown piece)"
                    )
            if c.needed_len() > self.max_src_positions:
                raise UserError(
                    f"{name(i)}: the prefix and constraints take {c.needed_len() - 1} "
                    f"tokens; the model has {self.max_src_positions} positions"
                )
            out.append(c)
        return out

    def translate(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        **overrides: object,
    ) -> list[str]:
        """The best translation of each sentence, in input order ('' for an empty sentence).

        Takes the constraint and direction arguments of :meth:`translate_nbest` too
        (``translate(lines, target_lang="fr")`` with a multilingual model)."""
        overrides["nbest"] = 1
        nbest = self.translate_nbest(sentences, on_truncated=on_truncated, **overrides)
        return [t[0].text if t else "" for t in nbest]

    def detokenize(self, hyps: list[Hypothesis]) -> list[Translation]:
        """One :class:`Translation` per hypothesis (its text, score and token scores)."""
        ids = [[t for t in h.tokens if t != self.eos_id] for h in hyps]
        texts = self.tokenizer.decode_tgt(ids) if ids else []
        # A translation is one line whatever the SentencePiece model decodes (byte-fallback
        # pieces can decode to "\n" or "\r"): output lines must stay aligned with the input.
        texts = [t.replace("\r", " ").replace("\n", " ") for t in texts]
        return [
            Translation(text, float(h.score), list(h.token_scores), list(h.tokens))
            for text, h in zip(texts, hyps)
        ]

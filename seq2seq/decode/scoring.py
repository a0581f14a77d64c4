"""Forced decoding: how probable a model (or an ensemble) finds a given translation.

fairseq's ``--score-reference``, ``marian-scorer``, CTranslate2's ``score_batch``. A pair is
scored with ONE teacher-forced forward pass (the training forward, no search) and
:func:`seq2seq.model.loss.target_log_probs`, the per-token log-probabilities behind the loss:

- ``log_prob``: the sum over the target's pieces and its EOS of ``log p(y_t | y_<t, src)``;
- ``score``: ``log_prob / n_tokens ** len_penalty``, the search's normalization (docs/design.md), so
  the score of a beam search's own output is the score the search reported for it;
- ``n_tokens``: target pieces + EOS (the start token is not counted).

A many-language model (M2M100, NLLB-200) reads ``[src_lang] pieces </s>`` and is scored on
``[tgt_lang] pieces </s>``: the language token is forced, as ``generate`` forces it, so its
log-probability is 0 and it counts as a token, as in the search.

An ensemble's token log-probability is the log of the members' mean probability, the rule the
ensemble's search uses (:func:`seq2seq.decode.ensemble.combine_log_probs`). Sources are encoded and
truncated as :class:`~seq2seq.decode.translator.Translator` does (an empty source is EOS alone); a
target longer than the decoder's positions is an error naming its line. Batches are
length-sorted, at most ``max_tokens`` padded tokens; padding and batching do not change a
pair's score (up to float rounding).

The corpus perplexity is ``exp(-sum(log_prob) / sum(n_tokens))`` over all pairs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig, ExperimentConfig
from seq2seq.core import UserError
from seq2seq.decode.batching import batch_by_tokens
from seq2seq.decode.ensemble import check_same_vocabularies, combine_log_probs
from seq2seq.decode.lines import read_lines
from seq2seq.model import target_log_probs

__all__ = ["PairScore", "Scorer", "corpus_summary", "score_files"]

OUTPUT_FORMATS = ("text", "jsonl")


@dataclass(frozen=True)
class PairScore:
    """The forced-decoding score of one (source, target) pair."""

    log_prob: float
    """Sum of the token log-probabilities, EOS included."""
    score: float
    """``log_prob / n_tokens ** len_penalty``."""
    n_tokens: int
    """Target pieces + EOS."""
    token_log_probs: list[float]
    """Per target piece, then EOS."""


class Scorer:
    """Scores given translations with one model or an ensemble (same vocabularies).

    Args:
        models: :class:`~seq2seq.model.transformer.Seq2SeqTransformer` s (eval mode, on ``device``).
        tokenizer: the (shared) :class:`~seq2seq.data.tokenizer.Tokenizer`.
        device: where the batches go.
        max_tokens: padded tokens per batch (source or target, whichever is longer).
        cfg: the (first) model's experiment config, when known (its decoding defaults).

    ``max_tokens`` and each ``len_penalty`` go through the one check of the search and
    batching options (:meth:`seq2seq.config.DecodingConfig.check_value`): a bad value is the
    same :class:`~seq2seq.config.errors.InvalidValue` as for ``translate``.
    """

    def __init__(
        self,
        models: Sequence[torch.nn.Module],
        tokenizer,
        *,
        device: str | torch.device = "cpu",
        max_tokens: int = 4096,
        cfg: ExperimentConfig | None = None,
    ) -> None:
        from seq2seq.data import BOS_ID, EOS_ID, PAD_ID

        if not models:
            raise ValueError("give at least one model")
        DecodingConfig.check_value("max_tokens", max_tokens)
        self.models = list(models)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_tokens = max_tokens
        self.cfg = cfg
        self.max_positions = min(m.max_positions for m in self.models)
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.target_lang: str | None = None  # a multilingual model's tag (set_direction)
        # a many-language model's (M2M100, NLLB) language codes and its direction
        self.languages = list(getattr(tokenizer, "languages", ()))
        self.lang_pair: tuple[str, str] | None = None
        if self.languages:
            self.set_direction(None, None)

    def set_direction(self, source_lang: str | None, target_lang: str | None) -> None:
        """Check the direction against the model's (seq2seq.data.resolve_direction); a
        multilingual model then reads each source behind the target's tag, a many-language
        model ``[src_lang] pieces </s>`` and its target ``[tgt_lang] pieces </s>``."""
        from seq2seq.data import resolve_direction

        directions = self.cfg.data.directions if self.cfg is not None else ()
        source, target = resolve_direction(
            directions, source_lang, target_lang, languages=self.languages
        )
        if self.languages:
            self.lang_pair = (source, target)
            return
        multilingual = self.cfg is not None and self.cfg.data.multilingual
        self.target_lang = target if multilingual else None

    @classmethod
    def load(
        cls,
        model_dirs: str | Path | Sequence[str | Path],
        *,
        device: str = "cpu",
        max_tokens: int | None = None,
    ) -> Scorer:
        """Load one model directory, or several (an ensemble; they must share vocabularies).

        ``max_tokens`` (None: the first model's ``decoding.max_tokens``) is checked before
        anything loads.
        """
        from seq2seq.model import load_model_dir

        if max_tokens is not None:
            DecodingConfig.check_value("max_tokens", max_tokens)

        dirs = [model_dirs] if isinstance(model_dirs, (str, os.PathLike)) else list(model_dirs)
        if not dirs:
            raise UserError("give a model directory")
        loaded = [load_model_dir(d, device=device) for d in dirs]
        check_same_vocabularies([str(d) for d in dirs], [x.tokenizer for x in loaded])
        return cls(
            [x.model for x in loaded],
            loaded[0].tokenizer,
            device=device,
            max_tokens=loaded[0].cfg.decoding.max_tokens if max_tokens is None else max_tokens,
            cfg=loaded[0].cfg,
        )

    # ---- ids ------------------------------------------------------------------------------

    def _pad(self, rows: list[list[int]]) -> Tensor:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        return ids.to(self.device)

    @torch.inference_mode()
    def token_log_probs(self, src: list[list[int]], tgt: list[list[int]]) -> list[list[float]]:
        """Per-token log-probabilities of each target (pieces + EOS) given its source.

        Args:
            src: source ids per pair (pieces + EOS), none empty, at most ``max_positions``.
            tgt: target ids per pair (pieces + EOS, no BOS), at most ``max_positions``.

        Returns:
            Per pair, ``len(tgt[i])`` log-probabilities, in input order.
        """
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} sources but {len(tgt)} targets")
        for s, t in zip(src, tgt):
            if not s or not t or len(s) > self.max_positions or len(t) > self.max_positions:
                raise ValueError("sources and targets must be non-empty and fit max_positions")
        out: list[list[float]] = [[] for _ in src]
        widths = [max(len(s), len(t) + 1) for s, t in zip(src, tgt)]
        for batch in batch_by_tokens(widths, self.max_tokens):
            src_ids = self._pad([src[i] for i in batch])  # (B, S)
            tgt_ids = self._pad([[self.bos_id, *tgt[i]] for i in batch])  # (B, T+1) BOS..EOS
            tgt_in, tgt_out = tgt_ids[:, :-1], tgt_ids[:, 1:]  # (B, T) each
            per_model = [
                target_log_probs(m(src_ids, tgt_in), tgt_out, ignore_index=self.pad_id)
                for m in self.models
            ]  # M x (B, T)
            lp = combine_log_probs(torch.stack(per_model)).cpu()  # (B, T)
            for row, i in enumerate(batch):
                out[i] = lp[row, : len(tgt[i])].tolist()
        return out

    def score_ids(
        self, src: list[list[int]], tgt: list[list[int]], *, len_penalty: float = 1.0
    ) -> list[PairScore]:
        """:class:`PairScore` of each pair of id lists (see :meth:`token_log_probs`).

        Raises:
            InvalidValue: ``len_penalty`` is not a finite number.
        """
        DecodingConfig.check_value("len_penalty", len_penalty)
        scores = []
        for lps in self.token_log_probs(src, tgt):
            if self.lang_pair is not None:  # the language token is forced, as generate does
                lps = [0.0, *lps[1:]]
            total = float(sum(lps))
            scores.append(PairScore(total, total / len(lps) ** len_penalty, len(lps), lps))
        return scores

    # ---- text -----------------------------------------------------------------------------

    def encode_pairs(
        self,
        src_text: list[str],
        tgt_text: list[str],
        *,
        on_truncated: Callable[[int, int], None] | None = None,
        names: tuple[str, str] = ("source", "target"),
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Source ids (truncated like the Translator's) and target ids (pieces + EOS).

        Raises:
            UserError: a target longer than the decoder can see (naming its line).
        """
        if len(src_text) != len(tgt_text):
            raise UserError(
                f"line counts differ: {names[0]} has {len(src_text)} lines but {names[1]} "
                f"has {len(tgt_text)}"
            )
        src, tgt = [], []
        limit = self.max_positions - 1
        extra = 0 if self.lang_pair is None else 1  # the language token of each side
        limit -= extra
        if self.target_lang is not None:
            from seq2seq.data import tag_source

            src_text = [tag_source(t, self.target_lang) if t.strip() else t for t in src_text]
        for i, ids in enumerate(self.tokenizer.encode_src(src_text) if src_text else []):
            if len(ids) > limit:
                if on_truncated is not None:
                    on_truncated(i + 1, len(ids) + 1)
                ids = ids[:limit]
            if self.lang_pair is not None:
                src.append(self.tokenizer.source_ids(ids, self.lang_pair[0]))
                continue
            src.append([*ids, self.eos_id])
        for i, ids in enumerate(self.tokenizer.encode_tgt(tgt_text) if tgt_text else []):
            if len(ids) > limit:
                raise UserError(
                    f"{names[1]}:{i + 1}: {len(ids)} target pieces; the model's decoder sees "
                    f"at most {limit} before EOS"
                )
            if self.lang_pair is not None:
                ids = [self.tokenizer.language_id(self.lang_pair[1]), *ids]
            tgt.append([*ids, self.eos_id])
        return src, tgt

    def score(
        self,
        src_text: list[str],
        tgt_text: list[str],
        *,
        len_penalty: float = 1.0,
        on_truncated: Callable[[int, int], None] | None = None,
    ) -> list[PairScore]:
        """Score each (source, target) sentence pair; see the module docstring."""
        src, tgt = self.encode_pairs(src_text, tgt_text, on_truncated=on_truncated)
        return self.score_ids(src, tgt, len_penalty=len_penalty)


def corpus_summary(scores: Sequence[PairScore]) -> dict:
    """Pairs, tokens, total log-prob and perplexity ``exp(-log_prob / tokens)``."""
    tokens = sum(s.n_tokens for s in scores)
    total = sum(s.log_prob for s in scores)
    ppl = math.exp(-total / tokens) if tokens else math.nan
    return {"pairs": len(scores), "tokens": tokens, "log_prob": total, "perplexity": ppl}


def format_score(score: PairScore, line: int, output_format: str) -> str:
    """One output line: ``LOG_PROB<TAB>SCORE<TAB>N_TOKENS``, or a JSON object (jsonl)."""
    if output_format == "jsonl":
        return json.dumps(
            {
                "line": line,
                "log_prob": score.log_prob,
                "score": score.score,
                "n_tokens": score.n_tokens,
                "token_log_probs": score.token_log_probs,
            }
        )
    return f"{score.log_prob:.6f}\t{score.score:.6f}\t{score.n_tokens}"


def score_files(
    scorer: Scorer,
    src_path: str | Path,
    tgt_path: str | Path,
    *,
    out: TextIO,
    len_penalty: float = 1.0,
    output_format: str = "text",
    warn: Callable[[str], None] | None = None,
) -> dict:
    """Score the aligned files ``src_path``/``tgt_path``; one line per pair to ``out``.

    Both files are read and encoded before anything is scored, so bad input (line counts,
    UTF-8, an over-long target, two empty files) fails before any output.

    Returns:
        :func:`corpus_summary` of all pairs.
    """
    if output_format not in OUTPUT_FORMATS:
        raise UserError(
            f"unknown output format {output_format!r}; expected one of {', '.join(OUTPUT_FORMATS)}"
        )
    DecodingConfig.check_value("len_penalty", len_penalty)
    src_text, tgt_text = read_lines(src_path), read_lines(tgt_path)
    if not src_text and not tgt_text:  # a perplexity of no tokens would be nan
        raise UserError(f"{src_path} and {tgt_path} are empty: no sentence pairs to score")

    def on_truncated(line: int, n: int) -> None:
        if warn is not None:
            warn(
                f"{src_path}:{line}: {n} source tokens exceed the model's "
                f"{scorer.max_positions} positions; truncated"
            )

    src, tgt = scorer.encode_pairs(
        src_text, tgt_text, on_truncated=on_truncated, names=(str(src_path), str(tgt_path))
    )
    scores = scorer.score_ids(src, tgt, len_penalty=len_penalty) if src else []
    for i, s in enumerate(scores):
        out.write(format_score(s, i + 1, output_format) + "\n")
    out.flush()
    return corpus_summary(scores)

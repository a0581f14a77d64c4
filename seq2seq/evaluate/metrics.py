"""Corpus-level BLEU, chrF and TER through sacreBLEU (nothing re-implemented here).

Every score comes with its sacreBLEU signature (``nrefs:1|case:mixed|eff:no|tok:13a|...``):
a number without the signature cannot be compared with anyone else's.

Two ways of scoring:

- the default, detokenized cased output against raw references with sacreBLEU's own
  ``13a`` tokenizer — the numbers to report;
- ``tokenize="none", lowercase=True`` — the way papers on the lowercased, tokenized
  Multi30K references score (multi-bleu.perl style), so numbers compare with theirs. A model
  trained on cased raw text is scored that way after :func:`moses_lc` has made its output and
  the raw references look like those files (Moses punctuation normalization, lowercasing,
  Moses tokenization with XML escaping: the steps that made Multi30K's ``lc.norm.tok`` files).

TER always uses sacreBLEU's defaults (tercom tokenization, case-insensitive): its
signature says so.
"""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF, TER

__all__ = ["TOKENIZERS", "format_scores", "moses_lc", "score_corpus"]

TOKENIZERS = tuple(BLEU.TOKENIZERS)
"""Tokenizers sacreBLEU's BLEU accepts (``13a``, ``none``, ``intl``, ``char``, ...)."""


def score_corpus(
    hyps: list[str], refs: list[str], *, tokenize: str = "13a", lowercase: bool = False
) -> dict:
    """BLEU, chrF and TER of ``hyps`` against one reference per line.

    Args:
        hyps: system outputs, one detokenized sentence per line.
        refs: references, aligned with ``hyps``.
        tokenize: sacreBLEU's BLEU tokenizer (``13a`` default; ``none`` for pre-tokenized text).
        lowercase: case-insensitive BLEU and chrF.

    Returns:
        ``{"bleu", "chrf", "ter"}`` scores (floats, 0-100), their ``*_signature`` strings,
        ``bleu_verbose`` (sacreBLEU's line: score, n-gram precisions, brevity penalty,
        lengths) and ``n_sentences``.

    Raises:
        ValueError: the lists differ in length or are empty, or ``tokenize`` is unknown.
    """
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no sentences to score")
    if tokenize not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenize!r}; expected one of {', '.join(TOKENIZERS)}")
    ref_streams = [list(refs)]
    # force: with tokenize="none" the caller says the text is tokenized, so sacreBLEU's
    # "you forgot to detokenize" warning would only be noise.
    bleu = BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    chrf = CHRF(lowercase=lowercase)
    ter = TER()
    bleu_score = bleu.corpus_score(list(hyps), ref_streams)
    chrf_score = chrf.corpus_score(list(hyps), ref_streams)
    ter_score = ter.corpus_score(list(hyps), ref_streams)
    return {
        "bleu": float(bleu_score.score),
        "chrf": float(chrf_score.score),
        "ter": float(ter_score.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "ter_signature": str(ter.get_signature()),
        "bleu_verbose": bleu_score.format(width=2),
        "n_sentences": len(hyps),
    }


def moses_lc(lines: list[str], lang: str) -> list[str]:
    """Lines the way Multi30K's ``*.lc.norm.tok.*`` files were made from the raw text.

    Moses punctuation normalization, lowercasing, then the Moses tokenizer with XML escaping
    (``&quot;``, ``&apos;``), through sacremoses. On the mirror's raw files this reproduces the
    dataset authors' tokenized files: every line of test_2016_flickr in en, de and cs, 999 of
    1,000 in fr (tests/test_metrics.py checks de and en).

    Args:
        lines: detokenized, cased sentences (system output or raw references).
        lang: their language code (``de``, ``en``, ``fr``, ``cs``: Moses' rules per language).
    """
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [
        tokenizer.tokenize(normalizer.normalize(line).lower(), escape=True, return_str=True)
        for line in lines
    ]


def format_scores(scores: dict) -> str:
    """Human-readable lines: one per metric, with its signature (the CLI prints these)."""
    return "\n".join(
        [
            scores["bleu_verbose"],
            f"  {scores['bleu_signature']}",
            f"chrF2 = {scores['chrf']:.2f}",
            f"  {scores['chrf_signature']}",
            f"TER = {scores['ter']:.2f}",
            f"  {scores['ter_signature']}",
        ]
    )

"""seq2seq.evaluate.metrics against sacreBLEU called directly."""

from __future__ import annotations

import gzip

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF, TER

from seq2seq.evaluate.metrics import format_scores, moses_lc, score_corpus

HYPS = [
    "A man in a blue shirt is standing on a ladder.",
    "Two Dogs play in the snow!",
    "a woman, who is sitting, reads a book",
    "The children are running on the beach .",
    "Ein Mann fährt Fahrrad.",
]
REFS = [
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two dogs are playing in the snow.",
    "A woman sitting on a bench reads a book.",
    "the children run along the beach .",
    "Ein Mann fährt ein Fahrrad.",
]


def test_default_scores_equal_sacrebleu() -> None:
    scores = score_corpus(HYPS, REFS)
    assert scores["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert scores["ter"] == sacrebleu.corpus_ter(HYPS, [REFS]).score
    assert scores["n_sentences"] == len(HYPS)
    assert 0.0 < scores["bleu"] < 100.0


def test_signatures_are_sacrebleus() -> None:
    scores = score_corpus(HYPS, REFS)
    bleu, chrf, ter = BLEU(), CHRF(), TER()
    for metric in (bleu, chrf, ter):
        metric.corpus_score(HYPS, [REFS])
    assert scores["bleu_signature"] == str(bleu.get_signature())
    assert scores["chrf_signature"] == str(chrf.get_signature())
    assert scores["ter_signature"] == str(ter.get_signature())
    assert "tok:13a" in scores["bleu_signature"]
    assert "case:mixed" in scores["bleu_signature"]
    assert scores["bleu_verbose"].startswith("BLEU = ")


def test_tokenized_lowercase_scoring_equals_sacrebleu() -> None:
    scores = score_corpus(HYPS, REFS, tokenize="none", lowercase=True)
    ref_bleu = BLEU(tokenize="none", lowercase=True)
    assert scores["bleu"] == ref_bleu.corpus_score(HYPS, [REFS]).score
    assert scores["chrf"] == CHRF(lowercase=True).corpus_score(HYPS, [REFS]).score
    assert scores["ter"] == TER().corpus_score(HYPS, [REFS]).score
    ref_bleu.corpus_score(HYPS, [REFS])
    assert scores["bleu_signature"] == str(ref_bleu.get_signature())
    assert "tok:none" in scores["bleu_signature"] and "case:lc" in scores["bleu_signature"]
    # The options really reach sacreBLEU: these texts score differently under them.
    default = score_corpus(HYPS, REFS)
    assert scores["bleu"] != default["bleu"]
    assert scores["chrf"] != default["chrf"]


def test_perfect_match_scores_100() -> None:
    scores = score_corpus(REFS, REFS)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["ter"] == pytest.approx(0.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="4 hypotheses but 5 references"):
        score_corpus(HYPS[:4], REFS)
    with pytest.raises(ValueError, match="no sentences"):
        score_corpus([], [])
    with pytest.raises(ValueError, match="unknown tokenizer"):
        score_corpus(HYPS, REFS, tokenize="moses")


def test_format_scores_shows_every_signature() -> None:
    scores = score_corpus(HYPS, REFS)
    text = format_scores(scores)
    for key in ("bleu_signature", "chrf_signature", "ter_signature"):
        assert scores[key] in text
    assert f"chrF2 = {scores['chrf']:.2f}" in text
    assert f"TER = {scores['ter']:.2f}" in text


def test_moses_lc_by_hand() -> None:
    # lowercased, punctuation split off, quotes escaped; German low-high quotes and doubled
    # spaces normalized first
    assert moses_lc(['Ein Mann sagt: "Hallo, Welt!"', "Ein  Mann  \u201egeht\u201c."], "de") == [
        "ein mann sagt : &quot; hallo , welt ! &quot;",
        "ein mann &quot; geht &quot; .",
    ]
    assert moses_lc(["Don't stop, it's a dog's life."], "en") == [
        "don &apos;t stop , it &apos;s a dog &apos;s life ."
    ]


@pytest.mark.parametrize("lang", ["de", "en"])
def test_moses_lc_remakes_the_multi30k_tokenized_test_set(mirror, lang) -> None:
    """Raw references through moses_lc are the dataset authors' lc.norm.tok files, line for
    line, so a raw-text model scored this way compares with the papers' numbers."""
    task1 = mirror / "data" / "task1"
    with gzip.open(task1 / "raw" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        raw = f.read().splitlines()
    tok = (task1 / "tok" / f"test_2016_flickr.lc.norm.tok.{lang}").read_text("utf-8").splitlines()
    assert len(raw) == len(tok) == 1000
    assert moses_lc(raw, lang) == tok

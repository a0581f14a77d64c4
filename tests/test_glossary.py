"""Glossaries and do-not-translate lists (seq2seq.decode.glossary): the matching rules by hand,
100% term use and byte-identical spans on a tiny trained model, and ``seq2seq translate
--glossary --do-not-translate``."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from factories import WORDS, make_model_dir, synthetic_pairs

from seq2seq.core.errors import UserError
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.translator import Translator


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("glossary") / "model", train_steps=150)


def marks(sentence: str, n: int) -> list[str]:
    return [f"@{i}@" for i in range(n)]


def test_matching_is_whole_words_and_smart_case():
    g = Glossary([("bank", "Ufer"), ("Apple", "Apfel Inc"), ("New York", "NY")], ["C++", "iOS"])
    a = g.apply("Bank of the bank, BANK; banks and embankment.", marks)
    assert a.terms == (("Ufer", "entry 1"),)  # Bank, bank and BANK match; banks does not
    assert g.apply("an apple", marks).terms == ()  # "Apple" has an uppercase letter: exact
    assert g.apply("Apple pie", marks).terms == (("Apfel Inc", "entry 2"),)
    assert g.apply("new york", marks).terms == ()
    a = g.apply("C++, iOS and IOS in C++x", marks)
    assert a.source == "@0@, @1@ and IOS in C++x"
    assert a.kept == (("@0@", "C++"), ("@1@", "iOS"))
    assert a.restore("x @1@ y @0@ @0@") == "x iOS y C++ C++"


def test_a_kept_span_wins_over_an_overlapping_term_and_the_same_span_shares_a_mark():
    g = Glossary([("red ball", "green car"), ("dog", "cat")], ["Red", "dog"])
    a = g.apply("Red ball, red ball and dog", marks)
    # "Red" has an uppercase letter: only "Red" is kept, "red ball" is then a term
    assert a.kept == (("@0@", "Red"), ("@1@", "dog"))
    assert a.terms == (("green car", "entry 1"),)  # the second "red ball" is free
    a = Glossary([], ["dog"]).apply("dog and Dog", marks)
    assert a.source == "@0@ and @1@" and a.kept == (("@0@", "dog"), ("@1@", "Dog"))
    a = Glossary([], ["dog"]).apply("dog and dog", marks)
    assert a.source == "@0@ and @0@" and a.kept == (("@0@", "dog"),)


def test_bad_glossaries_name_the_entry_or_line(tmp_path: Path):
    with pytest.raises(UserError, match="entry 2: the source term 'dog' has the target"):
        Glossary([("dog", "cat"), ("dog", "car")])
    with pytest.raises(UserError, match="do-not-translate entry 2: an empty term"):
        Glossary([], ["x", " "])
    bad = tmp_path / "bad.tsv"
    bad.write_text("dog\tcat\nball\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.tsv:2: expected SOURCE<TAB>TARGET"):
        Glossary.load(bad)
    words = tmp_path / "w.txt"
    words.write_bytes(b"ok\n\xff\n")
    with pytest.raises(UserError, match=r"w.txt:2: invalid UTF-8"):
        Glossary.load(None, words)


def test_every_term_is_used_and_every_kept_span_is_byte_identical(trained_dir: Path):
    translator = Translator.load(trained_dir, beam_size=3)
    rng = random.Random(1)
    terms = [("dog", "cat bench"), ("red ball", "green car"), ("walks", "sits near")]
    keep = ["ACME-9000™", "x_y.z", "Zürich"]  # characters the vocabulary lacks, too
    glossary = Glossary(terms, keep)
    sentences = []
    for source, _ in synthetic_pairs(120, seed=3):
        words = source.split()
        words.insert(rng.randrange(len(words) + 1), rng.choice([*keep, "dog", "red ball"]))
        sentences.append(" ".join(words))
    out = translator.translate(sentences, glossary=glossary)
    used = kept = 0
    for source, text in zip(sentences, out):
        for s, t in terms:
            if f" {s} " in f" {source.lower()} ".replace(".", " ").replace("!", " "):
                assert t in text, (source, text)
                used += 1
        for span in keep:
            if span in source:
                assert span in text, (source, text)
                kept += 1
    assert used > 50 and kept > 50
    # no placeholder survives, and a sentence without any term is translated as before
    plain = [s for s in sentences if not glossary.matches(s)]
    assert translator.translate(plain, glossary=glossary) == translator.translate(plain)
    assert not any("JJJ" in t for t in out)


def test_placeholders_avoid_what_the_sentence_holds(trained_dir: Path):
    translator = Translator.load(trained_dir)
    (a,) = translator.apply_glossary(["JJJJ and dog JJJJ"], Glossary([], ["dog"]))
    (mark, span) = a.kept[0]
    assert span == "dog" and mark.lower() not in "jjjj and dog jjjj" and len(mark) == 4


def _run(*args: str, stdin: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEQ2SEQ_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "translate", *args],
        input=stdin.encode(),
        capture_output=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_glossary_and_do_not_translate(trained_dir: Path, tmp_path: Path):
    terms, words = tmp_path / "terms.tsv", tmp_path / "words.txt"
    terms.write_text("# a glossary\ndog\tcat bench\n", encoding="utf-8")
    words.write_text("ACME-9000™\n\n", encoding="utf-8")
    lines = f"A Dog {WORDS[3]} near ACME-9000™\nTwo people\n"
    r = _run(
        str(trained_dir), "--glossary", str(terms), "--do-not-translate", str(words), stdin=lines
    )
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode().splitlines()
    assert len(out) == 2 and "cat bench" in out[0] and "ACME-9000™" in out[0]
    terms.write_text("dog\tcat\nball\n", encoding="utf-8")
    r = _run(str(trained_dir), "--glossary", str(terms), stdin="a dog\n")
    assert r.returncode == 2 and f"{terms}:2:".encode() in r.stderr
    assert b"Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1


def test_alignments_follow_a_restored_span():
    g = Glossary([], ["ACME Corp"])
    a = g.apply("We love ACME Corp products.", marks)
    assert a.source == "We love @0@ products."
    # masked output "@0@ lieben wir ." aligned 2-0 (@0@), 0-2, 1-1, 3-3 (products.->.)
    got = a.restore_alignment("@0@ lieben wir .", [(0, 2), (1, 1), (2, 0), (3, 3)])
    # restored: "ACME Corp lieben wir ." and "We love ACME Corp products."
    assert got == [(0, 3), (1, 2), (2, 0), (2, 1), (3, 0), (3, 1), (4, 4)]
    assert a.restore("@0@ lieben wir .") == "ACME Corp lieben wir ."


def test_translator_alignments_count_the_restored_words(trained_dir: Path):
    translator = Translator.load(trained_dir)
    g = Glossary([], ["big red"])
    (t,) = translator.translate_nbest(["A dog near big red"], glossary=g, alignments=True)[0]
    assert "big red" in t.text
    n_src, n_tgt = 5, len(t.text.split())
    assert t.alignment and all(0 <= i < n_src and 0 <= j < n_tgt for i, j in t.alignment)
    pairs = set(t.alignment)
    # the span's two source words (3, 4) were one placeholder word: aligned alike
    assert {j for i, j in pairs if i == 3} == {j for i, j in pairs if i == 4}
    words = t.text.split()
    k = next(k for k in range(len(words) - 1) if words[k : k + 2] == ["big", "red"])
    assert {i for i, j in pairs if j == k} == {i for i, j in pairs if j == k + 1}

"""seq2seq.data.MosesSplitter gives the sentences of the sentence-splitter package, faster."""

from __future__ import annotations

import random

import pytest
from sentence_splitter import SentenceSplitter

from seq2seq.data import MosesSplitter

PIECES = (
    'Mr. | Dr. Smith | e.g. | U.S.A. | No. 5 | no. 5 | 3.5 | Hello. | World! | Why? | "Quoted." '
    "| (paren.) | ... | Next | word | the | A | Über. | «Bonjour.» | i.e. | etc. | St. | Jan. 12 "
    "| 1. | Art. 3 | x.Y. | “Hi.” | ¿Qué? | ¡Sí! | A.B.C. | end.. | Z | 42 | ok. | dog's. | p. 7"
).split(" | ")


@pytest.mark.parametrize("language", ["en", "de", "fr", "es", "ru"])
def test_the_same_sentences_as_the_package(language):
    rng = random.Random(language)
    theirs, ours = SentenceSplitter(language), MosesSplitter(language)
    for _ in range(400):
        text = " ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 25)))
        assert ours.split(text) == theirs.split(text), text


def test_known_cases():
    en = MosesSplitter("en")
    assert en.split("Mr. Smith went home. He slept.") == ["Mr. Smith went home.", "He slept."]
    assert en.split("See No. 5 here. Then go.") == ["See No. 5 here.", "Then go."]
    assert en.split("") == []

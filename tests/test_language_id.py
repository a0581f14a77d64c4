"""The one language identifier (py3langid), restricted to candidate languages."""

import pytest

pytest.importorskip("py3langid")

from seq2seq.core import UserError  # noqa: E402
from seq2seq.data import LanguageIdentifier  # noqa: E402


def test_restricted_to_candidates_and_ranked():
    ident = LanguageIdentifier(["en", "de", "fr", "cs"])
    assert ident.classify("Ein Mann fährt mit dem Fahrrad über eine Brücke.") == "de"
    assert ident.classify("Un homme fait du vélo sur un pont.") == "fr"
    ranked = ident.rank("A man rides a bicycle across a bridge.")
    assert [d.language for d in ranked][0] == "en"
    assert sorted(d.language for d in ranked) == ["cs", "de", "en", "fr"]
    assert abs(sum(d.confidence for d in ranked) - 1.0) < 1e-4
    assert ranked == sorted(ranked, key=lambda d: -d.confidence)


def test_candidates_change_the_answer():
    # German text, but German is not a candidate: the answer is one of the candidates.
    ident = LanguageIdentifier(["en", "fr"])
    assert ident.classify("Ein Mann fährt mit dem Fahrrad.") in {"en", "fr"}
    assert ident.detect("Ein Mann fährt mit dem Fahrrad.").language in {"en", "fr"}


def test_share_counts_matches():
    ident = LanguageIdentifier(["en", "de"])
    texts = ["Ein Hund läuft im Park.", "A dog runs in the park.", "Zwei Kinder spielen."]
    assert ident.share(texts, "de") == pytest.approx(2 / 3)
    assert ident.share([], "de") == 0.0


def test_unknown_code_is_one_line_error():
    with pytest.raises(UserError, match="does not know xx"):
        LanguageIdentifier(["en", "xx"])

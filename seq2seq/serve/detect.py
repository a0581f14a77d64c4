"""Language detection for ``POST /detect`` and ``"source": "auto"``: py3langid (through
:class:`seq2seq.data.LanguageIdentifier`) restricted to the languages the model knows.

``/detect`` ranks a text among every language of the model (sources and targets: a German text
sent to an en->de server is named German, not English with certainty). ``"source": "auto"``
chooses among the sources that translate into the requested target, so that the answer is
always a direction the model has. Confidence is py3langid's probability normalized over the
candidates, on LibreTranslate's 0-100 scale; a single candidate is 100. A model language that
py3langid does not know is never detected (it is left out of the candidates).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from seq2seq.core import UserError
from seq2seq.data import LanguageIdentifier

__all__ = ["Detector"]


@lru_cache(maxsize=64)
def _known(code: str) -> bool:
    try:
        LanguageIdentifier([code], purpose="language detection")
    except UserError as e:
        if "does not know" in str(e):
            return False
        raise
    return True


class Detector:
    """Ranks texts among candidate languages; each candidate set's identifier is made once.

    Raises:
        UserError: py3langid is not installed (on first use).
    """

    def __init__(self) -> None:
        self._identifiers: dict[tuple[str, ...], LanguageIdentifier] = {}

    def _identifier(self, candidates: Sequence[str]) -> LanguageIdentifier | None:
        key = tuple(candidates)
        if key not in self._identifiers:
            known = [c for c in key if _known(c)]
            if not known:
                return None
            self._identifiers[key] = LanguageIdentifier(known, purpose="language detection")
        return self._identifiers[key]

    def rank(self, text: str, candidates: Sequence[str]) -> list[tuple[str, float]]:
        """``(language, confidence 0-100)`` of every candidate py3langid knows, best first.

        Args:
            text: the text.
            candidates: the languages it may be in (a single one is certain: 100).
        """
        if len(candidates) == 1:
            return [(candidates[0], 100.0)]
        identifier = self._identifier(candidates)
        if identifier is None:
            return [(candidates[0], 0.0)] if candidates else []
        return [(d.language, round(100 * d.confidence, 2)) for d in identifier.rank(text)]

    def best(self, text: str, candidates: Sequence[str]) -> tuple[str, float]:
        """The most likely candidate of ``text`` and its confidence (0-100)."""
        return self.rank(text, candidates)[0]

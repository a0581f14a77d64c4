"""Language identification with py3langid: the one place that loads its model.

Corpus cleaning (``data.langid``), the language share of a model's outputs, and the server's
``/detect`` and ``"source": "auto"`` all ask the same question, "which of these languages is
this text in?", so they share :class:`LanguageIdentifier`. py3langid ships its model inside the
package, so identification works offline. It is an optional extra (``seq2seq[langid]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seq2seq.core import UserError

_INSTALL_HINT = "pip install 'seq2seq[langid]' (or pip install py3langid)"


@dataclass(frozen=True)
class Detection:
    """One candidate language for a text.

    Attributes:
        language: ISO 639-1 code, as py3langid names it.
        confidence: Probability in [0, 1], normalized over the candidate languages.
    """

    language: str
    confidence: float


class LanguageIdentifier:
    """Identifies a text's language among a fixed set of candidates.

    Args:
        languages: Candidate ISO 639-1 codes; ``None`` keeps all of py3langid's 97 languages.
        purpose: What needs identification, for the error when py3langid is missing
            (for example ``"data.langid"``).

    Raises:
        UserError: py3langid is not installed, or a code is not one py3langid knows.
    """

    def __init__(self, languages: Sequence[str] | None = None, *, purpose: str = "this") -> None:
        try:
            from py3langid.langid import MODEL_FILE
            from py3langid.langid import LanguageIdentifier as _Identifier
        except ImportError:
            raise UserError(f"{purpose} needs py3langid: {_INSTALL_HINT}") from None
        self._identifier = _Identifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.languages = tuple(dict.fromkeys(languages)) if languages is not None else None
        if self.languages is not None:
            unknown = sorted(set(self.languages) - set(self._identifier.labels))
            if unknown:
                raise UserError(
                    f"language identification does not know {', '.join(unknown)}; "
                    "py3langid uses ISO 639-1 codes such as en, de, fr"
                )
            self._identifier.set_languages(list(self.languages))

    def classify(self, text: str) -> str:
        """The most likely candidate language of ``text``."""
        return self._identifier.classify(text)[0]

    def rank(self, text: str) -> list[Detection]:
        """Every candidate language for ``text``, most likely first."""
        return [Detection(lang, float(p)) for lang, p in self._identifier.rank(text)]

    def detect(self, text: str) -> Detection:
        """The most likely candidate with its confidence."""
        lang, confidence = self._identifier.classify(text)
        return Detection(lang, float(confidence))

    def share(self, texts: Sequence[str], language: str) -> float:
        """The fraction of ``texts`` identified as ``language`` (0.0 for no texts)."""
        if not texts:
            return 0.0
        return sum(self.classify(t) == language for t in texts) / len(texts)

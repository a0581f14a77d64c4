"""Which sentences of a run need word alignments, and the run's translation from its
sentences'.

Formatting goes back around its words through the alignments (:mod:`seq2seq.documents.html`),
and asking the engine for them is slow (CTranslate2's beam search then decodes a sentence at a
time). Only a sentence with a formatting boundary between two of its words needs them; a
sentence that formatting covers whole, or does not touch, gets its edge alignment (its first
source word to its first target word, its last to its last), which puts every element that
begins or ends at its edges at the translation's edges.
"""

from __future__ import annotations

from seq2seq.documents.html import RunTranslation

__all__ = ["edge_alignment", "needs_alignments", "run_translation"]


def needs_alignments(sentences: list[str], boundaries: tuple[int, ...]) -> list[bool]:
    """Per sentence of a run (in order, their words the run's), whether a boundary of
    :attr:`Document.boundaries <seq2seq.documents.base.Document.boundaries>` falls between two
    of its words."""
    out, at = [], 0
    for s in sentences:
        n = len(s.split())
        out.append(any(at < b < at + n for b in boundaries))
        at += n
    return out


def edge_alignment(source: str, translation: str) -> list[tuple[int, int]]:
    """First word to first word, last to last ([] when either side has no word)."""
    n, m = len(source.split()), len(translation.split())
    if not n or not m:
        return []
    return sorted({(0, 0), (n - 1, m - 1)})


def run_translation(
    sentences: list[str],
    translations: list[str],
    alignments: list[list[tuple[int, int]] | None],
    boundaries: tuple[int, ...],
) -> RunTranslation:
    """A run's translation: per sentence its alignment where the engine gave one, else its edge
    alignment when the run has formatting (none without)."""
    rows = []
    for s, t, a in zip(sentences, translations, alignments):
        if a is None and boundaries:
            a = edge_alignment(s, t)
        rows.append((s, t, a))
    return RunTranslation(rows)

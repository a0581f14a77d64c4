"""What ``seq2seq translate`` writes for one input line: plain text, with scores and
alignments, or one JSON object (``--output-format jsonl``).

Text (``--output-format text``, the default), fields joined by `` ||| `` (Moses / Marian):

- ``TEXT``: the translation alone;
- ``TEXT ||| SCORE`` with ``--scores`` (SCORE: the length-normalized log-probability);
- ``TEXT ||| ALIGNMENT`` with ``--alignments`` (``i-j`` word pairs, seq2seq.decode.alignments), or
  ``TEXT ||| SCORE ||| ALIGNMENT`` with both;
- with ``--nbest N`` > 1: N lines per input, ``LINE ||| TEXT ||| SCORE [||| ALIGNMENT]``
  (LINE: the 1-based input line number), best first.

JSONL: one object per input line, whatever ``nbest``::

    {"line": 1, "text": "...", "score": -0.41, "tokens": ["▁Ein", ...],
     "token_scores": [...], "alignment": "0-0 1-1", "nbest": [{"text", "score", "tokens",
     "token_scores", "alignment"}, ...]}

``tokens`` are the target SentencePiece pieces with the final ``</s>``, one per entry of
``token_scores``; ``alignment`` is present only with ``--alignments``; ``nbest`` holds every
hypothesis (the first is the top-level one). A non-finite score is ``null``.
"""

from __future__ import annotations

import json
import math

from seq2seq.decode.alignments import format_alignment

__all__ = ["OUTPUT_FORMATS", "format_line"]

OUTPUT_FORMATS = ("text", "jsonl")


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _entry(t, tokenizer, alignments: bool) -> dict:
    entry = {
        "text": t.text,
        "score": _finite(t.score),
        "tokens": tokenizer.tgt_pieces(t.tokens) if t.tokens else [],
        "token_scores": [_finite(x) for x in t.token_scores],
    }
    if alignments:
        entry["alignment"] = format_alignment(t.alignment or [])
    return entry


def format_line(
    line_no: int,
    entries: list,
    *,
    output_format: str,
    nbest: int,
    scores: bool,
    alignments: bool,
    tokenizer,
) -> str:
    """The output for one input line (newline-terminated; ``nbest`` lines in n-best text).

    Args:
        line_no: 1-based input line number.
        entries: its :class:`~seq2seq.decode.translator.Translation` s, best first (at least one).
        output_format: ``text`` or ``jsonl``.
        nbest: hypotheses asked for per line (> 1: the n-best text format).
        scores: add the score (text format; jsonl always has it).
        alignments: add the alignment (text format; jsonl has it when asked).
        tokenizer: names the target pieces (jsonl).
    """
    if output_format == "jsonl":
        obj = {"line": line_no, **_entry(entries[0], tokenizer, alignments)}
        obj["nbest"] = [_entry(t, tokenizer, alignments) for t in entries]
        return json.dumps(obj, ensure_ascii=False) + "\n"
    lines = []
    for t in entries:
        fields = [str(line_no)] if nbest > 1 else []
        fields.append(t.text)
        if scores or nbest > 1:
            fields.append(f"{t.score:.4f}")
        if alignments:
            fields.append(format_alignment(t.alignment or []))
        lines.append(" ||| ".join(fields) + "\n")
    return "".join(lines)

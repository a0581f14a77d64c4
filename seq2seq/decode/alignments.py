"""Word alignments from cross-attention, in the Moses / fast_align ``i-j`` format.

The rule (fairseq's ``--print-alignment`` hard alignment, then merged to words):

1. Attention: the cross-attention of the LAST decoder layer, averaged over ALL its heads, at
   the step that produced each target piece (what
   :class:`~seq2seq.model.decoder_state.DecoderState` keeps with ``need_weights``; CTranslate2's
   ``return_attention`` with the export's ``alignment_layer=-1`` and ``alignment_heads=0``,
   all heads averaged). An ensemble averages
   its members' attention.
2. Pieces: each target piece is aligned to the source piece it attends to most (argmax over
   the source pieces; the source EOS and padding are left out, as fairseq leaves out EOS and
   padding). The target EOS is not aligned.
3. Words: SentencePiece pieces are merged to words, a word starting at each piece that begins
   with ``▁`` (U+2581; the first piece always starts word 0). Source word ``i`` and target
   word ``j`` are aligned if any of their pieces are; each pair appears once.

The output is ``i-j`` pairs (0-based source word, 0-based target word), sorted by ``i`` then
``j`` and separated by spaces: ``0-0 1-2 2-1``. Words are the whitespace-separated words of
the detokenized text for ordinary input (SentencePiece's ``▁`` marks the spaces).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

__all__ = ["WORD_START", "align_pieces", "format_alignment", "parse_alignment", "word_index"]

WORD_START = "\u2581"
"""SentencePiece's whitespace marker: a piece starting with it starts a word."""


def word_index(pieces: Sequence[str]) -> list[int]:
    """The 0-based word of each piece (a new word at each piece starting with ``▁``)."""
    out, word = [], -1
    for k, piece in enumerate(pieces):
        if k == 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word)
    return out


def align_pieces(
    attention: Tensor | Sequence[Sequence[float]],
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
) -> list[tuple[int, int]]:
    """Word alignment pairs ``(i, j)`` from one hypothesis' attention (module docstring).

    Args:
        attention: (L, S') rows of cross-attention, row t from the step that produced target
            piece t; L >= len(tgt_pieces) (a row for EOS may follow) and S' >= len(src_pieces)
            (the source EOS and padding columns may follow; they are ignored).
        src_pieces: the source pieces, without EOS.
        tgt_pieces: the target pieces, without EOS.

    Returns:
        Sorted, distinct (source word, target word) pairs; [] when either side is empty.
    """
    if not src_pieces or not tgt_pieces:
        return []
    n_src, n_tgt = len(src_pieces), len(tgt_pieces)
    src_word, tgt_word = word_index(src_pieces), word_index(tgt_pieces)
    if isinstance(attention, Tensor):
        if attention.dim() != 2 or attention.shape[0] < n_tgt or attention.shape[1] < n_src:
            raise ValueError(
                f"attention has shape {tuple(attention.shape)} for {n_tgt} target pieces and "
                f"{n_src} source pieces"
            )
        # argmax returns the first of equal maxima: ties go to the first source piece
        best = attention[:n_tgt, :n_src].argmax(dim=1).tolist()
        return sorted({(src_word[b], tgt_word[t]) for t, b in enumerate(best)})
    rows = attention
    if len(rows) < len(tgt_pieces) or any(
        len(r) < len(src_pieces) for r in rows[: len(tgt_pieces)]
    ):
        raise ValueError(
            f"attention has {len(rows)} rows for {len(tgt_pieces)} target pieces and "
            f"{len(src_pieces)} source pieces"
        )
    pairs = set()
    for t in range(len(tgt_pieces)):
        row = rows[t][:n_src]
        best = max(range(n_src), key=lambda s: (row[s], -s))  # ties: the first source piece
        pairs.add((src_word[best], tgt_word[t]))
    return sorted(pairs)


def format_alignment(pairs: Sequence[tuple[int, int]]) -> str:
    """``[(0, 0), (1, 2)]`` -> ``"0-0 1-2"`` (Moses / fast_align)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def parse_alignment(text: str) -> list[tuple[int, int]]:
    """``"0-0 1-2"`` -> ``[(0, 0), (1, 2)]``."""
    return [tuple(int(x) for x in pair.split("-")) for pair in text.split()]  # type: ignore[misc]

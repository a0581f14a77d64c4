"""What incremental decoding carries from one step to the next, and how rows select from it.

Incremental decoding contract (fairseq's): the cross-attention K/V of the memory are computed
once per sentence (:meth:`seq2seq.model.transformer.Seq2SeqTransformer.start_state`); each step
appends one position's self-attention K/V to the cache; :meth:`DecoderState.reorder` selects
rows for beam search (and drops finished sentences). With a sliding-window mask the cache keeps
only the keys that the window can still see.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.model.attention import KVCache

__all__ = ["DecoderState", "memory_groups", "select_kv", "select_memory_rows"]


@dataclass
class DecoderState:
    """Everything incremental decoding carries from one step to the next.

    The encoder side is kept once per source sentence ("memory row") and shared by the
    decoder rows (beams) of that sentence: reordering beams never copies it, and the
    cross-attention of a sentence's beams runs as one batch row. Only when sentences leave
    (finished) is it compacted.

    Attributes:
        src_pad: (M, S) bool, True at source padding, per memory row.
        cross_kv: per decoder layer, the memory's (K, V), each (M, H, S, Dh); computed once.
        self_kv: per decoder layer, the (K, V) of the target positions so far, each
            (N, H, t', Dh) with t' <= t (a sliding window keeps only what it can see);
            None before the first step.
        position: absolute position of the next target token (tokens consumed so far).
        cross_attention: (N, S) cross-attention of the last step (last layer, mean over
            heads), filled only when the step was asked for weights.
        memory_rows: (N,) the memory row of each decoder row; None means row i uses memory
            row i (N = M).
        kv_cache: the preallocated buffers that ``self_kv`` are views of (see
            :class:`seq2seq.model.attention.KVCache`), or None. Only a speed-up: a step uses it
            when it still holds exactly ``self_kv`` and otherwise copies ``self_kv`` into a
            new one, so replacing ``self_kv`` by other tensors is always safe.
    """

    src_pad: Tensor
    cross_kv: list[tuple[Tensor, Tensor]]
    self_kv: list[tuple[Tensor, Tensor]] | None = None
    position: int = 0
    cross_attention: Tensor | None = None
    memory_rows: Tensor | None = None
    kv_cache: KVCache | None = None

    def reorder(self, index: Tensor, *, recycle: bool = False) -> DecoderState:
        """Select rows (N,) -> (N',) of the state: beam expansion, reordering, pruning.

        The decoder rows' caches are selected; the memory is only compacted when some
        sentence no longer has a row.

        Args:
            index: (N',) rows to keep, in order (repeats allowed).
            recycle: this state will not be used again (a search loop's ``state =
                reorder(state, index)``): the new state's self-attention cache may be written
                into the buffers of an earlier state instead of new ones (see
                :meth:`seq2seq.model.attention.KVCache.select`). Without it this state is untouched.
        """

        rows = index if self.memory_rows is None else self.memory_rows.index_select(0, index)
        src_pad, cross_kv = self.src_pad, self.cross_kv
        used = torch.unique(rows)  # sorted memory rows still referenced
        if used.numel() < src_pad.size(0):
            src_pad, cross_kv = select_memory_rows(src_pad, cross_kv, used)
            rows = torch.searchsorted(used, rows)
        kv_cache, self_kv = None, None
        if self.kv_cache is not None and self.kv_cache.holds(self.self_kv):
            kv_cache = self.kv_cache.select(index, recycle=recycle)
            self_kv = kv_cache.views()
        elif self.self_kv is not None:
            self_kv = select_kv(self.self_kv, index)
        return DecoderState(
            src_pad=src_pad,
            cross_kv=cross_kv,
            self_kv=self_kv,
            position=self.position,
            cross_attention=None
            if self.cross_attention is None
            else self.cross_attention.index_select(0, index),
            memory_rows=rows,
            kv_cache=kv_cache,
        )

    def row_memory(self) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """(src_pad (N, S), cross_kv each (N, H, S, Dh)): the memory expanded to decoder rows."""
        if self.memory_rows is None:
            return self.src_pad, self.cross_kv
        return select_memory_rows(self.src_pad, self.cross_kv, self.memory_rows)


def select_kv(kv: list[tuple[Tensor, Tensor]], rows: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Rows ``rows`` of every (K, V) pair (dimension 0)."""
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in kv]


def select_memory_rows(
    src_pad: Tensor, cross_kv: list[tuple[Tensor, Tensor]], rows: Tensor
) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """Rows ``rows`` of the memory: its padding and every layer's (K, V)."""
    return src_pad.index_select(0, rows), select_kv(cross_kv, rows)


def memory_groups(memory_rows: Tensor | None, n_memory: int) -> int | None:
    """How many consecutive decoder rows share each memory row, if they do so uniformly.

    1 when ``memory_rows`` is None (row i uses memory row i); k when ``memory_rows`` is
    ``arange(M).repeat_interleave(k)`` (beam search: the K beams of a sentence are adjacent);
    None otherwise (the memory must be expanded to the rows).
    """
    if memory_rows is None:
        return 1
    n = memory_rows.numel()
    if n_memory == 0 or n % n_memory:
        return None
    k = n // n_memory
    grouped = torch.arange(n_memory, device=memory_rows.device).repeat_interleave(k)
    return k if torch.equal(memory_rows, grouped) else None

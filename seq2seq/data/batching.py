"""From a token store to padded batches: the token-bucket batch sampler and collate.

Batching (:class:`TokenBucketSampler`): batches of similar-length pairs holding at most
``max_tokens`` tokens, padding included; seeded shuffle, a new order every epoch, a shard per
rank, exact mid-epoch resume. Collating (:func:`collate`): ``src = pieces + [EOS]``,
``tgt = [BOS] + pieces + [EOS]``, padded with ``PAD_ID`` into a :class:`Batch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Sampler

from seq2seq.core import UserError
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = ["Batch", "TokenBucketSampler", "collate"]


class TokenBucketSampler(Sampler[list[int]]):
    """Batches of similar-length pairs, each holding at most ``max_tokens`` tokens with padding.

    A batch's size is ``n_sentences * max(max_src_len, max_tgt_len)``: the lengths passed in must
    include the specials the collate function adds (``src_lens + 1`` for EOS, ``tgt_lens + 2``
    for BOS and EOS, the widths of ``Batch.src_ids`` and ``Batch.tgt_ids``).

    Each epoch: pairs are sorted by ``max(src, tgt)`` length, then source length, then target
    length, each divided by ``bucket_width`` (ties in random order from ``(seed, epoch)``); batches
    are cut greedily along that order; then (with ``shuffle``) the batch order is shuffled from
    ``(seed, epoch)``. Every replica computes the same batches; rank ``r`` takes every
    ``num_replicas``-th one from ``r``, so shards are disjoint. Shards are made equally long:
    with ``drop_last`` the last ``len % num_replicas`` batches are dropped for the epoch; without
    it a shorter shard repeats its own first batches (so a few of its pairs are seen twice that
    epoch). A pair longer than ``max_tokens`` alone is a batch of its own (never dropped).

    The epoch is ``epoch_fn()`` when given (read at each ``iter``; the datamodule passes the
    trainer's current epoch), else the value given to :meth:`set_epoch`.

    Args:
        src_lens: Per-pair source length, specials included.
        tgt_lens: Per-pair target length, specials included.
        max_tokens: Token budget per batch, padding included.
        seed: Seed of the shuffles.
        shuffle: Shuffle tie order and batch order (training); False gives batches in length
            order (evaluation).
        num_replicas: Number of data-parallel ranks.
        rank: This rank.
        bucket_width: Lengths are compared in units of this many tokens; wider buckets give more
            varied batches, a little more padding.
        drop_last: Equalize shards by dropping batches instead of repeating them.
        epoch_fn: Returns the current epoch at iteration time.
        select: ``select(epoch)`` gives the pair indices that epoch batches (a multilingual
            run's :class:`seq2seq.data.directions.DirectionSampler`); None: every pair once.
    """

    def __init__(
        self,
        src_lens: Sequence[int] | np.ndarray,
        tgt_lens: Sequence[int] | np.ndarray,
        *,
        max_tokens: int,
        seed: int,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
        bucket_width: int = 1,
        drop_last: bool = False,
        epoch_fn: Callable[[], int] | None = None,
        select: Callable[[int], np.ndarray] | None = None,
    ) -> None:
        self._src = np.asarray(src_lens, dtype=np.int64)
        self._tgt = np.asarray(tgt_lens, dtype=np.int64)
        if self._src.shape != self._tgt.shape or self._src.ndim != 1:
            raise ValueError(
                f"src_lens and tgt_lens must be 1-D of one length, got {self._src.shape} "
                f"and {self._tgt.shape}"
            )
        if max_tokens < 1:
            raise UserError(f"max_tokens must be positive, got {max_tokens}")
        if bucket_width < 1:
            raise UserError(f"bucket_width must be positive, got {bucket_width}")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in range for {num_replicas} replicas")
        self.max_tokens = int(max_tokens)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.bucket_width = int(bucket_width)
        self.drop_last = drop_last
        self.epoch_fn = epoch_fn
        self.select = select
        self.epoch = 0
        self._start = 0
        self._start_epoch: int | None = None
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next iterations (ignored when ``epoch_fn`` is given)."""
        self.epoch = int(epoch)

    def set_start_batch(self, n: int, *, epoch: int | None = None) -> None:
        """Make the next iteration skip its first ``n`` batches (resuming mid-epoch); once.

        With ``epoch``, that next iteration is of ``epoch`` whatever ``epoch_fn`` says: a
        resumed Lightning run creates its first iterator before its epoch counter moves past
        an epoch that the checkpoint had finished.
        """
        if n < 0:
            raise ValueError(f"start batch must be >= 0, got {n}")
        self._start = int(n)
        self._start_epoch = None if epoch is None else int(epoch)

    def current_epoch(self) -> int:
        """The epoch the next iteration uses."""
        return int(self.epoch_fn()) if self.epoch_fn is not None else self.epoch

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        pool = None if self.select is None else np.asarray(self.select(epoch), dtype=np.int64)
        src = self._src if pool is None else self._src[pool]
        tgt = self._tgt if pool is None else self._tgt[pool]
        n = len(src)
        if n == 0:
            return []
        w = self.bucket_width
        longest = np.maximum(src, tgt)
        if self.shuffle:
            tie = np.random.default_rng([self.seed, epoch, 0]).permutation(n)
        else:
            tie = np.arange(n)
        order = np.lexsort((tie, tgt // w, src // w, longest // w))  # last key first
        sizes = longest[order]
        if pool is not None:
            order = pool[order]  # positions in the pool -> pair indices
        batches = []
        start, cap = 0, self.max_tokens
        while start < n:
            window = sizes[start : start + max(1, cap // max(int(sizes[start]), 1))]
            widths = np.maximum.accumulate(window)
            fits = np.arange(1, len(window) + 1) * widths <= cap  # True for a prefix
            count = max(1, int(fits.sum()))  # an over-long pair is a batch of its own
            batches.append(order[start : start + count])
            start += count
        if self.shuffle:
            perm = np.random.default_rng([self.seed, epoch, 1]).permutation(len(batches))
            batches = [batches[i] for i in perm]
        return batches

    def batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches (arrays of pair indices) for ``epoch`` (default: the current one)."""
        epoch = self.current_epoch() if epoch is None else int(epoch)
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        batches = self._global_batches(epoch)
        replicas = self.num_replicas
        if replicas > 1:
            if self.drop_last:
                per_rank = len(batches) // replicas
                mine = batches[self.rank : per_rank * replicas : replicas]
            else:
                per_rank = math.ceil(len(batches) / replicas)
                mine = batches[self.rank :: replicas]
                if not mine and batches:  # fewer batches than ranks: borrow one
                    mine = [batches[self.rank % len(batches)]]
                while len(mine) < per_rank:
                    mine = mine + mine[: per_rank - len(mine)]
            batches = mine
        self._cached = (epoch, batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self._start_epoch)
        start, self._start, self._start_epoch = self._start, 0, None
        return (b.tolist() for b in batches[start:])

    def __len__(self) -> int:
        """Batches of a whole epoch for this rank (a start batch does not change it)."""
        return len(self.batches())


@dataclass
class Batch:
    """A padded batch of sentence pairs (Lightning moves its tensors to the device).

    Attributes:
        src_ids: ``(B, S)`` long: source pieces + EOS, then PAD.
        tgt_ids: ``(B, T+1)`` long: BOS + target pieces + EOS, then PAD. The model uses
            ``tgt_in, tgt_out = tgt_ids[:, :-1], tgt_ids[:, 1:]``.
        index: ``(B,)`` long: position of each pair in its store (its split, empty pairs and
            filtered pairs excluded).
        n_tgt_tokens: Non-PAD tokens in ``tgt_out`` (pieces + EOS), for loss normalisation.
    """

    src_ids: torch.Tensor
    tgt_ids: torch.Tensor
    index: torch.Tensor
    n_tgt_tokens: int

    def __len__(self) -> int:
        """B."""
        return self.src_ids.size(0)

    def pin_memory(self) -> Batch:
        """A copy in pinned memory (DataLoader ``pin_memory=True`` calls this)."""
        return Batch(
            src_ids=self.src_ids.pin_memory(),
            tgt_ids=self.tgt_ids.pin_memory(),
            index=self.index.pin_memory(),
            n_tgt_tokens=self.n_tgt_tokens,
        )


def collate(items: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> Batch:
    """``[(index, src_pieces, tgt_pieces), ...]`` -> a :class:`Batch` (specials added, padded)."""
    batch_size = len(items)
    src_width = max(len(src) for _, src, _ in items) + 1
    tgt_width = max(len(tgt) for _, _, tgt in items) + 2
    src_ids = np.full((batch_size, src_width), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_ids = np.full((batch_size, tgt_width), PAD_ID, dtype=np.int64)  # (B, T+1)
    index = np.empty(batch_size, dtype=np.int64)
    n_tgt_tokens = 0
    for b, (i, src, tgt) in enumerate(items):
        n, m = len(src), len(tgt)
        src_ids[b, :n] = src
        src_ids[b, n] = EOS_ID
        tgt_ids[b, 0] = BOS_ID
        tgt_ids[b, 1 : m + 1] = tgt
        tgt_ids[b, m + 1] = EOS_ID
        index[b] = i
        n_tgt_tokens += m + 1
    return Batch(
        src_ids=torch.from_numpy(src_ids),
        tgt_ids=torch.from_numpy(tgt_ids),
        index=torch.from_numpy(index),
        n_tgt_tokens=n_tgt_tokens,
    )

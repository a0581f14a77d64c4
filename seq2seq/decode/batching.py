"""Length-sorted batches under a token budget, for translation and scoring."""

from __future__ import annotations

__all__ = ["batch_by_tokens"]


def batch_by_tokens(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Group indices into length-sorted batches of at most ``max_tokens`` padded tokens.

    A batch costs ``len(batch) * max(lengths in batch)``; a sentence longer than
    ``max_tokens`` forms a batch of its own.

    Returns:
        Batches of indices into ``lengths``, shortest sentences first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        new_width = max(width, lengths[i])
        if current and new_width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, new_width = [], lengths[i]
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    return batches

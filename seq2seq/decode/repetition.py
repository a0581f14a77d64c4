"""The repetition guard: an output that loops is decoded again with ``no_repeat_ngram``.

A loop (:func:`loop_size`): the output holds one n-gram (n = 1..4 tokens) ``k`` times in a row,
where ``k >= 4`` and ``k >= s + 3``, ``s`` being the longest run of any n-gram of the same size
in the source (at least 1): four occurrences in a row, or three more than the source itself
repeats ("ha ha ha ha ha" for "ha ha ha ha ha" is no loop). Tokens are the model's ids (the
source's without its language tag and EOS, the output's without EOS), so a loop inside a word
("hahahahaha" as pieces) counts too.

:class:`RepetitionGuard` is what :meth:`seq2seq.decode.translator.Translator.translate_nbest`
runs after each batch: every sentence whose best hypothesis loops is searched again with
``no_repeat_ngram = max(3, n + 1)`` for a loop of n-grams (then no n-gram can occur more than
three times in a row: the (n+1)-gram spanning two of its occurrences would repeat), with the
same constraints; the new hypotheses replace the old (kept where the new search finds none: a
constraint that itself repeats an n-gram). Each retry is counted (``on_retry``; the server's
``/metrics``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

__all__ = ["RepetitionGuard", "longest_runs", "loop_size"]

MAX_N = 4
"""The longest n-gram a loop is looked for in."""
MIN_REPEATS = 4
"""Occurrences in a row that make a loop (when the source repeats nothing)."""


def longest_runs(tokens: Sequence[int], max_n: int = MAX_N) -> list[int]:
    """Per n in 1..max_n, the most times one n-gram occurs back to back in ``tokens`` (1 when
    none repeats, 0 when ``tokens`` is shorter than n).

    One pass per n: ``m`` positions in a row with ``tokens[i] == tokens[i + n]`` are a stretch
    of period n, ``m + n`` tokens long, which holds its first n-gram ``1 + m // n`` times back
    to back (and k copies back to back make ``(k - 1) * n`` such positions).
    """
    seq = list(tokens)
    out = []
    for n in range(1, max_n + 1):
        if len(seq) < n:
            out.append(0)
            continue
        longest = run = 0
        for a, b in zip(seq, seq[n:]):
            run = run + 1 if a == b else 0
            if run > longest:
                longest = run
        out.append(1 + longest // n)
    return out


def loop_size(source: Sequence[int], output: Sequence[int], max_n: int = MAX_N) -> int:
    """The smallest n (1..max_n) whose n-grams loop in ``output`` beyond ``source`` (module
    docstring), or 0 for none."""
    if len(output) < MIN_REPEATS:
        return 0
    for n, (k, s) in enumerate(zip(longest_runs(output, max_n), longest_runs(source, max_n)), 1):
        if k >= MIN_REPEATS and k >= max(s, 1) + MIN_REPEATS - 1:
            return n
    return 0


class RepetitionGuard:
    """Finds looping outputs and counts their retries (thread-safe: the server's lanes share
    one).

    Args:
        on_retry: called with the number of sentences retried, after each retry.
    """

    def __init__(self, on_retry: Callable[[int], None] | None = None) -> None:
        self.on_retry = on_retry
        self.retries = 0
        self._lock = threading.Lock()

    @staticmethod
    def retry_ngram(n: int) -> int:
        """The ``no_repeat_ngram`` a loop of n-grams is searched again with."""
        return max(3, n + 1)

    def counted(self, k: int) -> None:
        """Count ``k`` retried sentences."""
        with self._lock:
            self.retries += k
        if self.on_retry is not None and k:
            self.on_retry(k)

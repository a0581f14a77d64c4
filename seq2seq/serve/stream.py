"""The batcher's :class:`~seq2seq.serve.batcher.Stream` over the torch engine's continuous beam
search: sentences join a running search between its steps (``seq2seq serve --continuous``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from seq2seq.decode import ContinuousSearch, Translation

if TYPE_CHECKING:
    from seq2seq.decode import SearchOptions

__all__ = ["SearchStream"]


class SearchStream:
    """The batcher's :class:`~seq2seq.serve.batcher.Stream` for one set of search options: text in,
    n-best Translations out (as ``Translator.translate_nbest`` gives them), over a
    :class:`~seq2seq.decode.continuous.ContinuousSearch`.

    Args:
        translator: the served Translator (torch engine with its KV cache).
        opts: the search options every sentence of this search shares.
        on_truncated: called as ``on_truncated(line, n_tokens)`` for a source longer than the
            model's positions.
    """

    def __init__(self, translator, opts: SearchOptions, on_truncated) -> None:
        self.translator = translator
        self.opts = opts
        self.on_truncated = on_truncated
        self.search = ContinuousSearch.for_engine(translator.engine, opts)

    @property
    def active(self) -> int:
        return self.search.active

    @property
    def tokens(self) -> int:
        return self.search.src_tokens

    def advance(self, new: list[tuple[int, str]]) -> list[tuple[int, list]]:
        done: list[tuple[int, list]] = []
        if new:
            ids = self.translator.encode([t for _, t in new], on_truncated=self.on_truncated)
            empty = [Translation("", 0.0, [])] * self.opts.nbest  # no pieces: no search
            done += [(key, list(empty)) for (key, _), x in zip(new, ids) if not x]
            self.search.add([(key, x) for (key, _), x in zip(new, ids) if x])
        finished = self.search.step()
        flat = self.translator.detokenize([h for _, hyps in finished for h in hyps])
        start = 0
        for key, hyps in finished:
            done.append((key, flat[start : start + len(hyps)]))
            start += len(hyps)
        return done

    def reset(self) -> None:
        self.search.reset()

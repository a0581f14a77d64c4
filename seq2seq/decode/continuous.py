"""Continuous batching: a beam search that sentences join at any step and leave when done.

A static batch decodes until its longest sentence ends: the short ones finish early and their
rows leave, so the batch shrinks, and a sentence that arrives meanwhile waits for the whole
batch. Here the batch is refilled instead (iteration-level scheduling, as in Orca and vLLM):
:meth:`ContinuousSearch.add` encodes new sentences and appends their beams to the running
search between two steps, and :meth:`ContinuousSearch.step` returns each sentence the moment
it is finished. The server (seq2seq.serve.service, through seq2seq.serve.batcher) keeps the
engine's rows full this way while requests come and go.

Each sentence is searched exactly as :func:`seq2seq.decode.beam.beam_search` searches it (the same
candidate rules, :func:`seq2seq.decode.beam.beam_candidates`; the same finalization and scores);
only the layout differs. Rows live on one global time axis: a row's tokens and its cached
self-attention keys start at the column where its sentence joined (``start``), everything to
the left is padding its query never sees (``self_key_pad``), and its position embedding counts
from its own start (``positions``). Columns no live row needs any more are trimmed away.

What it does not do (the callers fall back to static batches): sampling and greedy search,
constraints, the n-gram ban, alignments, the sliding-window and block-causal decoder masks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from seq2seq.decode.beam import beam_candidates
from seq2seq.decode.options import SearchOptions, max_target_lens
from seq2seq.decode.search_base import Hypothesis
from seq2seq.model import KVCache

__all__ = ["ContinuousSearch", "supports"]

_NEG_INF = -math.inf


def supports(model, opts: SearchOptions, *, alignments: bool = False) -> bool:
    """Whether :class:`ContinuousSearch` can run ``opts`` on ``model`` (else: static batches)."""
    decoder = getattr(model, "decoder", None)
    return (
        decoder is not None
        and getattr(decoder, "self_mask", None) == "causal"
        and opts.method == "beam"
        and opts.no_repeat_ngram == 0
        and not alignments
    )


@dataclass
class _Sentence:
    key: Hashable
    max_len: int  # hypothesis tokens allowed, EOS included
    finalized: list[Hypothesis] = field(default_factory=list)
    age: int = 0  # tokens its beams generated so far


class ContinuousSearch:
    """Beam search over a changing set of sentences (see the module docstring).

    Args:
        model: a :class:`~seq2seq.model.transformer.Seq2SeqTransformer` in eval mode.
        opts: the search options (beam; see :func:`supports`).
        pad_id: the special ids.
        bos_id: as ``pad_id``.
        eos_id: as ``pad_id``.
        unk_id: as ``pad_id``.
        device: the model's device.

    Use: ``add([(key, src_ids), ...])``, then ``step()`` until :attr:`active` is 0, adding
    more sentences between any two steps; ``step()`` returns ``[(key, hypotheses)]`` of the
    sentences that finished in it, up to ``opts.nbest`` hypotheses each, best first, exactly
    what ``beam_search`` returns for that sentence.
    """

    def __init__(
        self,
        model,
        opts: SearchOptions,
        *,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if not supports(model, opts):
            raise ValueError("continuous search needs beam search, no n-gram ban, causal mask")
        self.model = model
        self.opts = opts
        self.K = opts.beam_size
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id
        self.device = torch.device(device)
        self.max_positions = model.max_positions
        self.reset()

    @classmethod
    def for_engine(cls, engine, opts: SearchOptions) -> ContinuousSearch:
        """Over a :class:`~seq2seq.decode.torch_engine.TorchEngine`'s model, ids and device."""
        return cls(
            engine.model,
            opts,
            pad_id=engine.pad_id,
            bos_id=engine.bos_id,
            eos_id=engine.eos_id,
            unk_id=engine.unk_id,
            device=engine.device,
        )

    def reset(self) -> None:
        """Forget every sentence (the search is empty again)."""
        self.sentences: list[_Sentence] = []  # alive, in row order (K rows each)
        self.tokens: Tensor | None = None  # (N, W) global columns, BOS at each row's start
        self.start: Tensor | None = None  # (N,) column of each row's BOS
        self.scores: Tensor | None = None  # (N,) cumulative log-prob (-inf: dead beam)
        self.row_max: Tensor | None = None  # (N,) max hypothesis length of each row's sentence
        self.token_scores: Tensor | None = None  # (N, W - 1) each token's log-prob
        # The self-attention keys and values of columns 0 .. W-2, appended in place each step.
        # Its reorder is applied at the start of the next step, one copy for all three: the
        # beams' new order (and the finished sentences gone), the rows of sentences that joined
        # since (they read row 0's past, which their queries never see), and the columns
        # trimmed away (_cache_first).
        self.cache: KVCache | None = None
        self._cache_rows: Tensor | None = None  # (N,) the cache row of each row; None: same
        self._cache_first = 0
        self.src_pad: Tensor | None = None  # (M, S)
        self.cross_kv: list[tuple[Tensor, Tensor]] | None = None  # (M, H, S, Dh) each
        self._src_lens: list[int] = []  # per alive sentence

    @property
    def active(self) -> int:
        """Sentences in the search."""
        return len(self.sentences)

    @property
    def src_tokens(self) -> int:
        """Source tokens of the sentences in the search."""
        return sum(self._src_lens)

    # ---- joining ---------------------------------------------------------------------------

    @torch.inference_mode()
    def add(self, items: Sequence[tuple[Hashable, list[int]]]) -> None:
        """Encode the sources (ids ending with EOS, none empty) and let them join the search."""
        if not items:
            return
        K, dev = self.K, self.device
        src = [ids for _, ids in items]
        limits = max_target_lens([len(s) for s in src], self.opts, self.max_positions)
        width = max(len(s) for s in src)
        ids = torch.full((len(src), width), self.pad_id, dtype=torch.long)
        for i, s in enumerate(src):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        memory, src_pad = self.model.encode(ids.to(dev))
        cross_kv = self.model.decoder.memory_kv(memory)
        n_new = len(src) * K
        row_max = torch.tensor(limits, device=dev).repeat_interleave(K)
        self.row_max = row_max if self.row_max is None else torch.cat([self.row_max, row_max])
        if self.tokens is None:
            self.src_pad, self.cross_kv = src_pad, cross_kv
            W = 1
            self.tokens = torch.full((n_new, 1), self.bos_id, dtype=torch.long, device=dev)
            self.start = torch.zeros(n_new, dtype=torch.long, device=dev)
            self.scores = self._first_scores(len(src))
            self.token_scores = torch.zeros((n_new, 0), device=dev)
        else:
            self.src_pad, self.cross_kv = _join_memory(
                self.src_pad, self.cross_kv, src_pad, cross_kv
            )
            W = self.tokens.size(1)
            tokens = torch.full((n_new, W), self.pad_id, dtype=torch.long, device=dev)
            tokens[:, -1] = self.bos_id
            self.tokens = torch.cat([self.tokens, tokens])
            self.start = torch.cat([self.start, torch.full((n_new,), W - 1, device=dev)])
            self.scores = torch.cat([self.scores, self._first_scores(len(src))])
            self.token_scores = torch.cat(
                [self.token_scores, self.token_scores.new_zeros((n_new, W - 1))]
            )
            if self.cache is not None:  # the new rows' past: any row's; they never see it
                n_old = self.tokens.size(0) - n_new
                rows = self._cache_rows
                if rows is None:
                    rows = torch.arange(n_old, device=dev)
                self._cache_rows = torch.cat([rows, rows.new_zeros(n_new)])
        self.sentences += [_Sentence(key, n) for (key, _), n in zip(items, limits)]
        self._src_lens += [len(s) for s in src]

    def _first_scores(self, n: int) -> Tensor:
        """All K beams of a new sentence start identical; only beam 0 is live (fairseq)."""
        scores = torch.full((n, self.K), _NEG_INF, device=self.device)
        scores[:, 0] = 0.0
        return scores.view(-1)

    # ---- one step --------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One decoder step for every alive sentence; the sentences that finished in it."""
        if not self.sentences:
            return []
        K, dev, opts = self.K, self.device, self.opts
        tokens, start = self.tokens, self.start
        W = tokens.size(1)
        generated = (W - 1) - start  # (N,) tokens each row generated so far
        key_pad = torch.arange(W, device=dev)[None, :] < start[:, None]  # (N, W)
        Ba = len(self.sentences)
        memory_rows = torch.arange(Ba, device=dev).repeat_interleave(K)
        if self.cache is None:
            self.cache = KVCache(n_layers=len(self.model.decoder.layers), rows=tokens.size(0))
        elif self._cache_rows is not None or self._cache_first:
            rows = self._cache_rows
            if rows is None:
                rows = torch.arange(tokens.size(0), device=dev)
            self.cache = self.cache.select(rows, recycle=True, first=self._cache_first)
            self._cache_rows, self._cache_first = None, 0
        hidden, _, _ = self.model.decoder(
            tokens[:, -1:],
            self.cross_kv,
            self.src_pad,
            kv_cache=self.cache,
            positions=generated,
            self_key_pad=key_pad,
            memory_rows=memory_rows,
        )
        log_probs = self.model.project(hidden[:, -1]).float().log_softmax(dim=-1)  # (N, V)
        cand_scores, cand_beam, cand_tok, cand_lp = beam_candidates(
            log_probs,
            tokens,
            self.row_max,
            self.scores,
            beam_size=K,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            min_len=opts.min_len,
            no_repeat_ngram=0,
            unk_id=self.unk_id,
            unk_penalty=opts.unk_penalty,
            generated=generated,
        )  # each (Ba, 2K), best first
        n_cand = cand_scores.size(1)
        cand_rows = cand_beam + (torch.arange(Ba, device=dev) * K)[:, None]  # (Ba, 2K)
        is_eos = cand_tok == self.eos_id
        age = [s.age for s in self.sentences]

        # Finalize EOS candidates among the first K, as beam_search does.
        fin = is_eos[:, :K] & cand_scores[:, :K].isfinite()
        if bool(fin.any()):
            s_idx, c_idx = fin.nonzero(as_tuple=True)
            rows = cand_rows[s_idx, c_idx]
            starts = start[rows].tolist()
            hyp_tokens = tokens[rows].tolist()
            hyp_token_scores = torch.cat(
                [self.token_scores[rows], cand_lp[s_idx, c_idx, None]], dim=1
            ).tolist()
            sents = s_idx.tolist()
            denom = torch.tensor(
                [(age[a] + 1) ** opts.len_penalty for a in sents],
                dtype=cand_scores.dtype,
                device=dev,
            )
            hyp_scores = (cand_scores[s_idx, c_idx] / denom).tolist()
            for i, a in enumerate(sents):
                sent = self.sentences[a]
                if len(sent.finalized) < K:
                    s0 = starts[i]
                    sent.finalized.append(
                        Hypothesis(
                            tokens=hyp_tokens[i][s0 + 1 :] + [self.eos_id],
                            score=hyp_scores[i],
                            token_scores=hyp_token_scores[i][s0:],
                            attention=None,
                            prefix_len=0,
                        )
                    )
        done = [
            len(s.finalized) >= K or age[a] + 1 >= s.max_len for a, s in enumerate(self.sentences)
        ]

        # Next beams: the first K candidates that do not end in EOS (dead -inf fill-ins).
        rank_key = torch.arange(n_cand, device=dev) + is_eos * n_cand
        sel = rank_key.topk(K, dim=1, largest=False).indices  # (Ba, K)
        new_rows = cand_rows.gather(1, sel)
        new_tok = cand_tok.gather(1, sel)
        new_lp = cand_lp.gather(1, sel)
        new_scores = cand_scores.gather(1, sel).masked_fill(is_eos.gather(1, sel), _NEG_INF)

        finished = [
            (s.key, sorted(s.finalized, key=lambda h: -h.score)[: opts.nbest])
            for s, d in zip(self.sentences, done)
            if d
        ]
        keep_list = [a for a, d in enumerate(done) if not d]
        if not keep_list:
            self.reset()
            return finished
        if len(keep_list) < Ba:
            keep = torch.tensor(keep_list, device=dev)
            new_rows, new_tok, new_lp, new_scores = (
                new_rows[keep], new_tok[keep], new_lp[keep], new_scores[keep]
            )  # fmt: skip
            self.sentences = [self.sentences[a] for a in keep_list]
            self._src_lens = [self._src_lens[a] for a in keep_list]
            self.src_pad = self.src_pad.index_select(0, keep)
            self.cross_kv = [
                (k.index_select(0, keep), v.index_select(0, keep)) for k, v in self.cross_kv
            ]
        new_rows = new_rows.reshape(-1)
        self.tokens = torch.cat([tokens[new_rows], new_tok.reshape(-1, 1)], dim=1)
        self.token_scores = torch.cat([self.token_scores[new_rows], new_lp.reshape(-1, 1)], dim=1)
        self.scores = new_scores.reshape(-1)
        self.start = start[new_rows]
        self.row_max = self.row_max[new_rows]
        for sent in self.sentences:
            sent.age += 1
        self._cache_rows = new_rows  # applied by the next step, with the joins and the trim
        self._trim()
        return finished

    def _trim(self) -> None:
        """Drop the columns left of every live row's start (the cache's with the next step's
        reorder), and source padding no row needs."""
        c = int(self.start.min())
        if c > 0:
            self.tokens = self.tokens[:, c:]
            self.token_scores = self.token_scores[:, c:]
            self.start = self.start - c
            self._cache_first += c
        s = max(self._src_lens)
        if s < self.src_pad.size(1):
            self.src_pad = self.src_pad[:, :s]
            self.cross_kv = [(k[:, :, :s], v[:, :, :s]) for k, v in self.cross_kv]


def _join_memory(
    pad_a: Tensor,
    kv_a: list[tuple[Tensor, Tensor]],
    pad_b: Tensor,
    kv_b: list[tuple[Tensor, Tensor]],
) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """Stack two encoder memories (M, S) / (M, H, S, Dh), padding the shorter sources."""
    s = max(pad_a.size(1), pad_b.size(1))

    def widen_pad(p: Tensor) -> Tensor:
        return torch.nn.functional.pad(p, (0, s - p.size(1)), value=True)

    def widen(x: Tensor) -> Tensor:
        return torch.nn.functional.pad(x, (0, 0, 0, s - x.size(2)))

    src_pad = torch.cat([widen_pad(pad_a), widen_pad(pad_b)])
    cross = [
        (torch.cat([widen(ka), widen(kb)]), torch.cat([widen(va), widen(vb)]))
        for (ka, va), (kb, vb) in zip(kv_a, kv_b)
    ]
    return src_pad, cross

"""The CTranslate2 engine: CTranslate2's own search over an export folder
(``seq2seq export --format ctranslate2``; seq2seq/export/ctranslate2.py), with the options of
:class:`~seq2seq.decode.options.SearchOptions` mapped to ``translate_batch``.

Same as the torch engine: beam size, n-best, max length (``max_len_a * src_len +
max_len_b``, per sentence), ``min_len``, sampling (temperature, top-k, top-p, seed, though
the random streams differ from torch's). Differences:

- Scores: CTranslate2 normalizes like fairseq, the sum of the token log-probabilities (EOS
  included) divided by ``len ** length_penalty`` with len counting EOS and not the start
  token, except at the steps where ``min_len`` forbids EOS: CTranslate2 renormalizes the
  distribution without EOS, fairseq just drops EOS. A CTranslate2 score is therefore higher
  by ``-log(1 - p(EOS at step 0)) / len ** len_penalty`` (``min_len=1``).
  ``exact_scores=True`` rescores every hypothesis with the model (``score_batch``, one
  teacher-forced pass) and reports fairseq's scores and per-token log-probabilities;
  otherwise ``token_scores`` is empty (CTranslate2 does not return them).
- Max length: CTranslate2 stops a hypothesis at its max length without EOS, where fairseq
  forces EOS and counts its log-prob. The engine appends the EOS and rescores such
  hypotheses with the model, so they rank as with the torch engine.
- Beam search: CTranslate2's beam search decides differently when a sentence is done and
  which finished hypotheses it keeps, so lower n-best entries and rare top-1 results differ.
  Greedy search is token-for-token identical (float32 exports).
- ``no_repeat_ngram`` is passed on as ``no_repeat_ngram_size``; seq2seq's search counts the
  start token in the n-grams (fairseq's rule), which CTranslate2 may not.
- ``unk_penalty``: only 0 (off) or ``inf`` (never produce unk, CTranslate2's ``disable_unk``).
- The pad token is suppressed, as in seq2seq's search.
- Attention (``--alignments``) with beam search: CTranslate2's batched beam search returns a
  wrong attention row for each sentence's first target token, so then every sentence is its
  own sub-batch (``max_batch_size=1``): the torch engine's alignments, less batching.
- Constrained decoding: a prefix is ``target_prefix`` (CTranslate2's score then divides the
  continuation's log-probs by the whole length, prefix included; ``exact_scores`` gives
  seq2seq's, the continuation's own), avoided phrases are ``suppress_sequences``; positive
  constraints are a UserError that points to ``--engine torch``.

Threads: ``torch.get_num_threads()`` (:func:`seq2seq.decode.exported.engine_threads`). On CPU
the engine runs that many single-threaded workers (``inter_threads``), each translating
sub-batches of at most :data:`~seq2seq.export.CT2_SUB_BATCH` sentences of the length-sorted
batch (a smaller call is split evenly over the workers), which keeps every core busy
(docs/benchmarks.md); one sentence alone then runs on one thread.
On a GPU it is one worker with that many threads.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import torch

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.dispatch import with_sampled_nbest
from seq2seq.decode.exported import engine_threads, loaded_export
from seq2seq.decode.options import LoadedEngine, SearchOptions, max_target_lens
from seq2seq.decode.search_base import Hypothesis
from seq2seq.export import CT2_SUB_BATCH, ExportError, read_export_info, require

__all__ = ["CT2_BATCHES_PER_CALL", "CTranslate2Engine", "load_ctranslate2"]


CT2_BATCHES_PER_CALL = 32
"""How many ``max_tokens`` batches the Translator gives one CTranslate2 call on CPU."""


def _ct2_vocabularies(export_dir: Path) -> tuple[list[str], list[str]]:
    shared = export_dir / "shared_vocabulary.json"
    if shared.is_file():
        tokens = json.loads(shared.read_text(encoding="utf-8"))
        return tokens, tokens
    src = json.loads((export_dir / "source_vocabulary.json").read_text(encoding="utf-8"))
    tgt = json.loads((export_dir / "target_vocabulary.json").read_text(encoding="utf-8"))
    return src, tgt


def _ct2_device(device: str) -> tuple[str, int]:
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise UserError(f"the ctranslate2 engine runs on cpu or cuda, not {device!r}")
    return dev.type, dev.index or 0


class CTranslate2Engine:
    """Search with CTranslate2's ``Translator.translate_batch`` (see the module docstring).

    ``positive_constraints = False``: prefixes and avoided phrases only (read by
    seq2seq.serve.service to refuse a constrained request up front).

    Args:
        export_dir: a folder written by ``seq2seq export --format ctranslate2``.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        threads: CPU threads (None: ``torch.get_num_threads()``): that many single-threaded
            workers on CPU, one worker with that many intra-op threads on CUDA.
        compute_type: CTranslate2 compute type (``default`` keeps the exported weight type).
        exact_scores: rescore the hypotheses with the model to report fairseq's scores and
            per-token log-probabilities (costs one teacher-forced pass).
    """

    positive_constraints = False

    def __init__(
        self,
        export_dir: str | Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        compute_type: str = "default",
        exact_scores: bool = False,
    ) -> None:
        ctranslate2 = require("ctranslate2")
        self.export_dir = Path(export_dir)
        self.info = read_export_info(self.export_dir, engine="ctranslate2")
        special = self.info["special_ids"]
        self.pad_id, self.unk_id = special["pad"], special["unk"]
        self.bos_id, self.eos_id = special["bos"], special["eos"]
        self.max_positions = self.info["model"]["max_positions"]
        self.src_vocab, self.tgt_vocab = _ct2_vocabularies(self.export_dir)
        self.tgt_index = {piece: i for i, piece in enumerate(self.tgt_vocab)}
        self.exact_scores = exact_scores
        dev, index = _ct2_device(device)
        n = engine_threads(threads)
        workers, per_worker = (n, 1) if dev == "cpu" else (1, n)
        self.workers = workers
        self.sub_batch = CT2_SUB_BATCH if workers > 1 else 0  # 0: the whole batch at once
        # With several workers, a call of a few max_tokens batches keeps them all busy:
        # CTranslate2 sorts it by length and hands out sub-batches of CT2_SUB_BATCH.
        self.batches_per_call = CT2_BATCHES_PER_CALL if workers > 1 else 1
        # ctranslate2.Translator is thread-safe: calls from several threads queue their
        # sub-batches for the same workers (a server keeps one call per worker in flight).
        self.concurrent_calls = workers
        try:
            self.translator = ctranslate2.Translator(
                str(self.export_dir),
                device=dev,
                device_index=index,
                compute_type=compute_type,
                inter_threads=workers,
                intra_threads=per_worker,
            )
        except (RuntimeError, ValueError) as e:
            raise ExportError(f"CTranslate2 cannot load {self.export_dir}: {e}") from None

    def _options(self, opts: SearchOptions) -> dict:
        if opts.unk_penalty not in (0.0, math.inf):
            raise UserError(
                f"the ctranslate2 engine supports unk_penalty 0 or inf only, got "
                f"{opts.unk_penalty}; use --engine torch or onnx"
            )
        kwargs = dict(
            min_decoding_length=opts.min_len,
            no_repeat_ngram_size=opts.no_repeat_ngram,
            disable_unk=opts.unk_penalty == math.inf,
            suppress_sequences=[[self.tgt_vocab[self.pad_id]]],
            max_input_length=0,
            return_scores=True,
            return_end_token=True,
            length_penalty=opts.len_penalty,
        )
        if opts.method == "beam":
            kwargs.update(beam_size=opts.beam_size, num_hypotheses=opts.nbest)
        elif opts.method == "greedy":
            kwargs.update(beam_size=1, num_hypotheses=1)
        else:
            kwargs.update(
                beam_size=1,
                num_hypotheses=1,
                sampling_topk=opts.top_k,  # 0 = the whole vocabulary, as in seq2seq
                sampling_topp=opts.top_p,
                sampling_temperature=opts.temperature,
            )
        return kwargs

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`seq2seq.decode.options.Engine`.

        ``attention``: CTranslate2's ``return_attention`` (the export's alignment layer and
        heads: the last layer, all heads averaged, for exports made since alignments exist).

        Constraints: a prefix is CTranslate2's ``target_prefix``; avoided phrases are its
        ``suppress_sequences`` (one list per call, so sentences are grouped by their avoid
        lists); include phrases are a UserError (CTranslate2 has no lexically constrained
        search: use ``--engine torch`` or ``onnx``).
        """
        if not src:
            return []
        if constraints is not None and any(c.include for c in constraints):
            raise UserError(
                "the ctranslate2 engine cannot do positive constraints (--constraints, "
                "--terminology); use --engine torch (or onnx)"
            )
        if opts.method == "sample":
            import ctranslate2

            if opts.seed >= 2**32:  # its set_random_seed takes an unsigned 32-bit int
                raise UserError(f"the ctranslate2 engine takes seeds below 2**32, got {opts.seed}")
            ctranslate2.set_random_seed(opts.seed)
        return with_sampled_nbest(
            lambda rows, cons: self._translate(rows, opts, cons, attention), src, opts, constraints
        )

    def _translate(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        if constraints is None or all(not c.avoid for c in constraints):
            return self._translate_group(src, opts, constraints, (), attention)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, c in enumerate(constraints):
            groups[c.avoid].append(i)
        out: list[list[Hypothesis]] = [[] for _ in src]
        for avoid, idx in groups.items():
            hyps = self._translate_group(
                [src[i] for i in idx], opts, [constraints[i] for i in idx], avoid, attention
            )
            for i, h in zip(idx, hyps):
                out[i] = h
        return out

    def _translate_group(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None,
        avoid: tuple[tuple[int, ...], ...],
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        kwargs = self._options(opts)
        kwargs["return_attention"] = attention
        if avoid:
            kwargs["suppress_sequences"] = kwargs["suppress_sequences"] + [
                [self.tgt_vocab[t] for t in a] for a in avoid
            ]
        # Sources end with EOS, which CTranslate2 appends itself (add_source_eos).
        tokens = [[self.src_vocab[i] for i in (s[:-1] if s[-1] == self.eos_id else s)] for s in src]
        prefixes = None
        if constraints is not None and any(c.prefix for c in constraints):
            prefixes = [[self.tgt_vocab[t] for t in c.prefix] for c in constraints]
        # CTranslate2 takes one max_decoding_length per call, and the length limit is per
        # sentence (max_lens counts EOS; CTranslate2's counts it too, and the prefix). One call
        # for the whole batch at its largest limit; the sentences whose output reaches its own
        # limit (rare for a trained model) are decoded again, grouped by limit, under their
        # own limit. (Greedy output is exactly the per-sentence result; a beam could in rare
        # cases also differ below the limit, since a beam cut at the limit competes in the
        # n-best.)
        limits = max_target_lens([len(s) for s in src], opts, self.max_positions)
        if constraints is not None:  # room for the prefix, as in seq2seq's search
            limits = [max(n, c.needed_len()) for n, c in zip(limits, constraints)]
        out: list[list[Hypothesis]] = [[] for _ in src]
        truncated: set[int] = set()  # id() of hypotheses that hit the max length
        first = self._decode(tokens, list(range(len(src))), max(limits), kwargs, prefixes)
        redo: dict[int, list[int]] = defaultdict(list)
        for i, hyps in first.items():
            if all(len(h.tokens) < limits[i] for h in hyps):
                out[i] = hyps
            else:
                redo[limits[i]].append(i)
        for limit, idx in redo.items():
            for i, hyps in self._decode(tokens, idx, limit, kwargs, prefixes).items():
                out[i] = hyps
        for i, hyps in enumerate(out):
            for h in hyps:
                if prefixes is not None:  # (counted tokens: a forced language token)
                    h.prefix_len = len(prefixes[i]) - constraints[i].counted
                if not h.tokens or h.tokens[-1] != self.eos_id:
                    h.tokens.append(self.eos_id)  # the torch engine forces EOS at the max length
                    truncated.add(id(h))
        if self.exact_scores or truncated:
            out = self._rescore(
                tokens,
                out,
                opts.len_penalty,
                which=None if self.exact_scores else truncated,
            )
        return out

    def _sub_batch(self, n: int) -> int:
        """Sentences per worker call for a call of ``n``: at most CT2_SUB_BATCH, and fewer for a
        small call, so that it still spreads over every worker (one sub-batch of 32 would
        leave all but one worker idle)."""
        if self.sub_batch == 0:
            return 0
        return max(1, min(self.sub_batch, -(-n // self.workers)))

    def _decode(
        self,
        tokens: list[list[str]],
        idx: list[int],
        limit: int,
        kwargs: dict,
        prefixes: list[list[str]] | None = None,
    ) -> dict[int, list[Hypothesis]]:
        """translate_batch of the sentences ``idx`` with at most ``limit`` tokens (EOS counted)."""
        if prefixes is not None:
            kwargs = dict(kwargs, target_prefix=[prefixes[i] for i in idx])
        sub_batch = self._sub_batch(len(idx))
        if kwargs["return_attention"] and kwargs["beam_size"] > 1:
            # CTranslate2's beam search (translate_batch, 4.x) returns a wrong attention row
            # for the first target token of a sentence decoded in a batch with others (the
            # later rows are right, and so is every row of a sentence decoded alone): the
            # first word's alignment would depend on the batch. Sub-batches of one sentence
            # give each sentence its own attention, and still spread over the workers.
            sub_batch = 1
        results = self.translator.translate_batch(
            [tokens[i] for i in idx],
            max_decoding_length=limit - 1,
            max_batch_size=sub_batch,
            **kwargs,
        )
        return {
            i: [
                Hypothesis(
                    tokens=[self.tgt_index[p] for p in pieces],
                    score=float(score),
                    token_scores=[],
                    attention=torch.tensor(result.attention[k]) if result.attention else None,
                )
                for k, (pieces, score) in enumerate(zip(result.hypotheses, result.scores))
            ]
            for i, result in zip(idx, results)
        }

    def _rescore(
        self,
        tokens: list[list[str]],
        hyps: list[list[Hypothesis]],
        len_penalty: float,
        *,
        which: set[int] | None,
    ) -> list[list[Hypothesis]]:
        """Score hypotheses with the model (fairseq's normalization, per-token log-probs).

        ``which``: id()s of the hypotheses to rescore (None: all). Each sentence's list is
        sorted again by score.
        """
        flat = [
            (i, h) for i, sent in enumerate(hyps) for h in sent if which is None or id(h) in which
        ]
        if not flat:
            return hyps
        results = self.translator.score_batch(
            [tokens[i] for i, _ in flat],
            [[self.tgt_vocab[t] for t in h.tokens[:-1]] for _, h in flat],
            max_input_length=0,
            max_batch_size=self._sub_batch(len(flat)),
        )
        for (_, h), r in zip(flat, results):
            lps = [float(x) for x in r.log_probs]  # EOS included (score_batch appends it)
            lps[: h.prefix_len] = [0.0] * h.prefix_len  # the prefix is given, not scored
            h.score = sum(lps) / (len(lps) - h.prefix_len) ** len_penalty
            h.token_scores = lps
        return [sorted(sent, key=lambda h: -h.score) for sent in hyps]


def load_ctranslate2(model_dir: str | Path, *, device: str = "cpu") -> LoadedEngine:
    """``model_dir`` is a CTranslate2 export folder (``seq2seq export --format ctranslate2``)."""
    engine = CTranslate2Engine(model_dir, device=device)
    return loaded_export(engine, Path(model_dir), engine.info)

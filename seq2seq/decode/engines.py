"""Engines over exported models: CTranslate2 and ONNX Runtime (see seq2seq/export/exporter.py).

Both implement the :class:`seq2seq.decode.options.Engine` protocol (``translate_ids(src, opts)``),
so ``seq2seq translate --engine ctranslate2|onnx EXPORT_DIR`` has the same options and output
as the torch engine. MODEL_DIR is then the exported folder (it holds the SentencePiece model(s)
and config.yaml with the decoding defaults).

:class:`OnnxEngine` runs seq2seq's own search (seq2seq.decode.search) over the exported graphs: its
step function feeds the last token and the KV cache to an onnxruntime session and the reorder
function is a numpy ``take`` on the cached arrays. Scores, n-best, length penalty, min/max
length, n-gram blocking and the unk penalty therefore behave exactly as with the torch engine.

:class:`CTranslate2Engine` maps :class:`~seq2seq.decode.options.SearchOptions` to CTranslate2's
``translate_batch``. Same: beam size, n-best, max length (``max_len_a * src_len +
max_len_b``, per sentence), ``min_len``, sampling (temperature, top-k, top-p, seed, though
the random streams differ from torch's). Differences, measured against the torch engine:

- Scores (measured): CTranslate2 normalizes like fairseq, the sum of the token
  log-probabilities (EOS included) divided by ``len ** length_penalty`` with len counting EOS
  and not the start token, except at the steps where ``min_len`` forbids EOS: CTranslate2
  renormalizes the distribution without EOS, fairseq just drops EOS. A CTranslate2 score is
  therefore higher by ``-log(1 - p(EOS at step 0)) / len ** len_penalty`` (``min_len=1``),
  about 1e-4 on the small models we measured. ``exact_scores=True`` rescores every hypothesis
  with the model (``score_batch``, one teacher-forced pass) and reports fairseq's scores and
  per-token log-probabilities; otherwise ``token_scores`` is empty (CTranslate2 does not
  return them).
- Max length: CTranslate2 stops a hypothesis at its max length without EOS, where fairseq
  forces EOS and counts its log-prob. The engine appends the EOS and rescores such
  hypotheses with the model, so they rank as with the torch engine.
- Beam search: CTranslate2's beam search decides differently when a sentence is done and
  which finished hypotheses it keeps, so lower n-best entries and rare top-1 results differ
  (measured on a small, undertrained Multi30K model, beam 5: 198 of 200 top-1 outputs
  identical). Greedy search is token-for-token identical (float32 exports).
- ``no_repeat_ngram`` is passed on as ``no_repeat_ngram_size``; seq2seq.decode.search counts the
  start token in the n-grams (fairseq's rule), which CTranslate2 may not.
- ``unk_penalty``: only 0 (off) or ``inf`` (never produce unk, CTranslate2's ``disable_unk``).
- The pad token is suppressed, as in seq2seq.decode.search.
- Constrained decoding: a prefix is ``target_prefix`` (CTranslate2's score then divides the
  continuation's log-probs by the whole length, prefix included; ``exact_scores`` gives
  seq2seq's, the continuation's own), avoided phrases are ``suppress_sequences``; positive
  constraints are a UserError that points to ``--engine torch``. The ONNX engine has them all
  (seq2seq's search), a multi-token prefix step running the decoder graph once per token.

Threads: both engines use ``torch.get_num_threads()`` threads (set it with
``torch.set_num_threads``, as benchmarks/export_parity.py does), so every engine runs with
the same CPU budget as the torch engine. The ONNX engine uses them as intra-op threads. On
CPU the CTranslate2 engine runs that many single-threaded workers (``inter_threads``), each
translating sub-batches of :data:`CT2_SUB_BATCH` sentences of the length-sorted batch: on 2
cores, beam 5, this gives 1.12x the sentences per second of one 2-thread worker in float32
and 1.97x in int8 (measured on the demo model; README, Benchmarks). One sentence alone then
runs on one thread; on a GPU it is one worker with that many threads.
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.options import (
    LoadedEngine,
    SearchOptions,
    StepDecoder,
    max_target_lens,
    reorder_state,
    search_steps,
    with_sampled_nbest,
)
from seq2seq.decode.search import Hypothesis
from seq2seq.export import (
    CT2_SUB_BATCH,
    DECODER_FILE,
    ENCODER_FILE,
    ExportError,
    read_export_info,
    require,
)

__all__ = [
    "ENGINES",
    "CTranslate2Engine",
    "OnnxEngine",
    "OnnxState",
    "TORCH_PRECISIONS",
    "TorchEngine",
    "load_ctranslate2",
    "load_onnx",
    "load_torch",
]


CT2_BATCHES_PER_CALL = 32
"""How many ``max_tokens`` batches the Translator gives one CTranslate2 call on CPU."""


def _threads(threads: int | None) -> int:
    return torch.get_num_threads() if threads is None else threads


# ---------------------------------------------------------------------------------------------
# PyTorch


TORCH_PRECISIONS = ("float32", "bfloat16", "int8")
"""What :class:`TorchEngine` can run the model in."""


class TorchEngine:
    """seq2seq.decode.search over a :class:`~seq2seq.model.transformer.Seq2SeqTransformer` in PyTorch.

    ``use_cache=False`` decodes with ``decode_step_uncached`` (recomputes the prefix every
    step): the benchmark baseline and the reference the KV cache is tested against.

    ``precision``: ``float32`` (the trained weights as they are); ``bfloat16`` (every weight
    and activation in bfloat16, log-probs and beam scores still float32; fast only on CPUs
    with native bfloat16 matrix multiplies, AVX-512 BF16 or AMX, and on GPUs); ``int8``
    (CPU only: every linear layer, the output projection included, becomes
    ``torch.ao.quantization``'s dynamically quantized linear layer: int8 weights, activations
    quantized per call; embeddings, norms and attention stay float32). The README's Benchmarks
    section says what was measured of their speed; their BLEU change was not measured yet
    (``benchmarks/export_parity.py MODEL_DIR --engines torch-int8,torch-bf16``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        device: str | torch.device = "cpu",
        use_cache: bool = True,
        precision: str = "float32",
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int,
    ) -> None:
        if precision not in TORCH_PRECISIONS:
            raise UserError(
                f"unknown precision {precision!r}; expected one of {', '.join(TORCH_PRECISIONS)}"
            )
        self.device = torch.device(device)
        self.precision = precision
        model = model.to(self.device).eval()
        if precision == "bfloat16":
            model = model.to(torch.bfloat16)
        elif precision == "int8":
            model = _quantize_linear_layers(model, self.device)
        self.model = model
        self.use_cache = use_cache
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id

    def _pad(self, src: list[list[int]]) -> Tensor:
        width = max(len(s) for s in src)
        ids = torch.full((len(src), width), self.pad_id, dtype=torch.long)  # (B, S)
        for i, s in enumerate(src):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return ids.to(self.device)

    @property
    def max_positions(self) -> int:
        """Positions the decoder can see (the longest source, and target + BOS)."""
        return self.model.max_positions

    def start(self, src: list[list[int]], *, attention: bool = False) -> StepDecoder:
        """Encode ``src`` (padded here): the step function, reorder and state for the search.

        With ``attention`` each step also keeps the last decoder layer's cross-attention,
        averaged over heads (the explicit, slower attention path).
        """
        model = self.model
        step = model.decode_step if self.use_cache else model.decode_step_uncached
        if attention:
            step = functools.partial(step, need_weights=True)
        return StepDecoder(
            step=step,
            reorder=_recycling_reorder,
            state=model.start_state(self._pad(src)),
            attention=_cross_attention if attention else None,
            max_positions=model.max_positions,
        )

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`Engine`; ``attention``: each hypothesis carries its cross-attention."""
        return search_steps(self, src, opts, constraints, attention=attention, device=self.device)


def _cross_attention(state) -> Tensor:
    """The (N, S) cross-attention a ``need_weights`` step left in the state."""
    return state.cross_attention


def _quantize_linear_layers(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A copy of ``model`` whose ``nn.Linear`` layers are dynamically quantized to int8."""
    if device.type != "cpu":
        raise UserError(f"int8 torch inference runs on the CPU, not {device.type}")
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False)


def _recycling_reorder(state, index: Tensor):
    """The torch engine's ``reorder``: seq2seq.decode.search never uses a state again once it has
    reordered it (``state = reorder(state, index)``), so the KV cache may alternate between two
    buffers instead of allocating new ones (:meth:`DecoderState.reorder`)."""
    return state.reorder(index, recycle=True)


# ---------------------------------------------------------------------------------------------
# ONNX Runtime


@dataclass
class OnnxState:
    """Decoding state of the ONNX engine: numpy arrays, one row per hypothesis.

    Attributes:
        src_pad: (N, S) bool, True at source padding.
        cross: per decoder layer K then V, each (N, H, S, Dh) float32.
        self_kv: per decoder layer K then V of the target positions so far, each (N, H, t', Dh).
        position: absolute position of the next target token.
    """

    src_pad: np.ndarray
    cross: list[np.ndarray]
    self_kv: list[np.ndarray]
    position: int = 0

    def reorder(self, index: Tensor) -> OnnxState:
        """Rows ``index`` (M,) of every array: beam expansion, reordering, dropping."""
        idx = index.cpu().numpy()
        return OnnxState(
            src_pad=self.src_pad.take(idx, axis=0),
            cross=[a.take(idx, axis=0) for a in self.cross],
            self_kv=[a.take(idx, axis=0) for a in self.self_kv],
            position=self.position,
        )


_ONNX_NO_ATTENTION = (
    "the onnx engine has no attention weights (its exported decoder step returns none): "
    "use --engine torch or ctranslate2 for alignments"
)


class OnnxEngine:
    """seq2seq.decode.search over the exported ONNX encoder and KV-cached decoder step.

    Args:
        export_dir: a folder written by ``seq2seq export --format onnx``.
        threads: onnxruntime intra-op threads (None: ``torch.get_num_threads()``).
        providers: onnxruntime execution providers (default: CPU).

    ``no_attention``: why it cannot give word alignments (read by seq2seq.serve.server to refuse an
    ``alignments`` request up front; an engine without the attribute gives attention).
    """

    no_attention = _ONNX_NO_ATTENTION

    def __init__(
        self,
        export_dir: str | Path,
        *,
        threads: int | None = None,
        providers: list[str] | None = None,
    ) -> None:
        ort = require("onnxruntime")
        self.export_dir = Path(export_dir)
        self.info = read_export_info(self.export_dir, engine="onnx")
        special = self.info["special_ids"]
        self.pad_id, self.unk_id = special["pad"], special["unk"]
        self.bos_id, self.eos_id = special["bos"], special["eos"]
        model = self.info["model"]
        self.max_positions = model["max_positions"]
        self.n_layers = model["n_decoder_layers"]
        self.n_heads, self.d_head = model["n_heads"], model["d_head"]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = _threads(threads)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        providers = providers or ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(
            str(self.export_dir / ENCODER_FILE), opts, providers=providers
        )
        self.decoder = ort.InferenceSession(
            str(self.export_dir / DECODER_FILE), opts, providers=providers
        )
        self._cross_names = [f"cross_{kv}_{i}" for i in range(self.n_layers) for kv in "kv"]
        self._self_names = [f"self_{kv}_{i}" for i in range(self.n_layers) for kv in "kv"]

    def start_state(self, src: list[list[int]]) -> OnnxState:
        """Run the encoder on padded ids: one state row per sentence."""
        width = max(len(s) for s in src)
        ids = np.full((len(src), width), self.pad_id, dtype=np.int64)  # (B, S)
        for i, s in enumerate(src):
            ids[i, : len(s)] = s
        src_pad, *cross = self.encoder.run(None, {"src_ids": ids})
        empty = np.zeros((len(src), self.n_heads, 0, self.d_head), dtype=np.float32)
        return OnnxState(src_pad=src_pad, cross=cross, self_kv=[empty] * (2 * self.n_layers))

    def step(self, prefix: Tensor, state: OnnxState) -> tuple[Tensor, OnnxState]:
        """Log-probs (N, V) of the token after ``prefix`` (N, t); feeds the new token(s)."""
        new = prefix[:, state.position :].cpu().numpy()  # (N, t_new), normally t_new = 1
        self_kv, position = state.self_kv, state.position
        log_probs = None
        for j in range(new.shape[1]):
            feed = {
                "tokens": np.ascontiguousarray(new[:, j : j + 1], dtype=np.int64),
                "position": np.array(position, dtype=np.int64),
                "src_pad": state.src_pad,
            }
            feed.update(zip(self._self_names, self_kv))
            feed.update(zip(self._cross_names, state.cross))
            log_probs, *self_kv = self.decoder.run(None, feed)
            position += 1
        if log_probs is None:
            raise ValueError("step() needs at least one new token in the prefix")
        new_state = OnnxState(
            src_pad=state.src_pad, cross=state.cross, self_kv=self_kv, position=position
        )
        return torch.from_numpy(log_probs), new_state

    def start(self, src: list[list[int]], *, attention: bool = False) -> StepDecoder:
        """Encode ``src``: the step function, reorder and state for the search.

        Raises:
            UserError: ``attention`` (the exported decoder step returns no attention).
        """
        if attention:
            raise UserError(_ONNX_NO_ATTENTION)
        return StepDecoder(
            step=self.step,
            reorder=reorder_state,
            state=self.start_state(src),
            attention=None,
            max_positions=self.max_positions,
        )

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`seq2seq.decode.options.Engine` (``attention`` is not supported)."""
        if attention:
            raise UserError(_ONNX_NO_ATTENTION)
        return search_steps(self, src, opts, constraints)


# ---------------------------------------------------------------------------------------------
# CTranslate2


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

    ``positive_constraints = False``: prefixes and avoided phrases only (read by seq2seq.serve.server
    to refuse a constrained request up front).

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
        n = _threads(threads)
        workers, per_worker = (n, 1) if dev == "cpu" else (1, n)
        self.sub_batch = CT2_SUB_BATCH if workers > 1 else 0  # 0: the whole batch at once
        # With several workers, a call of a few max_tokens batches keeps them all busy:
        # CTranslate2 sorts it by length and hands out sub-batches of CT2_SUB_BATCH.
        self.batches_per_call = CT2_BATCHES_PER_CALL if workers > 1 else 1
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
        if constraints is not None:  # room for the prefix, as in seq2seq.decode.search
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
                if prefixes is not None:
                    h.prefix_len = len(prefixes[i])
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
        results = self.translator.translate_batch(
            [tokens[i] for i in idx],
            max_decoding_length=limit - 1,
            max_batch_size=self.sub_batch,
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
            max_batch_size=self.sub_batch,
        )
        for (_, h), r in zip(flat, results):
            lps = [float(x) for x in r.log_probs]  # EOS included (score_batch appends it)
            lps[: h.prefix_len] = [0.0] * h.prefix_len  # the prefix is given, not scored
            h.score = sum(lps) / (len(lps) - h.prefix_len) ** len_penalty
            h.token_scores = lps
        return [sorted(sent, key=lambda h: -h.score) for sent in hyps]


# ---------------------------------------------------------------------------------------------
# Loaders: a model directory or export folder -> LoadedEngine


def load_torch(
    model_dir: str | Path,
    *,
    device: str = "cpu",
    use_cache: bool = True,
    precision: str = "float32",
) -> LoadedEngine:
    """``model_dir`` is a model directory written by ``seq2seq train`` or ``seq2seq average``.

    ``precision``: see :class:`TorchEngine` (``torch-bf16`` and ``torch-int8`` in ENGINES).
    On the CPU this also makes the process keep freed memory for reuse
    (:func:`seq2seq.core.memory.keep_freed_memory`).
    """
    from seq2seq.core import keep_freed_memory
    from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID
    from seq2seq.model import load_model_dir

    if torch.device(device).type == "cpu":
        keep_freed_memory()  # a beam step's (N, V) tensors would be faulted in anew each step
    loaded = load_model_dir(model_dir, device=device)
    engine = TorchEngine(
        loaded.model,
        device=device,
        use_cache=use_cache,
        precision=precision,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
    )
    return LoadedEngine(
        engine=engine,
        tokenizer=loaded.tokenizer,
        cfg=loaded.cfg,
        max_src_positions=loaded.model.max_positions,
    )


def _loaded(engine, export_dir: Path, info: dict) -> LoadedEngine:
    from seq2seq.config import load_config
    from seq2seq.data import Tokenizer

    return LoadedEngine(
        engine=engine,
        tokenizer=Tokenizer.load(export_dir),
        cfg=load_config(export_dir / "config.yaml"),
        max_src_positions=info["model"]["max_positions"],
    )


def load_ctranslate2(model_dir: str | Path, *, device: str = "cpu") -> LoadedEngine:
    """``model_dir`` is a CTranslate2 export folder (``seq2seq export --format ctranslate2``)."""
    engine = CTranslate2Engine(model_dir, device=device)
    return _loaded(engine, Path(model_dir), engine.info)


def load_onnx(model_dir: str | Path, *, device: str = "cpu") -> LoadedEngine:
    """``model_dir`` is an ONNX export folder (``seq2seq export --format onnx``)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise UserError("this onnxruntime has no CUDA support; use --device cpu")
    elif dev.type == "cpu":
        providers = ["CPUExecutionProvider"]
    else:
        raise UserError(f"the onnx engine runs on cpu or cuda, not {device!r}")
    engine = OnnxEngine(model_dir, providers=providers)
    return _loaded(engine, Path(model_dir), engine.info)


ENGINES: dict[str, Callable[..., LoadedEngine]] = {
    "torch": load_torch,
    "torch-nocache": functools.partial(load_torch, use_cache=False),
    "torch-bf16": functools.partial(load_torch, precision="bfloat16"),
    "torch-int8": functools.partial(load_torch, precision="int8"),
    "ctranslate2": load_ctranslate2,
    "onnx": load_onnx,
}
"""Engine name -> ``loader(model_dir, *, device) -> LoadedEngine``. Add runtimes here."""

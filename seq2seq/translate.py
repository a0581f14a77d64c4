"""Translator: a model directory -> ``translate(list[str]) -> list[str]``.

Three layers, each replaceable:

- :class:`SearchOptions`: how to search (beam, greedy or sampling, and their knobs); built
  from the config's ``decoding`` section plus overrides.
- an *engine* (:class:`Engine` protocol): source ids in, hypotheses out. :class:`TorchEngine`
  runs seq2seq.search over the model's KV-cached ``decode_step``. Other runtimes
  (CTranslate2, ONNX) plug in by adding a loader to :data:`ENGINES`.
- :class:`Translator`: text in, text out. SentencePiece encoding, truncation of over-long
  lines, length-sorted batches of at most ``max_tokens`` source tokens, input order restored,
  detokenization.

Length limit (fairseq's): a hypothesis has at most ``max_len_a * src_len + max_len_b`` tokens
before its EOS, where ``src_len`` counts the source ids including their EOS, and at most
``max_positions - 1`` (the decoder cannot see further).

The command-line side lives here too: :class:`LineReader` (strict UTF-8 lines from a byte
stream, translating as soon as a line arrives) and :func:`translate_stream`, the body of
``seq2seq translate``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import select
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig, ExperimentConfig
from seq2seq.errors import UserError
from seq2seq.search import Hypothesis, beam_search, greedy_search, sample

__all__ = [
    "ENGINES",
    "Engine",
    "LineReader",
    "LoadedEngine",
    "SearchOptions",
    "TorchEngine",
    "Translation",
    "Translator",
    "batch_by_tokens",
    "max_target_lens",
    "open_lines",
    "read_lines",
    "run_search",
    "translate_stream",
    "with_sampled_nbest",
]

METHODS = ("beam", "greedy", "sample")


@dataclass(frozen=True)
class SearchOptions(DecodingConfig):
    """How to search: the fields (and defaults) of :class:`seq2seq.config.DecodingConfig`,
    validated together.

    ``method``: ``beam`` (fairseq scoring), ``greedy`` or ``sample`` (temperature, top-k,
    top-p, seeded). ``nbest`` > 1 needs ``beam`` (the n best beams, ``nbest <= beam_size``) or
    ``sample`` (``nbest`` independent samples, best score first). ``max_tokens`` bounds the
    source tokens of one batch, padding included.
    """

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(
                f"unknown decoding method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        if self.nbest < 1:
            raise UserError(f"nbest must be >= 1, got {self.nbest}")
        if self.method == "greedy" and self.nbest > 1:
            raise UserError(f"nbest {self.nbest} needs beam search or sampling, not greedy")
        if self.method == "beam" and not 1 <= self.nbest <= self.beam_size:
            raise UserError(
                f"nbest ({self.nbest}) must be between 1 and the beam size ({self.beam_size})"
            )
        if self.max_tokens < 1:
            raise UserError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @classmethod
    def from_config(cls, cfg: DecodingConfig, **overrides: object) -> SearchOptions:
        """Options from the config's ``decoding`` section; overrides that are None are ignored.

        Raises:
            TypeError: an override that is not a field of SearchOptions.
            UserError: an invalid combination (unknown method, nbest > beam size, ...).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"unknown search options {unknown}; valid: {sorted(names)}")
        values = {name: getattr(cfg, name) for name in names if hasattr(cfg, name)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **overrides: object) -> SearchOptions:
        """A copy with the non-None ``overrides`` applied (validated like the constructor)."""
        return SearchOptions.from_config(self, **overrides)  # type: ignore[arg-type]


class Engine(Protocol):
    """Source ids in, hypotheses out: what :class:`Translator` needs from a runtime.

    An engine may also have an int attribute ``batches_per_call`` (read with a default of 1):
    :meth:`Translator.translate_nbest` then hands it batches of up to that many times
    ``max_tokens`` source tokens, for an engine that splits batches over workers itself
    (:class:`seq2seq.engines.CTranslate2Engine` on CPU).
    """

    def translate_ids(self, src: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """Search each source.

        Args:
            src: source ids per sentence, each ending with EOS, none empty, none longer than
                the model's max positions.
            opts: search options; ``nbest`` hypotheses per sentence are wanted.

        Returns:
            Per sentence, up to ``opts.nbest`` hypotheses, best first; tokens end with EOS.
        """
        ...


def max_target_lens(src_lens: list[int], opts: SearchOptions, max_positions: int) -> list[int]:
    """Per-sentence hypothesis length limits for seq2seq.search (EOS counted there).

    fairseq's ``min(max_len_a * src_len + max_len_b, max_positions - 1)`` tokens before EOS,
    plus one for the EOS (seq2seq.search counts it). Never below 1.
    """
    out = []
    for n in src_lens:
        before_eos = min(int(opts.max_len_a * n + opts.max_len_b), max_positions - 1)
        out.append(max(before_eos, 0) + 1)
    return out


def run_search(
    step,
    reorder,
    state,
    src: list[list[int]],
    opts: SearchOptions,
    *,
    max_positions: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    unk_id: int,
    device: torch.device | None = None,
) -> list[list[Hypothesis]]:
    """Run the search ``opts`` names over ``step``/``reorder`` from ``state`` (B rows).

    ``src`` only gives the source lengths (for the max length). Sampling with ``nbest`` > 1
    must be handled by the caller (replicate the rows), as the torch engine does.
    """
    max_lens = torch.tensor(
        max_target_lens([len(s) for s in src], opts, max_positions), device=device
    )  # (B,)
    common = dict(
        batch_size=len(src),
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        max_lens=max_lens,
        min_len=opts.min_len,
        len_penalty=opts.len_penalty,
        no_repeat_ngram=opts.no_repeat_ngram,
        unk_id=unk_id,
        unk_penalty=opts.unk_penalty,
        device=device,
    )
    if opts.method == "beam":
        return beam_search(
            step, reorder, state, beam_size=opts.beam_size, nbest=opts.nbest, **common
        )
    if opts.method == "greedy":
        return [[h] for h in greedy_search(step, reorder, state, **common)]
    hyps = sample(
        step,
        reorder,
        state,
        temperature=opts.temperature,
        top_k=opts.top_k,
        top_p=opts.top_p,
        seed=opts.seed,
        **common,
    )
    return [[h] for h in hyps]


def with_sampled_nbest(search, src: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
    """``nbest`` independent samples per sentence (rows replicated), best score first."""
    if not (opts.method == "sample" and opts.nbest > 1):
        return search(src)
    rows = [s for s in src for _ in range(opts.nbest)]
    flat = search(rows)
    groups = [flat[i : i + opts.nbest] for i in range(0, len(flat), opts.nbest)]
    return [sorted((h for g in grp for h in g), key=lambda h: -h.score) for grp in groups]


class TorchEngine:
    """seq2seq.search over a :class:`~seq2seq.model.Seq2SeqTransformer` in PyTorch.

    ``use_cache=False`` decodes with ``decode_step_uncached`` (recomputes the prefix every
    step): the benchmark baseline and the reference the KV cache is tested against.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        device: str | torch.device = "cpu",
        use_cache: bool = True,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.use_cache = use_cache
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id

    def _pad(self, src: list[list[int]]) -> Tensor:
        width = max(len(s) for s in src)
        ids = torch.full((len(src), width), self.pad_id, dtype=torch.long)  # (B, S)
        for i, s in enumerate(src):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return ids.to(self.device)

    def translate_ids(self, src: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """See :class:`Engine`."""
        if not src:
            return []
        return with_sampled_nbest(lambda rows: self._search(rows, opts), src, opts)

    @torch.inference_mode()
    def _search(self, src: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        model = self.model
        return run_search(
            model.decode_step if self.use_cache else model.decode_step_uncached,
            _reorder,
            model.start_state(self._pad(src)),
            src,
            opts,
            max_positions=model.max_positions,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            unk_id=self.unk_id,
            device=self.device,
        )


def _reorder(state, index: Tensor):
    return state.reorder(index)


# ---------------------------------------------------------------------------------------------
# Engines by name: a loader turns a model directory into an engine and what goes with it


@dataclass
class LoadedEngine:
    """What :meth:`Translator.load` needs from an engine loader."""

    engine: Engine
    tokenizer: object  # seq2seq.tokenizer.Tokenizer
    cfg: ExperimentConfig
    max_src_positions: int


def _load_torch(model_dir: Path, *, device: str, use_cache: bool = True) -> LoadedEngine:
    from seq2seq.modeldir import load_model_dir
    from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

    loaded = load_model_dir(model_dir, device=device)
    engine = TorchEngine(
        loaded.model,
        device=device,
        use_cache=use_cache,
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


def _load_exported(model_dir: Path, *, device: str, engine: str) -> LoadedEngine:
    """CTranslate2 / ONNX: ``model_dir`` is the folder ``seq2seq export`` wrote."""
    from seq2seq import engines

    loader = engines.load_ctranslate2 if engine == "ctranslate2" else engines.load_onnx
    return loader(model_dir, device=device)


ENGINES: dict[str, Callable[..., LoadedEngine]] = {
    "torch": _load_torch,
    "torch-nocache": functools.partial(_load_torch, use_cache=False),
    "ctranslate2": functools.partial(_load_exported, engine="ctranslate2"),
    "onnx": functools.partial(_load_exported, engine="onnx"),
}
"""Engine name -> ``loader(model_dir, *, device) -> LoadedEngine``. Add runtimes here."""


# ---------------------------------------------------------------------------------------------
# Text in, text out


class Translation(NamedTuple):
    """One hypothesis as text: ``(text, score, token_scores)``."""

    text: str
    score: float
    """Length-normalized log-probability (see seq2seq.search)."""
    token_scores: list[float]
    """Log-probability of each generated SentencePiece token, EOS included."""


TruncationCallback = Callable[[int, int], None]
"""``on_truncated(line_no, n_src_tokens)``: 1-based line number, source tokens before cutting."""


def _warn_truncated(line_no: int, n_tokens: int) -> None:
    warnings.warn(f"line {line_no}: {n_tokens} source tokens, truncated", stacklevel=3)


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


class Translator:
    """Translates sentences with an engine and a SentencePiece tokenizer.

    Args:
        engine: anything with ``translate_ids`` (see :class:`Engine`).
        tokenizer: a :class:`seq2seq.tokenizer.Tokenizer`.
        max_src_positions: the model's max positions; longer sources are truncated to
            ``max_src_positions - 1`` pieces + EOS.
        opts: default search options (per-call overrides are allowed).
        cfg: the model's experiment config, when known (kept for callers such as evaluate).
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer,
        *,
        max_src_positions: int,
        opts: SearchOptions,
        cfg: ExperimentConfig | None = None,
    ) -> None:
        from seq2seq.tokenizer import EOS_ID

        if max_src_positions < 2:
            raise ValueError(f"max_src_positions must be >= 2, got {max_src_positions}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_src_positions = max_src_positions
        self.opts = opts
        self.cfg = cfg
        self.eos_id = EOS_ID

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        *,
        device: str = "cpu",
        engine: str = "torch",
        **overrides: object,
    ) -> Translator:
        """Load a model directory with the named engine; ``overrides`` change search options.

        Raises:
            UserError: an unknown engine (the message lists the available ones), a bad model
                directory, invalid options.
        """
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r}; available: {', '.join(sorted(ENGINES))}")
        loaded = ENGINES[engine](Path(model_dir), device=device)
        opts = SearchOptions.from_config(loaded.cfg.decoding, **overrides)
        return cls(
            loaded.engine,
            loaded.tokenizer,
            max_src_positions=loaded.max_src_positions,
            opts=opts,
            cfg=loaded.cfg,
        )

    def encode(
        self, sentences: list[str], *, on_truncated: TruncationCallback | None = None
    ) -> list[list[int]]:
        """Source ids (pieces + EOS) per sentence; [] for a sentence without any piece.

        Over-long sentences keep their first ``max_src_positions - 1`` pieces + EOS and are
        reported through ``on_truncated(line_no, n_tokens)`` (default: a warning).
        """
        report = on_truncated or _warn_truncated
        out = []
        pieces = self.tokenizer.encode_src(list(sentences)) if sentences else []
        for i, ids in enumerate(pieces):
            if not ids:
                out.append([])
                continue
            if len(ids) + 1 > self.max_src_positions:
                report(i + 1, len(ids) + 1)
                ids = ids[: self.max_src_positions - 1]
            out.append(list(ids) + [self.eos_id])
        return out

    def translate_nbest(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        **overrides: object,
    ) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first, in input order.

        An empty sentence (no SentencePiece piece) gets ``nbest`` empty translations of score
        0 without running the model, so every input has the same number of entries.
        """
        opts = self.opts.replace(**overrides) if overrides else self.opts
        src = self.encode(sentences, on_truncated=on_truncated)
        results: list[list[Translation]] = [[Translation("", 0.0, [])] * opts.nbest for _ in src]
        todo = [i for i, ids in enumerate(src) if ids]
        # An engine that splits batches itself takes larger calls (Engine.batches_per_call).
        per_call = opts.max_tokens * getattr(self.engine, "batches_per_call", 1)
        for batch in batch_by_tokens([len(src[i]) for i in todo], per_call):
            idx = [todo[j] for j in batch]
            hyps = self.engine.translate_ids([src[i] for i in idx], opts)
            # One SentencePiece call for the whole batch (each call starts its threads).
            flat = self._detokenize([h for sent_hyps in hyps for h in sent_hyps])
            start = 0
            for i, sent_hyps in zip(idx, hyps):
                results[i] = flat[start : start + len(sent_hyps)]
                start += len(sent_hyps)
        return results

    def translate(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        **overrides: object,
    ) -> list[str]:
        """The best translation of each sentence, in input order ('' for an empty sentence)."""
        overrides["nbest"] = 1
        nbest = self.translate_nbest(sentences, on_truncated=on_truncated, **overrides)
        return [t[0].text if t else "" for t in nbest]

    def _detokenize(self, hyps: list[Hypothesis]) -> list[Translation]:
        ids = [[t for t in h.tokens if t != self.eos_id] for h in hyps]
        texts = self.tokenizer.decode_tgt(ids) if ids else []
        # A translation is one line whatever the SentencePiece model decodes (byte-fallback
        # pieces can decode to "\n" or "\r"): output lines must stay aligned with the input.
        texts = [t.replace("\r", " ").replace("\n", " ") for t in texts]
        return [
            Translation(text, float(h.score), list(h.token_scores)) for text, h in zip(texts, hyps)
        ]


# ---------------------------------------------------------------------------------------------
# Lines in, lines out: the body of `seq2seq translate`


class LineReader:
    """Strict UTF-8 lines from a byte stream, available as soon as they arrive.

    Lines end at ``b"\\n"`` only (a trailing ``b"\\r"`` is dropped; no other character splits
    a line); a last line without a newline counts. :meth:`read_chunk` blocks until at least one
    line (or the end) is there, then takes whatever more lines are already readable, up to
    ``max_lines``: typed lines are translated one by one, a file or pipe in big chunks.

    Args:
        stream: a binary stream (``sys.stdin.buffer``, ``open(path, "rb")``).
        name: shown in errors (``<stdin>`` or the path).
    """

    def __init__(self, stream: BinaryIO, *, name: str) -> None:
        self.stream = stream
        self.name = name
        self.line_no = 0  # lines returned so far
        self._buf = b""
        self._eof = False
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            self._fd = None

    def _ready(self) -> bool:
        try:
            return bool(select.select([self._fd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _fill(self) -> None:
        data = os.read(self._fd, 1 << 16) if self._fd is not None else self.stream.readline()
        if data:
            self._buf += data
        else:
            self._eof = True

    def _decode(self, raw: bytes) -> str:
        self.line_no += 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(
                f"{self.name}:{self.line_no}: invalid UTF-8 (byte {e.start + 1} of the line)"
            ) from None
        if self.line_no == 1 and text.startswith("\ufeff"):
            text = text[1:]  # a byte-order mark is not part of the sentence
        return text

    def read_chunk(self, max_lines: int) -> list[str]:
        """The next 1..max_lines lines; [] at the end of the stream."""
        lines: list[str] = []
        while len(lines) < max_lines:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                lines.append(self._decode(raw))
                continue
            if self._eof:
                if self._buf:
                    raw, self._buf = self._buf, b""
                    lines.append(self._decode(raw))
                break
            if lines and (self._fd is None or not self._ready()):
                break  # translate what we have rather than wait for more
            self._fill()
        return lines

    def __iter__(self) -> Iterator[str]:
        while chunk := self.read_chunk(1024):
            yield from chunk


def open_lines(path: str | Path) -> LineReader:
    """A :class:`LineReader` over a file, or standard input for ``-``.

    Raises:
        UserError: the file does not exist or cannot be read.
    """
    import sys

    if str(path) == "-":
        return LineReader(sys.stdin.buffer, name="<stdin>")
    try:
        return LineReader(open(path, "rb"), name=str(path))  # noqa: SIM115 (lives with the reader)
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def read_lines(path: str | Path) -> list[str]:
    """Every line of a text file (strict UTF-8, split on newlines only, see :class:`LineReader`).

    Raises:
        UserError: a missing file, or invalid UTF-8 (naming the file and line).
    """
    reader = open_lines(path)
    try:
        return list(reader)
    finally:
        reader.stream.close()


def _resume_point(partial: Path, nbest: int) -> int:
    """Input lines already translated in ``partial``; cut it back to exactly those lines.

    A kill can leave a half-written last line (dropped here); with n-best output the last
    input's entries may be incomplete, so its lines are dropped too.
    """
    data = partial.read_bytes()
    data = data[: data.rfind(b"\n") + 1]  # complete lines only
    lines = [ln + b"\n" for ln in data.split(b"\n")[:-1]]  # b"\n" only, like LineReader
    if nbest > 1 and lines:
        try:
            numbers = [int(ln.split(b" ||| ", 1)[0]) for ln in lines]
        except ValueError:
            raise UserError(
                f"{partial} does not hold n-best lines (LINE ||| TEXT ||| SCORE); "
                "cannot resume it with --nbest"
            ) from None
        last = numbers[-1]
        lines = [ln for ln, n in zip(lines, numbers) if n < last]
        done = last - 1
    else:
        done = len(lines)
    with open(partial, "wb") as f:
        f.write(b"".join(lines))
    return done


def translate_stream(
    translator: Translator,
    reader: LineReader,
    *,
    stdout: BinaryIO,
    output: Path | None = None,
    resume: bool = False,
    buffer_lines: int = 1000,
    warn: Callable[[str], None],
) -> int:
    """Translate every line of ``reader``; one output line per input line (``nbest`` with n-best).

    Output goes to ``stdout`` (flushed after each chunk), or with ``output`` to
    ``OUTPUT.partial``, flushed after each chunk and renamed to ``output`` only once the whole
    input is translated: an interrupted run never leaves a complete-looking ``output``. With
    ``resume``, the lines already in ``OUTPUT.partial`` are kept and their input lines skipped.

    N-best output (``nbest`` > 1): ``LINE ||| TEXT ||| SCORE`` lines, ``nbest`` per input line,
    best first, LINE the 1-based input line number, SCORE the normalized log-probability.

    Returns:
        The number of input lines read.
    """
    nbest = translator.opts.nbest
    partial = None if output is None else output.with_name(output.name + ".partial")
    skip = 0
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        if resume and partial.is_file():
            skip = _resume_point(partial, nbest)
            if skip:
                warn(f"resuming {partial}: {skip} lines already translated")
        out = open(partial, "ab" if resume else "wb")  # noqa: SIM115 (closed below)
    else:
        out = stdout
    try:
        while skip > 0 and (done := reader.read_chunk(min(skip, buffer_lines))):
            skip -= len(done)
        while chunk := reader.read_chunk(buffer_lines):
            first = reader.line_no - len(chunk) + 1

            def on_truncated(i: int, n: int, first: int = first) -> None:
                warn(
                    f"{reader.name}:{first + i - 1}: {n} source tokens exceed the model's "
                    f"{translator.max_src_positions} positions; truncated"
                )

            if nbest > 1:
                results = translator.translate_nbest(chunk, on_truncated=on_truncated)
                text = "".join(
                    f"{first + i} ||| {t.text} ||| {t.score:.4f}\n"
                    for i, entries in enumerate(results)
                    for t in entries
                )
            else:
                text = "".join(
                    t + "\n" for t in translator.translate(chunk, on_truncated=on_truncated)
                )
            out.write(text.encode("utf-8"))
            out.flush()
        if partial is not None:
            os.fsync(out.fileno())
    finally:
        if out is not stdout:
            out.close()
    if partial is not None and output is not None:
        os.replace(partial, output)
    return reader.line_no

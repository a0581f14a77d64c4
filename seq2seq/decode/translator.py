"""Translator: a model directory -> ``translate(list[str]) -> list[str]``.

Three layers, each replaceable:

- :class:`~seq2seq.decode.options.SearchOptions`: how to search (beam, greedy or sampling, and their
  knobs); built from the config's ``decoding`` section plus overrides (re-exported here).
- an *engine* (:class:`seq2seq.decode.options.Engine` protocol): source ids in, hypotheses out.
  :class:`seq2seq.decode.engines.TorchEngine` runs seq2seq.decode.search over the model's KV-cached
  ``decode_step``; other runtimes (CTranslate2, ONNX) plug in by adding a loader to
  :data:`seq2seq.decode.engines.ENGINES`.
- :class:`Translator`: text in, text out. SentencePiece encoding, truncation of over-long
  lines, length-sorted batches of at most ``max_tokens`` source tokens, input order restored,
  detokenization.

The command-line side lives here too: :class:`LineReader` (strict UTF-8 lines from a byte
stream, translating as soon as a line arrives) and :func:`translate_stream`, the body of
``seq2seq translate``.
"""

from __future__ import annotations

import os
import select
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from seq2seq.config import ExperimentConfig
from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints, Terminology
from seq2seq.decode.engines import ENGINES
from seq2seq.decode.options import Engine, SearchOptions
from seq2seq.decode.search import Hypothesis

__all__ = [
    "LineConstraints",
    "LineReader",
    "SearchOptions",
    "Translation",
    "Translator",
    "batch_by_tokens",
    "open_lines",
    "read_lines",
    "translate_stream",
]

# ---------------------------------------------------------------------------------------------
# Text in, text out


class Translation(NamedTuple):
    """One hypothesis as text: ``(text, score, token_scores, tokens, alignment)``."""

    text: str
    score: float
    """Length-normalized log-probability (see seq2seq.decode.search)."""
    token_scores: list[float]
    """Log-probability of each generated SentencePiece token, EOS included."""
    tokens: list[int] = []
    """The generated target ids, EOS included (``tokenizer.tgt_pieces`` names them)."""
    alignment: list[tuple[int, int]] | None = None
    """Word alignment ``(source word, target word)`` pairs (seq2seq.decode.alignments), when asked."""


TruncationCallback = Callable[[int, int], None]
"""``on_truncated(line_no, n_src_tokens)``: 1-based line number, source tokens before cutting."""


def _sentence_name(i: int) -> str:
    return f"sentence {i + 1}"


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
        tokenizer: a :class:`seq2seq.data.tokenizer.Tokenizer`.
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
        from seq2seq.data import EOS_ID

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
        model_dir: str | Path | Sequence[str | Path],
        *,
        device: str = "cpu",
        engine: str = "torch",
        **overrides: object,
    ) -> Translator:
        """Load a model directory with the named engine; ``overrides`` change search options.

        Several directories make an ensemble (:func:`seq2seq.decode.ensemble.load_ensemble`): their
        probabilities are averaged at every step; the decoding defaults are the first's.

        Raises:
            UserError: an unknown engine (the message lists the available ones), a bad model
                directory, invalid options, ensemble members with other vocabularies.
        """
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r}; available: {', '.join(sorted(ENGINES))}")
        dirs = [model_dir] if isinstance(model_dir, (str, os.PathLike)) else list(model_dir)
        if not dirs:
            raise UserError("give a model directory")
        if len(dirs) > 1:
            from seq2seq.decode.ensemble import load_ensemble

            loaded = load_ensemble(dirs, device=device, engine=engine)
        else:
            loaded = ENGINES[engine](Path(dirs[0]), device=device)
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
        alignments: bool = False,
        constraints: list[list[str]] | None = None,
        ordered: bool = False,
        prefix: list[str | None] | None = None,
        avoid: list[list[str]] | None = None,
        terminology: Terminology | None = None,
        where: Callable[[int], str] | None = None,
        **overrides: object,
    ) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first, in input order.

        An empty sentence (no SentencePiece piece) gets ``nbest`` empty translations of score
        0 without running the model, so every input has the same number of entries.
        ``alignments``: fill each translation's word ``alignment`` from the cross-attention
        (:mod:`seq2seq.decode.alignments`; the engine must return attention: torch, ctranslate2).

        Constrained decoding (README, "Constrained decoding"), each a list with one entry per
        sentence (None: nothing for any sentence):

        - ``constraints``: phrases that must appear in the output (``ordered``: in this order).
        - ``prefix``: text the output starts with (None or "" for none); the search continues
          after it, and the returned text includes it.
        - ``avoid``: phrases that must never appear.
        - ``terminology``: the target terms of the source terms a sentence contains become
          constraints of that sentence (after its own ``constraints``).

        Phrases are matched as their SentencePiece pieces (each phrase encoded on its own).
        ``where(i)`` names sentence i (0-based) in errors (default: ``sentence i+1``).

        Raises:
            UserError: a constraint no output can meet (naming the sentence), or one the
                engine cannot do (the CTranslate2 engine and positive constraints).
        """
        opts = self.opts.replace(**overrides) if overrides else self.opts
        name = where or _sentence_name
        src = self.encode(sentences, on_truncated=on_truncated)
        cons = self.constraints_for(
            sentences,
            constraints=constraints,
            ordered=ordered,
            prefix=prefix,
            avoid=avoid,
            terminology=terminology,
            no_repeat_ngram=opts.no_repeat_ngram,
            where=where,
        )
        results: list[list[Translation]] = [[Translation("", 0.0, [])] * opts.nbest for _ in src]
        todo = [i for i, ids in enumerate(src) if ids]
        # An engine that splits batches itself takes larger calls (Engine.batches_per_call).
        per_call = opts.max_tokens * getattr(self.engine, "batches_per_call", 1)
        for batch in batch_by_tokens([len(src[i]) for i in todo], per_call):
            idx = [todo[j] for j in batch]
            extra = {"attention": True} if alignments else {}
            if cons is not None:
                extra["constraints"] = [cons[i] for i in idx]
            hyps = self.engine.translate_ids([src[i] for i in idx], opts, **extra)
            if cons is not None:
                for i, sent_hyps in zip(idx, hyps):
                    if not sent_hyps:
                        raise UserError(
                            f"{name(i)}: no output meets its constraints within the "
                            "length limit (an avoided phrase or --no-repeat-ngram blocks them)"
                        )
            # One SentencePiece call for the whole batch (each call starts its threads).
            flat = self.detokenize([h for sent_hyps in hyps for h in sent_hyps])
            start = 0
            for i, sent_hyps in zip(idx, hyps):
                results[i] = flat[start : start + len(sent_hyps)]
                if alignments:
                    results[i] = self._align(sentences[i], src[i], sent_hyps, results[i])
                start += len(sent_hyps)
        if alignments:  # empty sentences: nothing to align
            results = [[t._replace(alignment=t.alignment or []) for t in r] for r in results]
        return results

    def _align(
        self, sentence: str, src: list[int], hyps: list[Hypothesis], out: list[Translation]
    ) -> list[Translation]:
        from seq2seq.decode.alignments import align_pieces

        src_pieces = self.tokenizer.src_pieces(sentence)[: len(src) - 1]  # as encoded, no EOS
        aligned = []
        for h, t in zip(hyps, out):
            if h.attention is None:
                raise UserError("this engine returns no attention: no alignments")
            tgt_pieces = self.tokenizer.tgt_pieces([x for x in h.tokens if x != self.eos_id])
            aligned.append(t._replace(alignment=align_pieces(h.attention, src_pieces, tgt_pieces)))
        return aligned

    def constraints_for(
        self,
        sentences: list[str],
        *,
        constraints: list[list[str]] | None = None,
        ordered: bool = False,
        prefix: list[str | None] | None = None,
        avoid: list[list[str]] | None = None,
        terminology: Terminology | None = None,
        no_repeat_ngram: int = 0,
        where: Callable[[int], str] | None = None,
    ) -> list[Constraints] | None:
        """Per sentence, its :class:`~seq2seq.decode.constraints.Constraints` in target ids; None
        when there are none at all. (See :meth:`translate_nbest`.)"""
        from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

        name = where or _sentence_name
        n = len(sentences)
        for arg, given in (("constraints", constraints), ("prefix", prefix), ("avoid", avoid)):
            if given is not None and len(given) != n:
                raise ValueError(f"{arg} has {len(given)} entries for {n} sentences")
        if constraints is None and prefix is None and avoid is None and terminology is None:
            return None
        include_text = [list(constraints[i]) if constraints else [] for i in range(n)]
        if terminology is not None:
            for i, text in enumerate(sentences):
                include_text[i] += terminology.targets_for(text)
        avoid_text = [list(avoid[i]) if avoid else [] for i in range(n)]
        prefix_text = [(prefix[i] or "") if prefix else "" for i in range(n)]
        # One SentencePiece call for every phrase of the batch.
        flat = [p for row in include_text for p in row] + [p for row in avoid_text for p in row]
        flat += [p for p in prefix_text if p]
        for p in flat:
            if not isinstance(p, str):
                raise UserError(f"a constraint must be text, got {type(p).__name__}")
        ids = iter(self.tokenizer.encode_tgt(flat) if flat else [])
        include_ids = [[next(ids) for _ in row] for row in include_text]
        avoid_ids = [[next(ids) for _ in row] for row in avoid_text]
        prefix_ids = [next(ids) if p else [] for p in prefix_text]
        out = []
        for i in range(n):
            c = Constraints(
                prefix=prefix_ids[i], include=include_ids[i], ordered=ordered, avoid=avoid_ids[i]
            )
            try:
                c.check(special=(PAD_ID, BOS_ID, EOS_ID), no_repeat_ngram=no_repeat_ngram)
            except UserError as e:
                raise UserError(f"{name(i)}: {e}") from None
            for text, ids_ in [*zip(include_text[i], c.include), (prefix_text[i], c.prefix)]:
                if UNK_ID in ids_:
                    raise UserError(
                        f"{name(i)}: {text!r} has characters the target vocabulary lacks "
                        "(they would be output as the unknown piece)"
                    )
            if c.needed_len() > self.max_src_positions:
                raise UserError(
                    f"{name(i)}: the prefix and constraints take {c.needed_len() - 1} "
                    f"tokens; the model has {self.max_src_positions} positions"
                )
            out.append(c)
        return out

    def translate(
        self,
        sentences: list[str],
        *,
        on_truncated: TruncationCallback | None = None,
        **overrides: object,
    ) -> list[str]:
        """The best translation of each sentence, in input order ('' for an empty sentence).

        Takes the constraint arguments of :meth:`translate_nbest` too."""
        overrides["nbest"] = 1
        nbest = self.translate_nbest(sentences, on_truncated=on_truncated, **overrides)
        return [t[0].text if t else "" for t in nbest]

    def detokenize(self, hyps: list[Hypothesis]) -> list[Translation]:
        """One :class:`Translation` per hypothesis (its text, score and token scores)."""
        ids = [[t for t in h.tokens if t != self.eos_id] for h in hyps]
        texts = self.tokenizer.decode_tgt(ids) if ids else []
        # A translation is one line whatever the SentencePiece model decodes (byte-fallback
        # pieces can decode to "\n" or "\r"): output lines must stay aligned with the input.
        texts = [t.replace("\r", " ").replace("\n", " ") for t in texts]
        return [
            Translation(text, float(h.score), list(h.token_scores), list(h.tokens))
            for text, h in zip(texts, hyps)
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


@dataclass(frozen=True)
class LineConstraints:
    """How ``seq2seq translate`` reads constraints from its input lines (fairseq-interactive's
    tab-separated format, extended).

    A line is ``SOURCE`` followed by tab-separated fields, in this order: with ``prefix``, one
    field, the text the output starts with; with ``constraints`` (``ordered`` or
    ``unordered``), one field per phrase that must appear; with ``avoid``, one field per phrase
    that must not. With both ``constraints`` and ``avoid``, an empty field ends the
    constraints and the avoided phrases follow. Without any of the three, lines are not split
    (a tab is part of the source). ``terminology`` adds the target terms of the source terms
    a line contains to its constraints.
    """

    constraints: str | None = None
    prefix: bool = False
    avoid: bool = False
    terminology: Terminology | None = None

    def __post_init__(self) -> None:
        if self.constraints not in (None, "ordered", "unordered"):
            raise UserError(f"--constraints must be ordered or unordered, got {self.constraints!r}")
        if self.constraints == "ordered" and self.terminology is not None:
            raise UserError("terminology constraints are unordered: use --constraints unordered")

    @property
    def splits(self) -> bool:
        return self.constraints is not None or self.prefix or self.avoid

    @property
    def active(self) -> bool:
        return self.splits or self.terminology is not None

    def parse(self, lines: list[str], where: Callable[[int], str]) -> tuple[list[str], dict]:
        """(the source texts, the constraint arguments of :meth:`Translator.translate_nbest`)."""
        if not self.splits:
            return lines, dict(terminology=self.terminology)
        sources, prefixes, includes, avoids = [], [], [], []
        for i, line in enumerate(lines):
            source, *rest = line.split("\t")
            sources.append(source)
            prefixes.append(rest.pop(0) if self.prefix and rest else "")
            include: list[str] = []
            avoid: list[str] = []
            if self.constraints is not None and self.avoid:
                cut = rest.index("") if "" in rest else len(rest)
                include, avoid = rest[:cut], rest[cut + 1 :]
            elif self.constraints is not None:
                include = rest
            elif self.avoid:
                avoid = rest
            elif rest:
                raise UserError(
                    f"{where(i)}: {len(rest)} field(s) after the prefix; constraints need "
                    "--constraints ordered|unordered, avoided phrases --avoid"
                )
            includes.append([p for p in include if p.strip()])
            avoids.append([p for p in avoid if p.strip()])
        return sources, dict(
            constraints=includes if self.constraints is not None else None,
            ordered=self.constraints == "ordered",
            prefix=prefixes if self.prefix else None,
            avoid=avoids if self.avoid else None,
            terminology=self.terminology,
        )


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
    output_format: str = "text",
    scores: bool = False,
    alignments: bool = False,
    line_constraints: LineConstraints | None = None,
) -> int:
    """Translate every line of ``reader``; one output line per input line (``nbest`` with n-best).

    Output goes to ``stdout`` (flushed after each chunk), or with ``output`` to
    ``OUTPUT.partial``, flushed after each chunk and renamed to ``output`` only once the whole
    input is translated: an interrupted run never leaves a complete-looking ``output``. With
    ``resume``, the lines already in ``OUTPUT.partial`` are kept and their input lines skipped.

    N-best output (``nbest`` > 1): ``LINE ||| TEXT ||| SCORE`` lines, ``nbest`` per input line,
    best first, LINE the 1-based input line number, SCORE the normalized log-probability.
    ``scores``, ``alignments`` and ``output_format="jsonl"`` (one JSON object per input line):
    see :mod:`seq2seq.decode.outputs`.

    ``line_constraints``: read constraints from the lines (:class:`LineConstraints`).

    Returns:
        The number of input lines read.
    """
    from seq2seq.decode.outputs import OUTPUT_FORMATS, format_line

    if output_format not in OUTPUT_FORMATS:
        raise UserError(
            f"unknown output format {output_format!r}; expected one of {', '.join(OUTPUT_FORMATS)}"
        )
    nbest = translator.opts.nbest
    plain = output_format == "text" and not scores and not alignments
    lines_per_input = nbest if output_format == "text" else 1  # what resuming counts
    partial = None if output is None else output.with_name(output.name + ".partial")
    skip = 0
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        if resume and partial.is_file():
            skip = _resume_point(partial, lines_per_input)
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

            def where(i: int, first: int = first) -> str:
                return f"{reader.name}:{first + i}"

            kwargs: dict = {}
            if line_constraints is not None and line_constraints.active:
                chunk, kwargs = line_constraints.parse(chunk, where)
                kwargs["where"] = where
            if not plain:
                results = translator.translate_nbest(
                    chunk, on_truncated=on_truncated, alignments=alignments, **kwargs
                )
                text = "".join(
                    format_line(
                        first + i,
                        entries,
                        output_format=output_format,
                        nbest=nbest,
                        scores=scores,
                        alignments=alignments,
                        tokenizer=translator.tokenizer,
                    )
                    for i, entries in enumerate(results)
                )
            elif nbest > 1:
                results = translator.translate_nbest(chunk, on_truncated=on_truncated, **kwargs)
                text = "".join(
                    f"{first + i} ||| {t.text} ||| {t.score:.4f}\n"
                    for i, entries in enumerate(results)
                    for t in entries
                )
            else:
                translations = translator.translate(chunk, on_truncated=on_truncated, **kwargs)
                text = "".join(t + "\n" for t in translations)
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

"""Lines in, lines out: the body of ``seq2seq translate`` (:func:`translate_stream`), the
constraints its input lines may carry (:class:`LineConstraints`), and resuming an interrupted
``OUTPUT.partial``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from seq2seq.core import UserError
from seq2seq.decode.glossary import Glossary
from seq2seq.decode.lines import LineReader
from seq2seq.decode.paragraphs import translate_lines
from seq2seq.decode.terminology import Terminology
from seq2seq.decode.translator import Translator

__all__ = ["LineConstraints", "translate_stream"]


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
    a line contains to its constraints; ``glossary`` (``--glossary``, ``--do-not-translate``)
    applies a :class:`~seq2seq.decode.glossary.Glossary` to every line.
    """

    constraints: str | None = None
    prefix: bool = False
    avoid: bool = False
    terminology: Terminology | None = None
    glossary: Glossary | None = None

    def __post_init__(self) -> None:
        if self.constraints not in (None, "ordered", "unordered"):
            raise UserError(f"--constraints must be ordered or unordered, got {self.constraints!r}")
        if self.constraints == "ordered" and self.terminology is not None:
            raise UserError("terminology constraints are unordered: use --constraints unordered")
        if self.constraints == "ordered" and self.glossary is not None:
            raise UserError("glossary constraints are unordered: use --constraints unordered")

    @property
    def splits(self) -> bool:
        return self.constraints is not None or self.prefix or self.avoid

    @property
    def active(self) -> bool:
        return self.splits or self.terminology is not None or self.glossary is not None

    def parse(self, lines: list[str], where: Callable[[int], str]) -> tuple[list[str], dict]:
        """(the source texts, the constraint arguments of :meth:`Translator.translate_nbest`)."""
        if not self.splits:
            return lines, dict(terminology=self.terminology, glossary=self.glossary)
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
            glossary=self.glossary,
        )


def _resume_point(partial: Path, nbest: int) -> int:
    """Input lines already translated in ``partial``; cut it back to exactly those lines.

    A kill can leave a half-written last line (dropped here); with n-best output the last
    input's entries are kept only if all ``nbest`` of them are there (an input never has more,
    and all of a chunk's lines are written at once).
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
        if numbers.count(last) == nbest:
            done = last
        else:
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
    split_sentences: str = "auto",
    language: str = "en",
) -> int:
    """Translate every line of ``reader``; one output line per input line (``nbest`` with n-best).

    Output goes to ``stdout`` (flushed after each chunk), or with ``output`` to
    ``OUTPUT.partial``, flushed after each chunk and renamed to ``output`` only once the whole
    input is translated: an interrupted run never leaves a complete-looking ``output``. With
    ``resume``, the lines already in ``OUTPUT.partial`` are kept and their input lines skipped.

    Lines are translated in blocks of ``buffer_lines`` (lines 1 to N, N + 1 to 2N, ...), each
    block's lines batched the same way whatever came before, so a resumed run, which starts
    at the beginning of the block it resumes in, gives the uninterrupted run's bytes (a run
    resumed with another ``buffer_lines`` batches differently).

    N-best output (``nbest`` > 1): ``LINE ||| TEXT ||| SCORE`` lines, ``nbest`` per input line,
    best first, LINE the 1-based input line number, SCORE the normalized log-probability.
    ``scores``, ``alignments`` and ``output_format="jsonl"`` (one JSON object per input line):
    see :mod:`seq2seq.decode.outputs`.

    ``line_constraints``: read constraints from the lines (:class:`LineConstraints`).

    ``split_sentences`` (plain text output; ``language``: the source's): a line is cut into
    sentences and rejoined (:func:`seq2seq.decode.paragraphs.translate_lines`): ``auto``, a line
    too long for the model (it would be truncated); ``always``, every line; ``never``, none.
    Lines with constraints of their own (tab-separated fields) are never cut. ``always`` with
    n-best, scores, alignments or JSON lines is an error (a line is then one sentence).

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
    if split_sentences == "always" and not (plain and nbest == 1):
        raise UserError(
            "--split-sentences always gives plain text: not with --nbest, --scores, "
            "--alignments or --output-format jsonl"
        )
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
    # Batches are a function of line numbers: the input is cut into blocks of buffer_lines
    # lines (a chunk never crosses a block's end), and the token-bucket batching within a chunk
    # is deterministic. A resumed run translates the block it resumes in from its first line,
    # as the uninterrupted run did, and writes only the lines the partial output lacks: the
    # constrained search's rounding depends on a sentence's batch, so the output is then
    # byte-identical. (Lines that arrive slower than they are translated, typed or piped,
    # are translated as they come, so their chunks within a block depend on timing.)
    block = buffer_lines
    try:
        start = skip - skip % block  # the lines before the block that holds line skip + 1
        while reader.line_no < start and reader.read_chunk(min(start - reader.line_no, block)):
            pass
        while chunk := reader.read_chunk(block - reader.line_no % block):
            first = reader.line_no - len(chunk) + 1
            kept = max(0, skip - (first - 1))  # this chunk's lines already in the partial

            def on_truncated(i: int, n: int, first: int = first, kept: int = kept) -> None:
                if i <= kept:  # said when the partial output's run translated it
                    return
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
                    if i >= kept
                )
            elif nbest > 1:
                results = translator.translate_nbest(chunk, on_truncated=on_truncated, **kwargs)
                text = "".join(
                    f"{first + i} ||| {t.text} ||| {t.score:.4f}\n"
                    for i, entries in enumerate(results)
                    if i >= kept
                    for t in entries
                )
            else:
                split = (
                    "never"
                    if line_constraints is not None and line_constraints.splits
                    else (split_sentences)
                )
                translations = translate_lines(
                    translator,
                    chunk,
                    split=split,
                    language=language,
                    on_truncated=on_truncated,
                    **kwargs,
                )
                text = "".join(t + "\n" for t in translations[kept:])
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

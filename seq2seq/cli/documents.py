"""``seq2seq translate -i report.docx -o report.de.docx``: a document through the formats of
:mod:`seq2seq.documents`, its runs cut into sentences by the server's splitter
(:func:`seq2seq.decode.split_text`), so that the CLI and ``POST /translate_file`` give the same
file."""

from __future__ import annotations

from pathlib import Path

from seq2seq.core import UserError

__all__ = ["is_document", "translate_document_file"]

_TEXT = ".txt"  # plain text keeps the line-by-line stream (one output line per input line)


def is_document(path: str) -> bool:
    """Whether ``-i path`` is a document (a suffix of a format other than plain text)."""
    from seq2seq.documents import FORMATS

    suffix = Path(path).suffix.lower()
    return path != "-" and suffix in FORMATS and suffix != _TEXT


def _refuse_line_options(args) -> None:
    line_only = {
        "--nbest": (getattr(args, "nbest", None) or 1) > 1,
        "--scores": args.scores,
        "--alignments": args.alignments,
        "--output-format jsonl": args.output_format != "text",
        "--constraints": bool(args.constraints),
        "--prefix": args.prefix,
        "--avoid": args.avoid,
        "--resume": args.resume,
    }
    used = [flag for flag, on in line_only.items() if on]
    if used:
        raise UserError(f"{', '.join(used)}: only for text translated line by line, not a document")


def translate_document_file(args, search: dict) -> int:
    """Translate the document ``args.input`` into ``args.output`` (written atomically)."""
    from seq2seq.cli.arguments import set_threads
    from seq2seq.core import atomic_open, check_device, check_paths
    from seq2seq.decode import Terminology, Translator, split_text
    from seq2seq.documents import format_for, needs_alignments, open_document, run_translation

    _refuse_line_options(args)
    if not args.output:
        raise UserError(f"-i {args.input}: a document needs -o FILE (of the same type)")
    if format_for(args.input)[0] != format_for(args.output)[0]:
        raise UserError(
            f"-o {args.output}: a {Path(args.input).suffix} document is written as "
            f"{Path(args.input).suffix}"
        )
    set_threads(args.threads)
    check_device(args.device)
    check_paths(
        input_files=[("-i", args.input), ("--terminology", args.terminology)],
        input_dirs=[("model directory", args.model_dir)],
        output_files=[("-o", args.output)],
    )
    terminology = Terminology.load(args.terminology) if args.terminology else None
    data = Path(args.input).read_bytes()
    doc = open_document(args.input, data)  # a bad file fails before the model loads
    translator = Translator.load(args.model_dir, device=args.device, engine=args.engine, **search)
    translator.set_direction(args.source_lang, args.target_lang)
    can_align = not getattr(translator.engine, "no_attention", None)
    if not can_align:  # every differently formatted piece on its own
        doc = open_document(args.input, data, inline=False)
    language = translator.source_lang or "en"

    texts, boundaries = doc.texts, doc.boundaries
    split = [split_text(t, language=language).sentences for t in texts]
    flat = [s for sentences in split for s in sentences]
    need = [
        n and can_align
        for sentences, bounds in zip(split, boundaries)
        for n in needs_alignments(sentences, bounds)
    ]
    hyps: list = [None] * len(flat)
    for align in (False, True):  # sentences with formatting inside need alignments (slower)
        idx = [i for i, n in enumerate(need) if n == align]
        if idx:
            best = translator.translate_nbest(
                [flat[i] for i in idx], alignments=align, terminology=terminology, nbest=1
            )
            for i, h in zip(idx, best):
                hyps[i] = h[0]
    done, at = [], 0
    for sentences, bounds in zip(split, boundaries):
        mine = hyps[at : at + len(sentences)]
        at += len(sentences)
        done.append(
            run_translation(sentences, [h.text for h in mine], [h.alignment for h in mine], bounds)
        )
    result = doc.write(done)
    with atomic_open(args.output, "wb") as f:
        f.write(result)
    return 0

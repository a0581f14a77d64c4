"""``seq2seq translate`` and ``seq2seq score``: text through a model (or an ensemble), and
given translations scored by forced decoding."""

from __future__ import annotations

import dataclasses
import sys

from seq2seq.cli.arguments import (
    add_command,
    add_direction_args,
    add_search_args,
    checked_options,
    search_overrides,
    set_threads,
    warner,
)
from seq2seq.cli.documents import is_document
from seq2seq.core import UserError, check_device, check_paths

__all__ = ["add_score", "add_translate"]


def add_translate(sub) -> None:
    """Add ``seq2seq translate``."""
    p = add_command(
        sub,
        "translate",
        "Translate text line by line with a model directory.\n\n"
        "Reads FILE or standard input and writes one output line per input line (an empty\n"
        "line gives an empty line). Lines are translated as soon as they arrive: typed lines\n"
        "one at a time, files and pipes in batches. A line too long for the model is cut into\n"
        "sentences and their translations rejoined (--split-sentences). With --nbest N > 1\n"
        "each input line gives N lines `LINE ||| TEXT ||| SCORE` (LINE: 1-based input line\n"
        "number; SCORE: length-normalized log-probability; best first). A sentence still too\n"
        "long (or a long line with --nbest, --scores, jsonl) is truncated to the model's max\n"
        "positions, with a warning naming the line. With -o FILE the output is\n"
        "written to FILE.partial and renamed to FILE only once complete; --resume continues\n"
        "an interrupted FILE.partial, skipping the input lines it already holds.\n\n"
        "A document (-i FILE with a suffix of .docx .pptx .xlsx .odt .odp .epub .srt .vtt .md\n"
        ".po .xlf .xliff .html .htm) is translated as a whole into -o FILE of the same type:\n"
        "its text, paragraph by paragraph and sentence by sentence, everything else kept\n"
        "(docs/translating.md: Documents).",
        "echo 'A man rides a bike.' | seq2seq translate runs/multi30k_small\n"
        "seq2seq translate runs/multi30k_small -i test.en -o test.de --beam 5 --max-tokens 8000\n"
        "seq2seq translate runs/multi30k_small -i test.en --nbest 4 --beam 4\n"
        "seq2seq translate runs/multi30k_small -i report.docx -o report.de.docx\n"
        "printf 'A man rides a bike.\\tFahrrad\\n' | seq2seq translate runs/multi30k_small "
        "--constraints unordered",
    )
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="+",
        help="model directory (seq2seq train --out); several: an ensemble (their mean "
        "probability at each step; same vocabularies)",
    )
    p.add_argument("-i", "--input", default="-", metavar="FILE", help="input text (- = stdin)")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument(
        "--resume", action="store_true", help="with -o: continue an interrupted FILE.partial"
    )
    p.add_argument(
        "--split-sentences",
        choices=["auto", "always", "never"],
        default="auto",
        help="cut a line into sentences (the server's Moses rules) and rejoin their "
        "translations: auto (default), only a line too long for the model, which would "
        "otherwise be truncated; always, every line; never",
    )
    p.add_argument(
        "--repetition-guard",
        action="store_true",
        help="search a translation that loops (one 1- to 4-gram four times in a row beyond "
        "its source) again with no_repeat_ngram (the server's default)",
    )
    p.add_argument(
        "--buffer-lines",
        type=int,
        default=1000,
        metavar="N",
        help="at most N already-available lines translated together (default: 1000)",
    )
    out = p.add_argument_group("output (seq2seq/decode/outputs.py)")
    out.add_argument(
        "--scores", action="store_true", help="TEXT ||| SCORE (length-normalized log-prob)"
    )
    out.add_argument(
        "--alignments",
        action="store_true",
        help="append ||| i-j word alignments (last decoder layer's cross-attention, mean of "
        "heads; torch or ctranslate2 engine)",
    )
    out.add_argument(
        "--output-format",
        default="text",
        choices=["text", "jsonl"],
        help="jsonl: one JSON object per input line (text, score, tokens, alignment, nbest)",
    )
    g = p.add_argument_group(
        "constrained decoding (docs/translating.md: Constrained decoding); fields follow the source on "
        "each line, tab-separated: [PREFIX] [CONSTRAINT ...] [<empty field> AVOID ...]"
    )
    g.add_argument(
        "--constraints",
        choices=["ordered", "unordered"],
        help="each line's fields after the source are phrases the output must hold",
    )
    g.add_argument(
        "--prefix",
        action="store_true",
        help="the first field after the source is text the output starts with",
    )
    g.add_argument(
        "--avoid",
        action="store_true",
        help="fields (after an empty field, with --constraints) are phrases never to output",
    )
    g.add_argument(
        "--terminology",
        metavar="FILE",
        help="SOURCE<TAB>TARGET lines: a line holding SOURCE must hold TARGET (exact case)",
    )
    g.add_argument(
        "--glossary",
        metavar="FILE",
        help="SOURCE<TAB>TARGET lines: where SOURCE occurs (whole words; a lowercase term in "
        "any case), the translation holds TARGET (docs/translating.md: Glossaries)",
    )
    g.add_argument(
        "--do-not-translate",
        metavar="FILE",
        help="one term per line: where a term occurs (as --glossary matches), it comes back "
        "byte for byte",
    )
    add_search_args(p)
    add_direction_args(p)
    p.set_defaults(run=_run_translate)


def _run_translate(args) -> int:
    from pathlib import Path

    from seq2seq.decode import (
        Glossary,
        LineConstraints,
        RepetitionGuard,
        Terminology,
        Translator,
        fingerprint,
        guard,
        open_lines,
        translate_stream,
    )

    search = search_overrides(args)  # checked now, before anything loads
    if is_document(args.input):
        from seq2seq.cli.documents import translate_document_file

        return translate_document_file(args, search)
    if args.resume and not args.output:
        raise UserError("--resume needs -o FILE")
    if args.buffer_lines < 1:
        raise UserError(f"--buffer-lines must be >= 1, got {args.buffer_lines}")
    set_threads(args.threads)
    check_device(args.device)
    check_paths(
        input_files=[
            ("-i", args.input),
            ("--terminology", args.terminology),
            ("--glossary", args.glossary),
            ("--do-not-translate", args.do_not_translate),
        ],
        input_dirs=[("model directory", args.model_dir)],
        output_files=[
            ("-o", args.output and f"{args.output}{suffix}")
            for suffix in ("", ".partial", ".partial.json")  # the output and what precedes it
        ],
    )
    line_constraints = LineConstraints(
        constraints=args.constraints,
        prefix=args.prefix,
        avoid=args.avoid,
        terminology=Terminology.load(args.terminology) if args.terminology else None,
        glossary=(
            Glossary.load(args.glossary, args.do_not_translate)
            if args.glossary or args.do_not_translate
            else None
        ),
    )
    if args.output:
        args.on_stop = f"{args.output}.partial holds the lines so far: rerun with --resume"
    translator = Translator.load(args.model_dir, device=args.device, engine=args.engine, **search)
    translator.set_direction(args.source_lang, args.target_lang)
    reader = open_lines(args.input)  # after the checks that can refuse, so none leaves it open
    if args.repetition_guard:
        translator.repetition_guard = RepetitionGuard()
    record = fingerprint(
        input_path=args.input,
        model_dir=args.model_dir,
        engine=args.engine,
        options={
            **dataclasses.asdict(translator.opts),
            "buffer_lines": args.buffer_lines,  # batches are cut at its blocks of lines
            "output_format": args.output_format,
            "scores": args.scores,
            "alignments": args.alignments,
            "constraints": args.constraints,
            "prefix": args.prefix,
            "avoid": args.avoid,
            "terminology": _file_id(args.terminology),
            "glossary": _file_id(args.glossary),
            "do_not_translate": _file_id(args.do_not_translate),
            "direction": [translator.source_lang, translator.target_lang],
            "split_sentences": args.split_sentences,
            "repetition_guard": args.repetition_guard,
        },
    )
    with guard(args.output, resume=args.resume, record=record):  # --resume trusts FILE.partial
        translate_stream(
            translator,
            reader,
            stdout=sys.stdout.buffer,
            output=Path(args.output) if args.output else None,
            resume=args.resume,
            buffer_lines=args.buffer_lines,
            warn=warner("translate"),
            output_format=args.output_format,
            scores=args.scores,
            alignments=args.alignments,
            line_constraints=line_constraints,
            split_sentences=args.split_sentences,
            language=translator.source_lang
            or (translator.directions[0][0] if translator.directions else "en"),
        )
    if translator.repetition_guard is not None and translator.repetition_guard.retries:
        warner("translate")(
            f"{translator.repetition_guard.retries} looping translation(s) searched again "
            "with no_repeat_ngram"
        )
    return 0


def _file_id(path: str | None) -> str | None:
    """A file's sha256 (for --resume's record), or None."""
    if path is None:
        return None
    from seq2seq.core import sha256_file

    return sha256_file(path)


def add_score(sub) -> None:
    """Add ``seq2seq score``."""
    p = add_command(
        sub,
        "score",
        "Forced decoding: score given translations with a model (or an ensemble).\n\n"
        "Prints one line per (source, target) pair, `LOG_PROB<TAB>SCORE<TAB>N_TOKENS`:\n"
        "the summed log-probability of the target's pieces and EOS, that divided by\n"
        "N_TOKENS ** len_penalty (the beam search's score), and N_TOKENS (pieces + EOS);\n"
        "--output-format jsonl adds the per-token log-probabilities. The corpus perplexity\n"
        "goes to stderr. Several MODEL_DIRs score with the ensemble's mean probability.",
        "seq2seq score runs/m30k --src test.en --tgt test.hyp\n"
        "seq2seq score runs/m30k runs/m30k_seed2 --src test.en --tgt test.de -o scores.txt",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", nargs="+", help="model directory(ies)")
    p.add_argument("--src", required=True, metavar="FILE", help="source sentences")
    p.add_argument("--tgt", required=True, metavar="FILE", help="target sentences, aligned")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    p.add_argument(
        "--output-format", default="text", choices=["text", "jsonl"], help="default: text"
    )
    p.add_argument(
        "--len-penalty", type=float, help="normalization exponent (default: the model's)"
    )
    p.add_argument("--max-tokens", type=int, help="padded tokens per batch")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: torch's)")
    add_direction_args(p)
    p.set_defaults(run=_run_score)


def _run_score(args) -> int:
    from seq2seq.core import atomic_open
    from seq2seq.decode import Scorer, score_files

    checked_options(len_penalty=args.len_penalty, max_tokens=args.max_tokens)
    set_threads(args.threads)
    check_device(args.device)
    check_paths(
        input_files=[("--src", args.src), ("--tgt", args.tgt)],
        input_dirs=[("model directory", args.model_dir)],
        output_files=[("-o", args.output)],
    )
    scorer = Scorer.load(args.model_dir, device=args.device, max_tokens=args.max_tokens)
    scorer.set_direction(args.source_lang, args.target_lang)
    len_penalty = args.len_penalty
    if len_penalty is None:
        len_penalty = scorer.cfg.decoding.len_penalty
    kwargs = dict(len_penalty=len_penalty, output_format=args.output_format, warn=warner("score"))
    if args.output:
        with atomic_open(args.output, "w", encoding="utf-8", newline="\n") as out:
            summary = score_files(scorer, args.src, args.tgt, out=out, **kwargs)
    else:
        summary = score_files(scorer, args.src, args.tgt, out=sys.stdout, **kwargs)
    print(
        f"{summary['pairs']} pairs, {summary['tokens']} target tokens (EOS included), "
        f"log-prob {summary['log_prob']:.4f}, perplexity {summary['perplexity']:.4f}",
        file=sys.stderr,
    )
    return 0

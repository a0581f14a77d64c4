"""Evaluate a model directory: translate a test set, score it with sacreBLEU, keep the evidence.

The test set is either a registered corpus split (fetched through seq2seq.data.prepare, from the
offline mirror when one is given) or a pair of files. The run writes, under ``out_dir``
(default ``MODEL_DIR/eval/``):

- ``NAME.hyp``: the hypotheses, one per source line (so anyone can re-score them);
- ``NAME.json``: BLEU, chrF and TER with their sacreBLEU signatures, the source, reference and
  hypothesis paths, the search options and the engine.

Both are written atomically. ``tokenized_lc`` scores the way papers on the lowercased,
tokenized Multi30K references do (sacreBLEU with ``tokenize="none", lowercase=True``): use it
with a model trained on the ``tok`` variant, whose output is tokenized like those references.
``moses_lc`` scores a model trained on cased raw text the same way: its output and the raw
references first go through :func:`seq2seq.evaluate.metrics.moses_lc` (the steps that made the
tokenized files), so the number compares with the papers' too; its outputs are named
``NAME.moses-lc.*``, and the same translation is also scored the default way (cased,
detokenized: ``NAME.hyp`` and ``NAME.json``), so both numbers cost one translation.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from seq2seq.core import UserError, atomic_open, say
from seq2seq.decode import Translator, read_lines
from seq2seq.evaluate.metrics import moses_lc as moses_lc_lines
from seq2seq.evaluate.metrics import score_corpus

__all__ = ["evaluate", "evaluate_files", "resolve_test_set"]


def _warn_stderr(message: str) -> None:
    say(f"warning: {message}")


def read_test_pair(src_path: Path, ref_path: Path) -> tuple[list[str], list[str]]:
    """Source and reference lines (strict UTF-8); different line counts are a UserError."""
    src = read_lines(src_path)
    ref = read_lines(ref_path)
    if len(src) != len(ref):
        raise UserError(
            f"line counts differ: {src_path} has {len(src)} lines but {ref_path} has {len(ref)}"
        )
    if not src:
        raise UserError(f"{src_path} is empty: nothing to evaluate")
    for path, lines in ((src_path, src), (ref_path, ref)):
        if not any(line.strip() for line in lines):
            raise UserError(
                f"{path} holds no text (all {len(lines)} lines are blank): nothing to evaluate"
            )
    return src, ref


def evaluate_files(
    translator: Translator,
    src_path: Path,
    ref_path: Path,
    *,
    out_dir: Path,
    name: str,
    tokenized_lc: bool = False,
    moses_lang: str | None = None,
    warn: Callable[[str], None] = _warn_stderr,
    info: dict | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> dict:
    """Translate ``src_path``, score against ``ref_path``, write ``NAME.hyp`` and ``NAME.json``
    (and ``NAME.moses-lc.*`` with ``moses_lang``).

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator` (its options are used).
        src_path: aligned text files, one sentence per line.
        ref_path: as ``src_path``.
        out_dir: where the hypotheses and the scores go.
        name: file stem of the outputs.
        tokenized_lc: score with sacreBLEU ``tokenize="none", lowercase=True``.
        moses_lang: Moses-normalize, lowercase and tokenize hypotheses and references in
            this language (:func:`seq2seq.evaluate.metrics.moses_lc`), then score as
            ``tokenized_lc``, into ``NAME.moses-lc.hyp`` and ``NAME.moses-lc.json`` (the
            hypothesis file keeps the model's own output); the same hypotheses are scored
            the default way into ``NAME.hyp`` and ``NAME.json`` too.
        warn: receives one message per truncated source line.
        info: extra fields for the JSON (model directory, engine, ...).
        source_lang: the language of ``src_path`` (checked against the model's directions).
        target_lang: the language to translate into (a multilingual model needs it).

    Returns:
        The JSON's content (the ``NAME.moses-lc.json`` one with ``moses_lang``): ``scores`` (see
        :func:`seq2seq.evaluate.metrics.score_corpus`) and the provenance fields.
    """
    src, ref = read_test_pair(src_path, ref_path)

    def on_truncated(line_no: int, n_tokens: int) -> None:
        warn(
            f"{src_path}:{line_no}: {n_tokens} source tokens exceed the model's "
            f"{translator.max_src_positions} positions; truncated"
        )

    hyps = translator.translate(
        src, on_truncated=on_truncated, source_lang=source_lang, target_lang=target_lang
    )
    fields = {
        "src": str(src_path),
        "ref": str(ref_path),
        "n_sentences": len(src),
        "direction": [source_lang, target_lang],
        "search": dataclasses.asdict(translator.opts),
        **(info or {}),
    }
    out_dir = Path(out_dir)
    if moses_lang is not None:  # the same translation, scored the default way beside
        _write_scores(
            out_dir, name, hyps, score_corpus(hyps, ref),
            {"tokenized_lc": False, "moses_lc": None, **fields},
        )  # fmt: skip
        name += ".moses-lc"
        scores = score_corpus(
            moses_lc_lines(hyps, moses_lang),
            moses_lc_lines(ref, moses_lang),
            tokenize="none",
            lowercase=True,
        )
    elif tokenized_lc:
        scores = score_corpus(hyps, ref, tokenize="none", lowercase=True)
    else:
        scores = score_corpus(hyps, ref)
    return _write_scores(
        out_dir,
        name,
        hyps,
        scores,
        {"tokenized_lc": tokenized_lc, "moses_lc": moses_lang, **fields},
    )


def _write_scores(out_dir: Path, name: str, hyps: list[str], scores: dict, fields: dict) -> dict:
    """Write ``NAME.hyp`` and ``NAME.json`` (atomically) and return the JSON's content."""
    hyp_path = out_dir / f"{name}.hyp"
    json_path = out_dir / f"{name}.json"
    with atomic_open(hyp_path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(h + "\n" for h in hyps)
    result = {"scores": scores, **fields, "hyp": str(hyp_path)}
    with atomic_open(json_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, ensure_ascii=False)
        f.write("\n")
    result["json"] = str(json_path)
    return result


def resolve_test_set(
    cfg,
    *,
    corpus: str | None,
    pair: str | None,
    split: str | None,
    variant: str | None,
    mirror: str | Path | None,
    cache_dir: str | Path | None,
    work_dir: Path,
) -> tuple[Path, Path, str]:
    """(source file, reference file, output name) of a corpus split; unset parts from ``cfg.data``.

    The files are prepared by :func:`seq2seq.data.prepare.prepare_corpus` under ``work_dir``.
    """
    from seq2seq.data import prepare_corpus

    corpus = corpus or cfg.data.corpus
    pair = pair or cfg.data.pair
    variant = variant or cfg.data.variant
    split = split or (cfg.data.test_splits[0] if cfg.data.test_splits else None)
    if corpus == "files" or split is None:
        raise UserError("name a test set: --corpus/--pair/--split, or --src and --ref")
    splits = prepare_corpus(
        corpus,
        pair,
        work_dir,
        variant=variant,
        splits=[split],
        cache_dir=cache_dir,
        mirror=mirror,
    )
    if split not in splits:
        raise UserError(f"corpus {corpus} ({pair}, {variant}) has no split {split!r}")
    src_path, ref_path = splits[split]
    name = f"{corpus}.{pair}.{split}" + ("" if variant == "raw" else f".{variant}")
    return Path(src_path), Path(ref_path), name


def evaluate(
    model_dir: str | Path | list[str | Path],
    *,
    src: str | Path | None = None,
    ref: str | Path | None = None,
    corpus: str | None = None,
    pair: str | None = None,
    split: str | None = None,
    variant: str | None = None,
    mirror: str | Path | None = None,
    cache_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    tokenized_lc: bool = False,
    moses_lc: bool = False,
    device: str = "cpu",
    engine: str = "torch",
    warn: Callable[[str], None] = _warn_stderr,
    source_lang: str | None = None,
    target_lang: str | None = None,
    **overrides: object,
) -> dict:
    """Evaluate ``model_dir`` on ``src``/``ref`` files or on a corpus split.

    A list of directories evaluates their ensemble (the first one's config gives the
    defaults; outputs default to ``FIRST/eval-ensemble``, the JSON lists the members).

    With ``src`` and ``ref`` the files are used as they are; otherwise the corpus, pair,
    split and variant default to the model's config (``data.corpus``, ``data.pair``,
    ``data.test_splits[0]``, ``data.variant``). ``overrides`` are search options.
    ``moses_lc`` (for a model trained on raw text, with raw references) Moses-tokenizes and
    lowercases both sides in the target language of ``pair`` (default ``data.pair``) before
    scoring as ``tokenized_lc``; the outputs are then named ``NAME.moses-lc.hyp/.json``.
    ``source_lang`` / ``target_lang`` choose the direction of a multilingual model (default:
    those of ``pair`` when given); they are checked against the model's directions.

    Returns:
        See :func:`evaluate_files`.
    """
    dirs = [model_dir] if isinstance(model_dir, (str, Path)) else list(model_dir)
    if not dirs:
        raise UserError("give a model directory")
    model_dir = Path(dirs[0])
    default_out = model_dir / ("eval" if len(dirs) == 1 else "eval-ensemble")
    out_dir = Path(out_dir) if out_dir is not None else default_out
    if (src is None) != (ref is None):
        raise UserError("--src and --ref go together")
    if moses_lc and tokenized_lc:
        raise UserError(
            "--moses-lc and --tokenized-lc exclude each other: --tokenized-lc is for output "
            "that is already tokenized, --moses-lc tokenizes raw output"
        )
    if src is not None:
        for path in (src, ref):
            if not Path(path).is_file():
                raise UserError(f"file not found: {path}")
        read_test_pair(Path(src), Path(ref))  # fail on bad input before loading the model
    translator = Translator.load(dirs, device=device, engine=engine, **overrides)
    if pair is not None and source_lang is None and target_lang is None:
        source_lang, _, target_lang = pair.partition("-")
    source_lang, target_lang = translator.direction(source_lang, target_lang)
    if pair is None and translator.cfg.data.multilingual and src is None:
        if source_lang is None:
            raise UserError("give --source-lang too: it names the test set's source side")
        pair = f"{source_lang}-{target_lang}"
    if moses_lc and "tok" in (variant, translator.cfg.data.variant):
        raise UserError(
            "--moses-lc tokenizes raw text, but this "
            + ("model was trained on" if translator.cfg.data.variant == "tok" else "test set is")
            + " the tok variant (already tokenized): use --tokenized-lc"
        )
    if src is not None:
        src_path, ref_path, name = Path(src), Path(ref), Path(src).name
    else:
        src_path, ref_path, name = resolve_test_set(
            translator.cfg,
            corpus=corpus,
            pair=pair,
            split=split,
            variant=variant,
            mirror=mirror,
            cache_dir=cache_dir,
            work_dir=out_dir / "data",
        )
    info = {"model_dir": str(model_dir), "engine": engine, "device": device}
    if len(dirs) > 1:
        info["ensemble"] = [str(d) for d in dirs]
    moses_lang = None
    if moses_lc:
        moses_lang = target_lang or (pair or translator.cfg.data.pair).split("-")[-1]
    return evaluate_files(
        translator,
        src_path,
        ref_path,
        out_dir=out_dir,
        name=name,
        tokenized_lc=tokenized_lc,
        moses_lang=moses_lang,
        warn=warn,
        info=info,
        source_lang=source_lang,
        target_lang=target_lang,
    )

"""A recipe: a public corpus to a tested, exported translator and its results lines.

    prepare (download or mirror) -> SentencePiece -> train -> average the last checkpoints
    -> evaluate on every available test split (BLEU, chrF, TER with signatures; a raw-text
       model also Moses-tokenized and lowercased, comparable with papers' numbers)
    -> export (CTranslate2) -> translate a few examples -> OUT/results.tsv

The scripts under recipes/ call :func:`main` with their corpus' default config. Each stage
writes its output under --out and is skipped when that output already exists, so a recipe
run again continues where it stopped (training resumes from its last checkpoint). Offline,
set SEQ2SEQ_MIRROR (or --mirror) to a local copy of the corpus' files. Each stage calls the
library functions of one ``seq2seq`` command and ends like it (:mod:`seq2seq.cli.outcome`);
that command is printed before the stage runs, so each can be rerun by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from seq2seq.cli.arguments import warner
from seq2seq.cli.evaluate import print_evaluation
from seq2seq.cli.outcome import run_command
from seq2seq.config import load_config
from seq2seq.core import UserError, check_paths
from seq2seq.data import get_corpus, prepare_corpus
from seq2seq.train import checkpoints_to_average

__all__ = ["main"]

EXAMPLES = {
    "en": ["A man in a blue shirt is riding a bicycle.", "Two dogs are playing in the snow."],
    "de": ["Ein Mann in einem blauen Hemd fährt Fahrrad.", "Zwei Hunde spielen im Schnee."],
    "fr": ["Un homme en chemise bleue fait du vélo.", "Deux chiens jouent dans la neige."],
    "cs": ["Muž v modré košili jede na kole.", "Dva psi si hrají ve sněhu."],
}


def example_sentences(lang: str, *, tokenized_lc: bool) -> list[str]:
    """The sentences the recipe translates at the end, written the way the model reads them
    (lowercased, final punctuation split off, for the lowercased tokenized variant)."""
    examples = EXAMPLES.get(lang, EXAMPLES["en"])
    if tokenized_lc:
        return [re.sub(r"([.,!?])$", r" \1", line.lower()) for line in examples]
    return examples


class _StageFailed(Exception):
    """A stage failed (it has printed why); carries its exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _stage(argv: list[str], work: Callable[..., object], *args: object, **kwargs: object):
    """Print the `seq2seq` command line that does what ``work(*args, **kwargs)`` does, run it
    and end it as that command would; stop the recipe if it fails. Returns what ``work``
    returned."""
    print(f"\n$ seq2seq {shlex.join(argv)}", flush=True)
    result = []
    status = run_command(argv[0], lambda: result.append(work(*args, **kwargs)))
    if status:
        raise _StageFailed(status)
    return result[0]


def _train(
    model_dir: str, *, resume: bool, config: str | None, overrides: list[str], mirror: str | None
) -> None:
    """``seq2seq train --out MODEL_DIR`` (or ``--resume MODEL_DIR``)."""
    from seq2seq.train import resolve_config, train

    check_paths(
        input_files=[("--config", config)],
        input_dirs=[("--mirror", mirror)],
        output_dirs=[("--resume" if resume else "--out", model_dir)],
    )
    cfg = resolve_config(model_dir, resume=resume, config_path=config, overrides=overrides)
    train(cfg, model_dir, resume=resume, mirror=mirror)


def _average(model_dir: str, *, n: int, out: str, overrides: list[str] = ()) -> None:
    """``seq2seq average MODEL_DIR -n N --out OUT`` (with ``overrides``: replacing OUT, with
    those config changes)."""
    from seq2seq.train import average_model_dir

    check_paths(input_dirs=[("run directory", model_dir)], replaced_dirs=[("--out", out)])
    path = average_model_dir(model_dir, n=n, out=out, force=bool(overrides), overrides=overrides)
    print(f"wrote {path}")


def _evaluate(
    model_dir: str,
    *,
    src: str,
    ref: str,
    out_dir: str,
    flags: list[str],
    mirror: str | None,
    direction: tuple[str, str] | None = None,
    **search: object,
) -> dict:
    """``seq2seq evaluate MODEL_DIR --src SRC --ref REF --out-dir OUT_DIR [FLAGS]``; ``flags``:
    ``--tokenized-lc``, ``--moses-lc`` or neither; ``direction``: a multilingual model's
    ``--source-lang`` and ``--target-lang``; ``search``: search options (``len_penalty``)."""
    from seq2seq.evaluate import evaluate

    check_paths(
        input_files=[("--src", src), ("--ref", ref)],
        input_dirs=[("--mirror", mirror)],
        output_dirs=[("--out-dir", out_dir)],
    )
    result = evaluate(
        [model_dir],
        src=src,
        ref=ref,
        out_dir=out_dir,
        tokenized_lc="--tokenized-lc" in flags,
        moses_lc="--moses-lc" in flags,
        warn=warner("evaluate"),
        source_lang=direction[0] if direction else None,
        target_lang=direction[1] if direction else None,
        **search,
    )
    print_evaluation(result)
    return result


def _export(model_dir: str, *, out: str) -> None:
    """``seq2seq export MODEL_DIR --format ctranslate2 --out OUT``."""
    from seq2seq.export import describe, export_model

    check_paths(input_dirs=[("model directory", model_dir)], replaced_dirs=[("--out", out)])
    print(describe(export_model(model_dir, out, fmt="ctranslate2")), file=sys.stderr)


def main(
    argv: list[str] | None = None,
    *,
    corpus: str,
    default_config: str,
    pairs: tuple[str, ...] | None = None,
    doc: str | None = None,
) -> int:
    """Run the recipe for ``corpus``; returns the exit status (2 after a user error).

    Args:
        argv: command-line arguments (None: sys.argv[1:]).
        corpus: the registered corpus this recipe is for (its configs must name it).
        default_config: the config used without --config.
        pairs: the directions offered by --pair (None: any; the default is the config's).
        doc: the --help description (the calling script's docstring).
    """
    try:
        _run(argv, corpus=corpus, default_config=default_config, pairs=pairs, doc=doc)
    except UserError as e:
        print(f"{corpus} recipe: error: {e}", file=sys.stderr)
        return 2
    except _StageFailed as e:
        return e.status
    return 0


def _run(argv, *, corpus, default_config, pairs, doc) -> None:
    parser = argparse.ArgumentParser(
        description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=default_config, help=f"(default: {default_config})")
    parser.add_argument("--pair", choices=pairs, help="direction (default: the config's)")
    parser.add_argument("--out", default=f"runs/{corpus}", help=f"(default: runs/{corpus})")
    parser.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    parser.add_argument("--no-export", action="store_true", help="skip the export stage")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value")
    args = parser.parse_intermixed_args(argv)

    # ---- config: the YAML, the language pair, the user's overrides -------------------------
    overrides = [*([f"data.pair={args.pair}"] if args.pair else []), *args.overrides]
    cfg = load_config(args.config, overrides)
    if cfg.data.corpus != corpus:
        script = "own_files" if cfg.data.corpus == "files" else cfg.data.corpus
        raise UserError(
            f"{args.config} trains on {cfg.data.corpus}, not {corpus}; use recipes/{script}.py"
        )
    multilingual = cfg.data.multilingual
    if multilingual and args.pair:
        raise UserError(f"{args.config} is multilingual (data.pairs): it takes no --pair")
    args.pair = cfg.data.pair
    directions = list(cfg.data.directions) if multilingual else [tuple(args.pair.split("-"))]
    out = Path(args.out)
    model_dir, averaged_dir = out / "model", out / "averaged"
    # a model trained on tokenized lowercased text (Multi30K tok, IWSLT14 fairseq) is scored
    # with --tokenized-lc; a raw-text one both detokenized and --moses-lc
    tokenized_lc = corpus != "files" and cfg.data.variant in get_corpus(corpus).tokenized_variants
    mirror = ["--mirror", args.mirror] if args.mirror else []
    mirror_dir = args.mirror or os.environ.get("SEQ2SEQ_MIRROR")  # the commands' default

    # ---- corpus: every split the source (internet or mirror) has --------------------------
    corpus_dir = out / "corpus"
    splits = {}  # (direction, split) -> (source file, reference file)
    if corpus == "files":
        # the user's files (line-aligned pairs or tab-separated): checked now, read by train
        from seq2seq.data import TranslationDataModule

        files_dm = TranslationDataModule(cfg, corpus_dir)
        for split in (cfg.data.train_split, cfg.data.valid_split):
            files_dm.split_files(split)  # a prefix must be set: a clear error now, not in train
        for split in cfg.data.test_splits:
            splits[directions[0], split] = files_dm.test_files(split)
    for direction in () if corpus == "files" else directions:
        for split in (cfg.data.train_split, cfg.data.valid_split, *cfg.data.test_splits):
            try:
                files = prepare_corpus(
                    cfg.data.corpus,
                    "-".join(direction),
                    corpus_dir,
                    variant=cfg.data.variant,
                    splits=[split],
                    mirror=args.mirror,
                )
            except UserError as e:
                if split in (cfg.data.train_split, cfg.data.valid_split):
                    raise
                print(f"skipping test split {split} ({'-'.join(direction)}): {e}")
                continue
            splits.update({(direction, k): v for k, v in files.items()})

    # ---- SentencePiece + binarized data + training (seq2seq train does all three) ----------
    started = time.time()
    model, averaged = str(model_dir), str(averaged_dir)
    if (model_dir / "manifest.json").is_file():
        print(f"\n[train] {model_dir} is complete; skipping")
    elif (model_dir / "checkpoints" / "last.ckpt").is_file():
        # the user's overrides again: a resume may change the training section (threads, ...)
        _stage(
            ["train", "--resume", model, *mirror, *overrides],
            _train, model, resume=True, config=None, overrides=overrides, mirror=mirror_dir,
        )  # fmt: skip
    else:
        _stage(
            ["train", "--config", args.config, "--out", model, *mirror, *overrides],
            _train, model, resume=False, config=args.config, overrides=overrides,
            mirror=mirror_dir,
        )  # fmt: skip
    train_minutes = (time.time() - started) / 60

    # ---- average the last checkpoints ------------------------------------------------------
    if (averaged_dir / "manifest.json").is_file():
        print(f"\n[average] {averaged_dir} exists; skipping")
    else:
        # The checkpoints training averaged: the last training.average_last periodic ones from
        # the second half of the run (fewer for a short or early-stopped run).
        n = max(
            len(checkpoints_to_average(model_dir / "checkpoints", cfg.training.average_last)), 1
        )
        _stage(
            ["average", model, "-n", str(n), "--out", averaged], _average, model, n=n, out=averaged
        )

    # ---- the length penalty, chosen on the validation set (training.tune_len_penalty) -------
    # Each value decodes the validation split of every direction; the best mean BLEU (the
    # first of equals) becomes the averaged model's decoding.len_penalty, written by averaging
    # again (atomically); tune/choice.json, written last, marks the stage done.
    choice_file = out / "tune" / "choice.json"
    if cfg.training.tune_len_penalty and choice_file.is_file():
        print(f"\n[tune] {choice_file} exists; skipping")
    elif cfg.training.tune_len_penalty:
        tried = {}
        for value in cfg.training.tune_len_penalty:
            bleus = []
            for direction in directions:
                src, ref = (str(p) for p in splits[direction, cfg.data.valid_split])
                where = str(out / "tune" / f"lp{value:g}" / "-".join(direction))
                langs = ["--source-lang", direction[0], "--target-lang", direction[1]]
                scored = _stage(
                    ["evaluate", averaged, "--src", src, "--ref", ref, "--out-dir", where,
                     "--len-penalty", f"{value:g}", *(langs if multilingual else [])],
                    _evaluate, averaged, src=src, ref=ref, out_dir=where, flags=[],
                    mirror=mirror_dir, direction=direction if multilingual else None,
                    len_penalty=value,
                )  # fmt: skip
                bleus.append(scored["scores"]["bleu"])
            tried[f"{value:g}"] = sum(bleus) / len(bleus)
        best = float(max(tried, key=tried.__getitem__))  # max keeps the first of equals
        print(
            "\nvalidation BLEU by len_penalty: "
            + ", ".join(f"{k} {v:.2f}" for k, v in tried.items())
        )
        n = max(
            len(checkpoints_to_average(model_dir / "checkpoints", cfg.training.average_last)), 1
        )
        _stage(
            ["average", model, "-n", str(n), "--out", averaged, "--force",
             f"decoding.len_penalty={best:g}"],
            _average, model, n=n, out=averaged, overrides=[f"decoding.len_penalty={best:g}"],
        )  # fmt: skip
        choice = {"len_penalty": best, "validation_bleu": tried}
        choice_file.write_text(json.dumps(choice, indent=2) + "\n", encoding="utf-8")

    # ---- test: every available test split, BLEU / chrF / TER with signatures ----------------
    # A raw-text model is scored twice, from one translation (evaluate --moses-lc): cased
    # detokenized (sacreBLEU 13a, the number to report) and Moses-tokenized lowercased, which
    # compares with the papers' numbers on the lowercased tokenized references. A tok-variant
    # model is scored the papers' way.
    scorings = [("tok-lc", ["--tokenized-lc"], "")] if tokenized_lc else [
        ("detok", [], ""), ("moses-lc", ["--moses-lc"], ".moses-lc"),
    ]  # fmt: skip
    results = []  # (direction, split, scoring, scores, hypothesis file)
    for direction in directions:
        # a multilingual model's directions share source files: one folder each
        eval_path = out / "eval" / "-".join(direction) if multilingual else out / "eval"
        langs = ["--source-lang", direction[0], "--target-lang", direction[1]]
        for split in cfg.data.test_splits:
            if (direction, split) not in splits:
                continue
            src, ref = (str(p) for p in splits[direction, split])
            # evaluate names its outputs by --src (and .moses-lc)
            jsons = [eval_path / f"{Path(src).name}{suffix}.json" for _, _, suffix in scorings]
            if not all(path.is_file() for path in jsons):
                flags = scorings[-1][1]  # --moses-lc scores the default way too: one translation
                _stage(
                    ["evaluate", averaged, "--src", src, "--ref", ref, "--out-dir",
                     str(eval_path), *flags, *(langs if multilingual else [])],
                    _evaluate, averaged, src=src, ref=ref, out_dir=str(eval_path),
                    flags=flags, mirror=mirror_dir,
                    direction=direction if multilingual else None,
                )  # fmt: skip
            for (scoring, _, _), scores_json in zip(scorings, jsons):
                scored = json.loads(scores_json.read_text(encoding="utf-8"))
                name = split if corpus != "files" else Path(src).stem
                results.append((direction, name, scoring, scored["scores"], scored["hyp"]))

    # ---- export for inference ---------------------------------------------------------------
    export_dir = out / "export" / "ctranslate2"
    if args.no_export:
        print("\n[export] skipped (--no-export)")
    elif export_dir.is_dir():
        print(f"\n[export] {export_dir} exists; skipping")
    else:
        _stage(
            ["export", averaged, "--format", "ctranslate2", "--out", str(export_dir)],
            _export, averaged, out=str(export_dir),
        )  # fmt: skip

    # ---- a few translations and the results lines ------------------------------------------
    from seq2seq.decode import Translator

    translator = Translator.load(averaged_dir)
    print("\nexample translations:")
    for src_lang, tgt_lang in directions:
        examples = example_sentences(src_lang, tokenized_lc=tokenized_lc)[
            : 1 if multilingual else 2
        ]
        hyps = translator.translate(
            examples, **({"source_lang": src_lang, "target_lang": tgt_lang} if multilingual else {})
        )
        for line, hyp in zip(examples, hyps):
            print(f"  {line}\n  -> {hyp}" + (f"  ({src_lang}-{tgt_lang})" if multilingual else ""))

    print("\nresults:")
    lines = []
    for (src_lang, tgt_lang), split, scoring, scores, _ in results:
        line = (
            f"{corpus}\t{src_lang}-{tgt_lang}\t{split}\t{Path(args.config).stem}\t"
            f"BLEU {scores['bleu']:.2f}\tchrF {scores['chrf']:.2f}\t"
            f"TER {scores['ter']:.2f}\t{scores['bleu_signature']}\t{scoring}"
        )
        lines.append(line)
        print("  " + line)
    (out / "results.tsv").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    if multilingual:
        print_direction_table(results, languages=sorted({x for d in directions for x in d}))
    if train_minutes > 0.1:
        print(f"training took {train_minutes:.1f} minutes")


def print_direction_table(results: list, *, languages: list[str]) -> None:
    """A multilingual model's test scores, one row per direction and test split: BLEU and chrF
    cased (sacreBLEU 13a) and ``--moses-lc``, and the share of outputs py3langid (restricted to
    the model's ``languages``) identifies as the target language."""
    from seq2seq.data import LanguageIdentifier

    identifier = LanguageIdentifier(languages, purpose="the share of outputs in the asked language")
    rows: dict[tuple, dict] = {}
    for direction, split, scoring, scores, hyp in results:
        row = rows.setdefault((direction, split), {})
        row[scoring] = scores
        if "langid" not in row:
            texts = [t for t in Path(hyp).read_text(encoding="utf-8").split("\n") if t.strip()]
            row["langid"] = 100 * identifier.share(texts, direction[1]) if texts else 0.0
    print("\ndirection  split               BLEU  chrF  BLEU(lc)  chrF(lc)  in target language")
    for ((src_lang, tgt_lang), split), row in rows.items():
        cased, lc = row.get("detok", row.get("tok-lc")), row.get("moses-lc")
        cells = [f"{src_lang}-{tgt_lang}".ljust(10), split.ljust(18)]
        cells += [f"{cased['bleu']:5.2f}", f"{cased['chrf']:5.2f}"] if cased else ["    -"] * 2
        cells += [f"{lc['bleu']:8.2f}", f"{lc['chrf']:8.2f}"] if lc else ["       -"] * 2
        cells.append(f"{row['langid']:16.1f}%")
        print("  ".join(cells))

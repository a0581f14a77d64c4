"""Preparing a corpus: its splits as line-aligned plain-text files, ``OUT/{split}.{lang}``.

:func:`prepare_corpus` fetches (:mod:`seq2seq.data.download`) and extracts
(:mod:`seq2seq.data.extract`) each available split, runs its text steps
(:mod:`seq2seq.data.text_steps`) and writes it as plain UTF-8 text files (one sentence per line,
the two sides line-aligned); ``seq2seq prepare`` is its command-line face. Both sides of a split
are written to temporary files and renamed into place only once they have the same number of
lines, so a failed prepare never leaves a mismatched pair behind. Validation of the text itself
(UTF-8, empty lines, lengths) happens when it is read (:mod:`seq2seq.data.parallel`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.core import UserError, atomic_open
from seq2seq.data.corpus import Corpus, Part
from seq2seq.data.download import NotAvailableError, default_cache_dir, default_mirror, fetch
from seq2seq.data.extract import open_member, read_lines, write_part
from seq2seq.data.registry import get_corpus, parse_pair
from seq2seq.data.text_steps import EveryNth, Step, run_steps

__all__ = ["prepare_corpus"]


def _part_key(corpus: Corpus, part: Part) -> list:
    file = part.file
    return [
        corpus.file_source(file).name,
        file.path,
        file.sha256 or file.md5,
        part.member,
        part.format,
    ]


@dataclass
class _Job:
    """One pass over a split's extracted pairs that writes one or more splits (fairseq's
    train and valid come from the same cleaned text)."""

    splits: list[str]
    parts: dict[str, tuple[Part, ...]]  # lang -> parts
    steps: dict[str, tuple[Step, ...]]  # split -> steps


def _jobs(corpus: Corpus, variant: str, pair: str, wanted: list[str]) -> list[_Job]:
    src, tgt = parse_pair(pair)
    jobs: list[_Job] = []
    placed: set[str] = set()

    def stream_key(split: str):
        steps = corpus.steps.get((variant, split), ())
        parts = tuple(corpus.parts(variant, split, pair, lang) for lang in (src, tgt))
        if steps and isinstance(steps[-1], EveryNth):
            return (parts, steps[:-1])
        return None

    for split in wanted:
        if split in placed:
            continue
        key = stream_key(split)
        group = [split]
        if key is not None:
            group += [
                s
                for s in corpus.splits
                if s != split and corpus.has_split(variant, s, pair) and stream_key(s) == key
            ]
        placed.update(group)
        jobs.append(
            _Job(
                splits=group,
                parts={lang: corpus.parts(variant, split, pair, lang) for lang in (src, tgt)},
                steps={s: corpus.steps.get((variant, s), ()) for s in group},
            )
        )
    return jobs


def prepare_corpus(
    corpus: str | Corpus,
    pair: str,
    out_dir: str | Path,
    *,
    variant: str = "raw",
    splits: list[str] | tuple[str, ...] | None = None,
    cache_dir: str | Path | None = None,
    mirror: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, tuple[Path, Path]]:
    """Fetch, verify and extract a corpus' splits into plain-text files ``OUT/{split}.{lang}``.

    Splits already extracted from the same sources with the same steps (recorded in
    ``OUT/.prepare.json``) are not extracted again. Both sides are written to temporary files
    and renamed into place together once their line counts agree: a failure leaves the folder
    as it was. Splits computed from one stream (fairseq's IWSLT14 train and valid: every 23rd
    line of the cleaned text and the rest) are written together.

    Args:
        corpus: A registered name (:func:`~seq2seq.data.registry.list_corpora`) or a
            :class:`~seq2seq.data.corpus.Corpus`.
        pair: ``src-tgt`` languages, e.g. ``en-de`` (either direction of the corpus' languages).
        out_dir: Where the text files go.
        variant: ``raw`` or another of the corpus' variants (Multi30K: ``tok``; IWSLT14:
            ``fairseq``; WMT14: ``norm``).
        splits: Splits to prepare. None: every registered split that has both languages; those
            that are not available (no network, not in the mirror) are skipped and reported via
            ``log``. Splits named here must be available.
        cache_dir: Download cache (default :func:`~seq2seq.data.download.default_cache_dir`).
        mirror: Offline mirror: a root of source folders or one source's folder (default
            :func:`~seq2seq.data.download.default_mirror`); it replaces the network.
        log: Called with one line per split written, skipped or reused (e.g. ``print``).

    Returns:
        ``split -> (source file, target file)`` for the splits asked for, in registry order.

    Raises:
        UserError: Unknown corpus, pair, variant or split; an empty list of splits; a
            requested split not available
            (:class:`~seq2seq.data.download.NotAvailableError`); a checksum mismatch
            (:class:`~seq2seq.data.download.ChecksumError`); the two sides of a split with
            different line counts.
    """
    corpus = corpus if isinstance(corpus, Corpus) else get_corpus(corpus)
    src, tgt = parse_pair(pair)
    for lang in (src, tgt):
        if lang not in corpus.languages:
            raise UserError(
                f"{corpus.name} has no language {lang!r} (languages: {', '.join(corpus.languages)})"
            )
    if variant not in corpus.variants:
        raise UserError(
            f"{corpus.name} has no variant {variant!r} (variants: {', '.join(corpus.variants)})"
        )
    if splits is not None and not splits:  # (`--splits ,`): never a silent no-op
        raise UserError(
            f"no {corpus.name} split named: give one or more of {', '.join(corpus.splits)} "
            "(or no list at all for every available split)"
        )
    if splits is not None:
        for split in splits:
            if split not in corpus.splits:
                raise UserError(
                    f"{corpus.name} has no split {split!r} (splits: {', '.join(corpus.splits)})"
                )
            missing = [
                lang for lang in (src, tgt) if corpus.parts(variant, split, pair, lang) is None
            ]
            if missing:
                has = [
                    lang
                    for lang in corpus.languages
                    if (variant, split, lang) in corpus.layout
                    or any(k[:2] == (variant, split) and k[3] == lang for k in corpus.directed)
                ]
                raise NotAvailableError(
                    f"{corpus.name} {split} ({variant}) is not available in {missing[0]}: "
                    f"the dataset has it in {', '.join(has) or 'no language'}"
                )
        wanted, required = list(splits), True
    else:
        wanted = [s for s in corpus.splits if corpus.has_split(variant, s, pair)]
        required = False
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    mirror_dir = Path(mirror) if mirror is not None else default_mirror()
    out = Path(out_dir)
    created = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare_into(corpus, variant, pair, wanted, required, out, cache, mirror_dir, log)
    except BaseException:
        for folder in created:  # a failed prepare leaves nothing it made (the folders too)
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        raise


def _prepare_into(corpus, variant, pair, wanted, required, out, cache, mirror_dir, log):
    src, tgt = parse_pair(pair)
    manifest_path = out / ".prepare.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        manifest = {}
    say = log or (lambda _line: None)

    written: dict[str, tuple[Path, Path]] = {}
    for job in _jobs(corpus, variant, pair, wanted):
        entries = {}
        for split in job.splits:
            for lang, other in ((src, tgt), (tgt, src)):
                entry = {
                    "corpus": corpus.name,
                    "parts": [_part_key(corpus, p) for p in job.parts[lang]],
                    "steps": [repr(s) for s in job.steps[split]],
                }
                if job.steps[split]:  # pair-level steps: the other side matters too
                    entry["other"] = [_part_key(corpus, p) for p in job.parts[other]]
                entries[out / f"{split}.{lang}"] = entry
        reused = all(
            path.is_file()
            and {k: manifest.get(path.name, {}).get(k) for k in entry} == entry
            and manifest[path.name].get("size") == path.stat().st_size
            for path, entry in entries.items()
        )
        try:
            if not reused:
                if any(manifest.pop(path.name, None) for path in entries):
                    with atomic_open(manifest_path, "w", encoding="utf-8") as f:
                        json.dump(manifest, f, indent=1, sort_keys=True)
                counts = _run_job(corpus, job, (src, tgt), out, cache, mirror_dir)
                for path, entry in entries.items():
                    split = path.name.rsplit(".", 1)[0]
                    manifest[path.name] = {
                        **entry,
                        "size": path.stat().st_size,
                        "lines": counts[split],
                    }
                with atomic_open(manifest_path, "w", encoding="utf-8") as f:
                    json.dump(manifest, f, indent=1, sort_keys=True)
        except NotAvailableError as e:
            if required:
                raise
            say(f"{corpus.name} {job.splits[0]}: skipped ({e})")
            continue
        for split in job.splits:
            files = (out / f"{split}.{src}", out / f"{split}.{tgt}")
            lines = manifest[files[0].name]["lines"]
            documented = corpus.expected_lines(split, pair)
            if documented is not None and documented != lines:
                warnings.warn(
                    f"{corpus.name} {split}: {lines} lines, but the dataset documents {documented}",
                    stacklevel=2,
                )
            note = " (already prepared)" if reused else ""
            say(f"{corpus.name} {split}: {lines:,} lines -> {files[0]}, {files[1]}{note}")
            written[split] = files
    result = {s: written[s] for s in corpus.splits if s in written and s in wanted}
    if not result and wanted:
        raise NotAvailableError(
            f"no split of {corpus.name} ({pair}, {variant}) is available: "
            + (f"not in the mirror {mirror_dir}" if mirror_dir else "downloads failed")
        )
    return result


def _run_job(
    corpus: Corpus,
    job: _Job,
    langs: tuple[str, str],
    out: Path,
    cache: Path,
    mirror: Path | None,
) -> dict[str, int]:
    """Extract, run the steps and move the finished files into ``out``; returns line counts."""
    local = {
        lang: [fetch(corpus, p.file, cache_dir=cache, mirror=mirror) for p in job.parts[lang]]
        for lang in langs
    }
    tmp = Path(tempfile.mkdtemp(prefix=".prepare-", dir=out))
    try:
        extracted, counts = {}, {}
        for lang in langs:
            extracted[lang] = tmp / f"extracted.{lang}"
            counts[lang] = 0
            with open(extracted[lang], "wb") as f:
                for part, path in zip(job.parts[lang], local[lang]):
                    with open_member(path, part.member) as raw:
                        where = f"{path}:{part.member}" if part.member else str(path)
                        counts[lang] += write_part(raw, part.format, f, where)
        src, tgt = langs
        split0 = job.splits[0]
        if counts[src] != counts[tgt]:
            raise UserError(
                f"{corpus.name} {split0}: {out / f'{split0}.{src}'} has {counts[src]} lines but "
                f"{out / f'{split0}.{tgt}'} has {counts[tgt]}; nothing was written"
            )
        finished: dict[str, int] = {}
        if not any(job.steps.values()):
            for split in job.splits:
                finished[split] = counts[src]
            outputs = {split: {lang: extracted[lang] for lang in langs} for split in job.splits}
        else:
            # one pass: the steps the splits share, then each pair goes to the split(s) whose
            # last step (an EveryNth, when there are several) keeps its line number
            shared = job.steps[split0] if len(job.splits) == 1 else job.steps[split0][:-1]
            routes = [] if len(job.splits) == 1 else [job.steps[s][-1] for s in job.splits]
            outputs = {s: {lang: tmp / f"{s}.{lang}" for lang in langs} for s in job.splits}
            with contextlib.ExitStack() as stack:
                handles = {
                    s: tuple(stack.enter_context(open(outputs[s][lang], "wb")) for lang in langs)
                    for s in job.splits
                }
                finished = dict.fromkeys(job.splits, 0)
                pairs = zip(read_lines(extracted[src]), read_lines(extracted[tgt]))
                for nr, (a, b) in enumerate(run_steps(shared, pairs, langs), 1):
                    line_a, line_b = a.encode("utf-8") + b"\n", b.encode("utf-8") + b"\n"
                    for i, s in enumerate(job.splits):
                        if routes and (nr % routes[i].n == 0) != routes[i].keep:
                            continue
                        handles[s][0].write(line_a)
                        handles[s][1].write(line_b)
                        finished[s] += 1
        for split in job.splits:
            for lang in langs:
                os.replace(outputs[split][lang], out / f"{split}.{lang}")
        return finished
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

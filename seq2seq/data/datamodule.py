"""The LightningDataModule: corpus -> SentencePiece -> token stores -> token-bucket batches.

Everything it makes lives in the experiment's ``work_dir``::

    work_dir/spm.model                    (or spm.src.model + spm.tgt.model)
    work_dir/data/text/{split}.{lang}     plain-text splits (prepared, or a TSV's columns)
    work_dir/data/train/, data/valid/     binarized token stores (seq2seq.data.store.TokenStore)

:meth:`~TranslationDataModule.prepare_data` (run once per node by Lightning; one process at a
time per ``work_dir``, under a lock file) fetches the text, trains SentencePiece when its file(s)
are missing and (re)builds the stores when they are out of date;
:meth:`~TranslationDataModule.setup` (every process) only opens them.

Epochs: Lightning 2 calls ``set_epoch`` on a dataloader's ``sampler`` but not on a custom
``batch_sampler``, so the training :class:`~seq2seq.data.batching.TokenBucketSampler` is given the
trainer's ``current_epoch`` as its ``epoch_fn`` and reads it each time an epoch's iteration
starts; no dataloader reloading is needed.

Multi-device runs: each rank's sampler already yields its own shard, so the Trainer must be
created with ``use_distributed_sampler=False`` (Lightning would otherwise try to wrap the batch
sampler in a DistributedSampler). Validation is sharded the same way (length-ordered, shards
padded by repeating a rank's own batches); ``Batch.index`` identifies each pair so gathered
results can be deduplicated.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from torch.utils.data import DataLoader

from seq2seq.config import ExperimentConfig
from seq2seq.core import UserError, exclusive, say
from seq2seq.data.batching import TokenBucketSampler, collate
from seq2seq.data.cleaning import CleaningRules
from seq2seq.data.directions import (
    DirectionSampler,
    direction_of_lines,
    read_direction_counts,
    write_directions_split,
)
from seq2seq.data.parallel import check_parallel, iter_parallel, read_parallel, split_tsv
from seq2seq.data.prepare import prepare_corpus
from seq2seq.data.registry import parse_pair
from seq2seq.data.store import TokenStore, build_store
from seq2seq.data.tags import tags_for
from seq2seq.data.tokenizer import Tokenizer, ensure_tokenizer, model_files

__all__ = ["PREPARE_LOCK", "TranslationDataModule"]

PREPARE_LOCK = ".prepare.lock"
"""The lock file in ``work_dir`` that lets one process at a time prepare it."""


class TranslationDataModule(pl.LightningDataModule):
    """Training and validation batches of one experiment.

    Attributes:
        tokenizer: The experiment's :class:`Tokenizer` (after :meth:`setup`).
        train_store: Training :class:`TokenStore` (after ``setup("fit")``).
        valid_store: Validation :class:`TokenStore`.
        train_sampler: The training :class:`TokenBucketSampler` (its ``set_start_batch`` resumes
            mid-epoch).
        valid_src_text: Validation source sentences, ``valid_src_text[i]`` is store pair ``i``.
        valid_ref_text: Validation references (the text lines, stripped), for BLEU.
        valid_directions: With ``data.pairs`` (multilingual): the direction (``en-de``) of each
            validation pair, for per-direction BLEU; None for a bilingual model.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        work_dir: str | Path,
        *,
        mirror: str | Path | None = None,
        cache_dir: str | Path | None = None,
        resume: bool = False,
    ) -> None:
        """Set up paths only; nothing is read or written before :meth:`prepare_data`.

        Args:
            cfg: The experiment config (``cfg.data`` and ``cfg.training.seed`` are used).
            work_dir: The experiment directory.
            mirror: Offline corpus mirror (default ``$SEQ2SEQ_MIRROR``; see seq2seq.data.download).
            cache_dir: Download cache (default ``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``).
            resume: A resumed run: the SentencePiece model(s) in ``work_dir`` are the run's,
                used as they are (missing ones are an error); ``data.spm_model`` (where the new
                run copied them from, such as a fine-tuned run's parent) is not read again.
        """
        super().__init__()
        self.cfg = cfg
        self.resume = resume
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / "data"
        self.mirror = Path(mirror) if mirror is not None else None
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.src_lang, self.tgt_lang = parse_pair(cfg.data.pair)
        self.tokenizer: Tokenizer | None = None
        self.train_store: TokenStore | None = None
        self.valid_store: TokenStore | None = None
        self.train_sampler: TokenBucketSampler | None = None
        self.valid_sampler: TokenBucketSampler | None = None
        self.valid_src_text: list[str] = []
        self.valid_ref_text: list[str] = []
        self.valid_directions: list[str] | None = None

    # ---- files ----

    def _prefix(self, split: str) -> str:
        d = self.cfg.data
        prefixes = {d.train_split: d.train_prefix, d.valid_split: d.valid_prefix}
        prefix = prefixes.get(split, split)
        if prefix is None:
            key = "train_prefix" if split == d.train_split else "valid_prefix"
            raise UserError(f"data.corpus is files, so data.{key} must be set")
        return prefix

    def _tsv(self, split: str) -> Path | None:
        """The tab-separated pair file behind a ``corpus: files`` split, if it is one."""
        prefix = self._prefix(split)
        if Path(prefix).is_file() and not Path(f"{prefix}.{self.src_lang}").is_file():
            return Path(prefix)
        return None

    def split_files(self, split: str) -> tuple[Path, Path]:
        """Source and target text files of ``split`` (not created here).

        With ``corpus: files`` the training and validation splits are ``train_prefix`` and
        ``valid_prefix`` plus ``.{src_lang}`` / ``.{tgt_lang}``; any other split name is itself
        taken as a prefix (so ``test_splits`` can list file prefixes). A prefix that is a file
        is a tab-separated pair file: its two columns become ``work_dir/data/text/NAME.{lang}``.
        """
        d = self.cfg.data
        text_dir = self.data_dir / "text"
        if d.multilingual and split in (d.train_split, d.valid_split):
            # every direction in one file pair, sources tagged (seq2seq.data.directions)
            return text_dir / "multi" / f"{split}.src", text_dir / "multi" / f"{split}.tgt"
        if d.corpus == "files":
            tsv = self._tsv(split)
            if tsv is None:
                prefix = self._prefix(split)
                return Path(f"{prefix}.{self.src_lang}"), Path(f"{prefix}.{self.tgt_lang}")
            name = split if split in (d.train_split, d.valid_split) else tsv.name
            return text_dir / f"{name}.{self.src_lang}", text_dir / f"{name}.{self.tgt_lang}"
        return text_dir / f"{split}.{self.src_lang}", text_dir / f"{split}.{self.tgt_lang}"

    def input_files(self) -> list[tuple[str, Path]]:
        """The user's own files this experiment reads (``corpus: files``), as ``(what, path)``
        for :func:`seq2seq.core.paths.check_paths`: checked before any work."""
        d = self.cfg.data
        found: list[tuple[str, Path]] = []
        if d.corpus == "files":
            for split, key in ((d.train_split, "train_prefix"), (d.valid_split, "valid_prefix")):
                tsv = self._tsv(split)
                paths = [tsv] if tsv is not None else list(self.split_files(split))
                found += [(f"data.{key} file", path) for path in paths]
        if d.spm_model is not None and not self.resume and not Path(d.spm_model).is_dir():
            found.append(("data.spm_model", Path(d.spm_model)))
        return found

    def _fetch(self, splits: list[str]) -> None:
        d = self.cfg.data
        if d.corpus == "files":
            for split in splits:
                tsv = self._tsv(split)
                if tsv is not None:
                    split_tsv(tsv, *self.split_files(split), columns=d.tsv_columns)
                    continue
                for path in self.split_files(split):
                    if not path.is_file():
                        raise UserError(f"{split} file not found: {path}")
            return
        for src, tgt in d.directions if d.multilingual else [parse_pair(d.pair)]:
            prepare_corpus(
                d.corpus,
                f"{src}-{tgt}",
                self.data_dir / "text",
                variant=d.variant,
                splits=splits,
                cache_dir=self.cache_dir,
                mirror=self.mirror,
                log=say,
            )
        if d.multilingual:
            limits = {d.train_split: d.max_train_pairs, d.valid_split: d.max_valid_pairs}
            for split in splits:
                if split in limits:  # max_*_pairs count per direction
                    write_directions_split(
                        self.data_dir / "text",
                        self.data_dir / "text" / "multi",
                        split,
                        d.directions,
                        limit=limits[split],
                    )

    def _limit(self, split: str) -> int:
        """``max_train_pairs`` / ``max_valid_pairs`` for the split's files; 0 for a
        multilingual split, whose files already hold that many pairs per direction."""
        d = self.cfg.data
        if d.multilingual:
            return 0
        return d.max_train_pairs if split == d.train_split else d.max_valid_pairs

    def test_files(self, split: str) -> tuple[Path, Path]:
        """Fetch a test split's text (when a registered corpus) and return its two files."""
        self._fetch([split])
        return self.split_files(split)

    # ---- Lightning hooks ----

    def prepare_data(self) -> None:
        """Fetch train/valid text, train SentencePiece if missing, build (or reuse) the stores.

        Lightning calls this once per node (``prepare_data_per_node``); several nodes may share
        ``work_dir``. A lock file in ``work_dir`` (``.prepare.lock``) makes the first one to
        take it prepare, and the others wait, then find everything up to date (each step
        checks what is there: the SentencePiece options, the stores' keys) and only verify it.
        On a ``work_dir`` that is not shared, each node prepares its own.
        """
        lock = self.work_dir / PREPARE_LOCK
        waiting = f"waiting for another process preparing {self.work_dir} ({lock})"
        with exclusive(lock, waiting=waiting):
            self._prepare()

    def _prepare(self) -> None:
        d = self.cfg.data
        self._fetch([d.train_split, d.valid_split])
        self._check_has_pairs(d.train_split, d.max_train_pairs)
        self._check_has_pairs(d.valid_split, d.max_valid_pairs)
        train_src, train_tgt = self.split_files(d.train_split)
        valid_src, valid_tgt = self.split_files(d.valid_split)
        tokenizer = self._tokenizer(train_src, train_tgt)
        if d.multilingual and hasattr(tokenizer, "language_id"):
            raise UserError(
                "data.pairs: fine-tuning an M2M100/NLLB model on several directions is not "
                "supported yet; train one direction (data.pair) per run"
            )
        build_store(
            self.data_dir / "train",
            train_src,
            train_tgt,
            tokenizer,
            split=d.train_split,
            train=True,
            cleaning=CleaningRules(
                dedup=d.dedup, langid=d.langid, max_len=d.max_len, max_ratio=d.max_ratio
            ),
            langs=(self.src_lang, self.tgt_lang),
            limit=self._limit(d.train_split),
            log=say,
        )
        build_store(
            self.data_dir / "valid",
            valid_src,
            valid_tgt,
            tokenizer,
            split=d.valid_split,
            train=False,
            # dropped as too long, as in training: a pair the model's positions cannot hold
            # (all others stay, so that validation scores stay comparable)
            cleaning=CleaningRules(max_len=self.cfg.model.max_positions - 1),
            langs=(self.src_lang, self.tgt_lang),
            limit=self._limit(d.valid_split),
            log=say,
        )

    def _check_has_pairs(self, split: str, limit: int) -> None:
        """Refuse a split without one sentence pair before any work (SentencePiece, stores),
        naming the user's own file: the TSV, not the text files made from it."""
        src, tgt = self.split_files(split)
        for _ in iter_parallel(src, tgt, limit=limit):
            return
        n = check_parallel(src, tgt)
        tsv = self._tsv(split) if self.cfg.data.corpus == "files" else None
        where = str(tsv) if tsv is not None else f"{src}, {tgt}"
        if n == 0:
            empty = "the file is empty" if tsv is not None else "both files are empty"
            raise UserError(f"{where}: no sentence pairs for the {split} split: {empty}")
        if limit and limit < n:
            key = "max_train_pairs" if split == self.cfg.data.train_split else "max_valid_pairs"
            lines = "its first line" if limit == 1 else f"its first {limit} lines"
            lines += f" (data.{key})"
        else:
            lines = "line 1" if n == 1 else f"lines 1-{n}"
        what = "is blank or has" if min(n, limit or n) == 1 else "are all blank or have"
        raise UserError(
            f"{where}: no sentence pairs for the {split} split: {lines} {what} an empty side"
        )

    def _tokenizer(self, train_src: Path, train_tgt: Path) -> Tokenizer:
        """SentencePiece on the training split only (its first ``max_train_pairs`` pairs), or
        the model already in ``work_dir`` when it was trained the same way, or ``data.spm_model``
        (:func:`seq2seq.data.tokenizer.ensure_tokenizer`); a resumed run's own model as it is."""
        d = self.cfg.data
        if self.resume:
            # The model the run has trained with, even if data.spm_model now names another
            # file or none: a run directory depends on nothing outside it.
            missing = [
                p for p in model_files(self.work_dir, joint=d.joint_vocab) if not p.is_file()
            ]
            if missing:
                raise UserError(
                    f"{missing[0]} is missing: --resume continues with the run's own "
                    "SentencePiece model, which its checkpoints were trained with"
                )
            return Tokenizer.load(self.work_dir, joint=d.joint_vocab)
        options = {
            "model_type": d.spm_type,
            "vocab_size": d.vocab_size,
            "joint": d.joint_vocab,
            "character_coverage": d.character_coverage,
            "max_sentences": d.spm_max_sentences,
            "seed": self.cfg.training.seed,
        }
        if d.multilingual:  # one piece per target-language tag (seq2seq.data.tags)
            options["user_symbols"] = tags_for(d.directions)
        if not self._limit(d.train_split):
            check_parallel(train_src, train_tgt)
            return ensure_tokenizer(
                self.work_dir, train_src, train_tgt, spm_model=d.spm_model, **options
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.data_dir, prefix=".spm-input-") as tmp:
            src_path, tgt_path = Path(tmp) / "train.src", Path(tmp) / "train.tgt"
            with (
                open(src_path, "w", encoding="utf-8") as fs,
                open(tgt_path, "w", encoding="utf-8") as ft,
            ):  # (at least one pair: _check_has_pairs)
                for _, src, tgt in iter_parallel(train_src, train_tgt, limit=d.max_train_pairs):
                    fs.write(src + "\n")
                    ft.write(tgt + "\n")
            return ensure_tokenizer(
                self.work_dir, src_path, tgt_path, spm_model=d.spm_model, **options
            )

    def _open_store(self, name: str, fingerprint: str) -> TokenStore:
        store = TokenStore(self.data_dir / name)
        if store.fingerprint != fingerprint:
            raise UserError(
                f"{store.path} was built with another SentencePiece model; run prepare_data again"
            )
        return store

    def setup(self, stage: str | None = None) -> None:
        """Open the tokenizer and stores, read the validation text and build the samplers."""
        d = self.cfg.data
        self.tokenizer = Tokenizer.load(self.work_dir, joint=d.joint_vocab)
        fingerprint = self.tokenizer.fingerprint()
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        if stage in (None, "fit"):
            self.train_store = self._open_store("train", fingerprint)
            epoch_fn = (lambda: self.trainer.current_epoch) if trainer is not None else None
            self.train_sampler = TokenBucketSampler(
                self.train_store.src_lens + 1,  # + EOS
                self.train_store.tgt_lens + 2,  # + BOS, EOS
                max_tokens=d.max_tokens,
                seed=self.cfg.training.seed,
                shuffle=True,
                num_replicas=world,
                rank=rank,
                bucket_width=d.bucket_width,
                epoch_fn=epoch_fn,
                select=self._direction_sampler(),
            )
        if stage in (None, "fit", "validate"):
            self.valid_store = self._open_store("valid", fingerprint)
            valid_src, valid_tgt = self.split_files(d.valid_split)
            limit = self._limit(d.valid_split)
            text = read_parallel(valid_src, valid_tgt, limit=limit, split=d.valid_split)
            at = {line: i for i, line in enumerate(text.lines)}
            kept_lines = self.valid_store.lines.tolist()
            kept = [at.get(line) for line in kept_lines]
            if None in kept:  # (the store may drop over-long pairs, never hold others)
                raise UserError(
                    f"{self.valid_store.path} does not match {valid_src}; run prepare_data again"
                )
            self.valid_src_text = [text.src[i] for i in kept]
            self.valid_ref_text = [text.tgt[i] for i in kept]
            self.valid_directions = self._directions_of(d.valid_split, kept_lines)
            self.valid_sampler = TokenBucketSampler(
                self.valid_store.src_lens + 1,
                self.valid_store.tgt_lens + 2,
                max_tokens=d.max_tokens,
                seed=0,
                shuffle=False,
                num_replicas=world,
                rank=rank,
            )

    def _directions_of(self, split: str, lines) -> list[str] | None:
        """The direction (``en-de``) of each of a multilingual split's line numbers."""
        if not self.cfg.data.multilingual:
            return None
        counts = read_direction_counts(self.data_dir / "text" / "multi", split)
        names = [f"{s}-{t}" for s, t, _ in counts]
        return [names[g] for g in direction_of_lines(lines, [n for _, _, n in counts])]

    def _direction_sampler(self) -> DirectionSampler | None:
        """A multilingual run's per-epoch draw of training pairs (temperature sampling)."""
        d = self.cfg.data
        if not d.multilingual or self.train_store is None:
            return None
        counts = read_direction_counts(self.data_dir / "text" / "multi", d.train_split)
        groups = direction_of_lines(np.asarray(self.train_store.lines), [n for *_, n in counts])
        return DirectionSampler(
            groups, temperature=d.sampling_temperature, seed=self.cfg.training.seed
        )

    def _loader(self, store: TokenStore | None, sampler: TokenBucketSampler | None) -> DataLoader:
        if store is None or sampler is None:
            raise UserError("the datamodule is not set up: call prepare_data() and setup() first")
        workers = self.cfg.data.num_workers
        return DataLoader(
            store,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=workers,
            persistent_workers=workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """Token-bucket batches of the training store, reshuffled every epoch."""
        return self._loader(self.train_store, self.train_sampler)

    def val_dataloader(self) -> DataLoader:
        """Validation batches in length order (``Batch.index`` maps back to ``valid_*_text``)."""
        return self._loader(self.valid_store, self.valid_sampler)

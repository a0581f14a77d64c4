"""Registry of public parallel corpora: where their files are, how to check and extract them.

A :class:`Corpus` lists its downloadable files (:class:`RemoteFile`: a path below a
:class:`Source` and its checksum) and, for every ``(variant, split, language)``, the
:class:`Part` s whose lines, concatenated, make that side of the split (a file, or a member of a
``.tgz``/``.zip`` archive, in plain text, WMT/IWSLT SGML-XML or IWSLT ``train.tags`` format).
A split whose files differ by direction (sacreBLEU's WMT test sets: ``de-en`` reads
``src.de`` + ``ref.en``, ``en-de`` reads ``src.en`` + ``ref.de``) lists them per direction in
:attr:`Corpus.directed`. A split may then go through the text steps of a reference script
(:mod:`seq2seq.data.reference_steps`: Moses tokenization, ``clean-corpus-n.perl``, lowercasing,
fairseq's every-23rd-line validation split...), listed in :attr:`Corpus.steps`. Every split's
:attr:`Corpus.cites` entry names the line of the script, or the sacreBLEU definition, it mirrors.

Where files come from:

- the cache directory (``cache_dir``; default ``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``), where
  downloads land as ``CACHE/SOURCE/PATH``. A download is written to ``PATH.part`` and resumed
  with an HTTP ``Range`` request when it was interrupted; it is checked against its sha256 (or
  the md5 sacreBLEU publishes, where no sha256 is known) and only then renamed (atomically) to
  ``PATH``. A file whose sum does not match is deleted and reported with both sums.
- or an offline mirror (``mirror``; default ``$SEQ2SEQ_MIRROR``), in either of two forms: a
  *root* holding one folder per source, ``ROOT/<source>/PATH`` (``multi30k/``, ``wit3/``,
  ``fairseq/``, ``statmt/``, ``opus/``: :func:`list_sources`), so one setting serves every
  corpus; or one source's folder itself, ``DIR/PATH`` (the older one-corpus form). A mirror
  *replaces* the network: a file missing from it is "not available" (nothing is downloaded).
  Mirror files are checked against their checksums too.

Files without a known checksum are accepted unverified with an :class:`UnverifiedFileWarning`.

:func:`prepare_corpus` writes each available split as plain UTF-8 text files
``OUT/{split}.{lang}`` (one sentence per line, the two sides line-aligned); ``seq2seq prepare`` is
its command-line face. Both sides of a split are written to temporary files and renamed into
place only once they have the same number of lines, so a failed prepare never leaves a
mismatched pair behind. Validation of the text itself (UTF-8, empty lines, lengths) happens when
it is read (:mod:`seq2seq.data.parallel`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from seq2seq.core import UserError, atomic_open, sha256_file
from seq2seq.data.reference_steps import (
    CleanCorpus,
    EveryNth,
    Lowercase,
    MosesTokenize,
    NormalizePunctuation,
    RemoveNonPrinting,
    Replace,
    Step,
    run_steps,
)

__all__ = [
    "ChecksumError",
    "Corpus",
    "NotAvailableError",
    "Part",
    "RemoteFile",
    "Source",
    "UnverifiedFileWarning",
    "default_cache_dir",
    "default_mirror",
    "download",
    "fetch",
    "get_corpus",
    "list_corpora",
    "list_sources",
    "parse_pair",
    "prepare_corpus",
]

_CHUNK = 1 << 20
_FORMATS = ("text", "sgm", "iwslt_tags", "fairseq_seg")


class NotAvailableError(UserError):
    """A registered file or split cannot be obtained here (no network, not in the mirror, 404)."""


class ChecksumError(UserError):
    """A file's checksum differs from the registered one (the file is not used)."""


class UnverifiedFileWarning(UserWarning):
    """A file was used without checking it, because the registry has no checksum for it."""


@dataclass(frozen=True)
class Source:
    """A place files are downloaded from; also the folder name of a mirror root.

    Attributes:
        name: Folder of a mirror root (``ROOT/<name>/PATH``) and of the cache.
        base_url: URL every :attr:`RemoteFile.path` of this source is relative to.
    """

    name: str
    base_url: str


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file.

    Attributes:
        path: Path relative to the source's base URL; also its path inside a mirror and the cache.
        sha256: Hex digest, or None when unknown.
        source: Where the file lives; None means the corpus' own source.
        md5: Hex md5 (the checksum sacreBLEU's dataset definitions publish), checked when no
            sha256 is known. With neither, the file is used unverified, with a warning.
    """

    path: str
    sha256: str | None
    source: Source | None = None
    md5: str | None = None


@dataclass(frozen=True)
class Part:
    """A piece of one side of a split: a file, or a member of an archive file.

    Attributes:
        file: The downloaded file.
        member: Path of a member inside ``file`` when it is a ``.tgz``/``.tar``/``.zip`` archive.
        format: How its lines become sentences:

            - ``text``: one sentence a line, copied byte for byte (gzip detected from its magic
              bytes).
            - ``sgm``: WMT "fake SGML" and IWSLT XML, as sacreBLEU reads them
              (``sacrebleu/dataset/fake_sgml.py``): a line starting with ``<seg `` gives
              ``re.sub(r"<seg.*?>(.*)</seg>.*?", r"\\1", line)`` with whitespace collapsed
              on the decoded text (``re.sub(r"\\s+", " ", s.strip())``, which also collapses
              U+00A0, U+2009 and other Unicode spaces); other lines are skipped.
            - ``iwslt_tags``: IWSLT ``train.tags`` files as prepare-iwslt14.sh filters them
              (``grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>'``, then
              ``<title>``/``<description>`` tags removed by ``sed``).
            - ``fairseq_seg``: IWSLT XML as prepare-iwslt14.sh extracts valid/test data
              (``grep '<seg id' | sed -e 's/<seg id="[0-9]*">\\s*//g' |
              sed -e 's/\\s*<\\/seg>\\s*//g'``; sed's ``\\s`` taken as ASCII whitespace).
    """

    file: RemoteFile
    member: str | None = None
    format: str = "text"

    def __post_init__(self) -> None:
        if self.format not in _FORMATS:
            raise ValueError(f"unknown part format {self.format!r}; use one of {_FORMATS}")


@dataclass(frozen=True, eq=False)
class Corpus:
    """A registered parallel corpus.

    Attributes:
        name: Registry name (``multi30k``).
        description: One line for ``seq2seq prepare --list``.
        base_url: URL of the corpus' own source (files without a ``source`` of their own).
        languages: Languages; any ordered pair of two of them is a valid ``pair``.
        variants: Text variants (``raw``; Multi30K also has ``tok``, IWSLT14 ``fairseq``).
        splits: Split names in their natural order (training split first).
        layout: ``(variant, split, lang) -> parts`` whose lines, concatenated, form that side.
            A ``(split, lang)`` missing here (and in ``directed``) does not exist upstream.
        line_counts: Documented number of sentences of some splits (key ``split`` or
            ``split:src-tgt``); a prepared split whose count differs gets a warning.
        directed: ``(variant, split, "src-tgt", lang) -> parts`` for splits whose files depend
            on the direction; looked up before ``layout``.
        steps: ``(variant, split) -> steps`` applied to the extracted pairs (see
            :mod:`seq2seq.data.reference_steps`). Splits that end in an :class:`EveryNth` over the same
            parts and earlier steps (fairseq's train/valid) are written in one pass.
        tokenized_variants: Variants whose text is tokenized and lowercased (models trained on
            them are scored with ``--tokenized-lc``).
        source_name: Folder of the corpus' own source in a mirror root (default: ``name``).
        cites: ``split -> where its definition comes from`` (script line, sacreBLEU name).
    """

    name: str
    description: str
    base_url: str
    languages: tuple[str, ...]
    variants: tuple[str, ...]
    splits: tuple[str, ...]
    layout: Mapping[tuple[str, str, str], tuple[Part, ...]]
    line_counts: Mapping[str, int] = field(default_factory=dict)
    directed: Mapping[tuple[str, str, str, str], tuple[Part, ...]] = field(default_factory=dict)
    steps: Mapping[tuple[str, str], tuple[Step, ...]] = field(default_factory=dict)
    tokenized_variants: tuple[str, ...] = ()
    source_name: str | None = None
    cites: Mapping[str, str] = field(default_factory=dict)

    @property
    def source(self) -> Source:
        """The corpus' own source (the default of its files)."""
        return Source(self.source_name or self.name, self.base_url)

    def file_source(self, file: RemoteFile) -> Source:
        """Where ``file`` lives."""
        return file.source or self.source

    def parts(self, variant: str, split: str, pair: str, lang: str) -> tuple[Part, ...] | None:
        """The parts of one side of a split in direction ``pair``; None if it does not exist."""
        directed = self.directed.get((variant, split, pair, lang))
        if directed is not None:
            return directed
        return self.layout.get((variant, split, lang))

    def has_split(self, variant: str, split: str, pair: str) -> bool:
        """Whether ``split`` exists in ``variant`` for both languages of ``pair``."""
        return all(self.parts(variant, split, pair, lang) is not None for lang in pair.split("-"))

    def files(self) -> list[RemoteFile]:
        """Every distinct file the layout uses."""
        seen: dict[tuple[str, str], RemoteFile] = {}
        for parts in (*self.layout.values(), *self.directed.values()):
            for part in parts:
                seen.setdefault((self.file_source(part.file).name, part.file.path), part.file)
        return list(seen.values())

    def url(self, file: RemoteFile) -> str:
        """The download URL of ``file``."""
        return self.file_source(file).base_url.rstrip("/") + "/" + file.path

    def expected_lines(self, split: str, pair: str) -> int | None:
        """The documented line count of ``split`` in direction ``pair``, if any."""
        return self.line_counts.get(f"{split}:{pair}", self.line_counts.get(split))

    def summary(self) -> str:
        """One line: name, languages, variants, splits and description."""
        return (
            f"{self.name}: {self.description} (languages {','.join(self.languages)}; "
            f"variants {','.join(self.variants)}; splits {','.join(self.splits)})"
        )


# ---------------------------------------------------------------------------------------------
# The registry (data). Sources: their names are the folders of a mirror root.

MULTI30K = Source("multi30k", "https://raw.githubusercontent.com/multi30k/dataset/master/")
WIT3 = Source("wit3", "https://raw.githubusercontent.com/hlt-mt/WIT3/master/archive/")
FAIRSEQ = Source("fairseq", "http://dl.fbaipublicfiles.com/fairseq/data/")
STATMT = Source("statmt", "https://statmt.org/")
STATMT_DATA = Source("statmt-data", "https://data.statmt.org/")
OPUS = Source("opus", "https://object.pouta.csc.fi/")
_SOURCES = (MULTI30K, WIT3, FAIRSEQ, STATMT, STATMT_DATA, OPUS)

# Multi30K: the upstream files' sums. Those of the training, validation and 2016 test files equal
# the reference mirror's SHA256SUMS (tests/test_corpora.py checks it); the 2017/2018 test sets are
# not mirrored here: their sums are those of upstream commit a3d2e0d, as given in issue 21.
_MULTI30K_SHA256 = {
    "data/task1/raw/test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "data/task1/raw/test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "data/task1/raw/test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "data/task1/raw/test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "data/task1/raw/train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "data/task1/raw/train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "data/task1/raw/train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "data/task1/raw/train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "data/task1/raw/val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "data/task1/raw/val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "data/task1/raw/val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "data/task1/raw/val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "data/task1/tok/test_2016_flickr.lc.norm.tok.cs": "748c8816de928732365176e5c5d2f9bbabcec9b8d4448fba2d230feb057898a7",
    "data/task1/tok/test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "data/task1/tok/test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "data/task1/tok/test_2016_flickr.lc.norm.tok.fr": "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
    "data/task1/tok/train.lc.norm.tok.cs": "7645fb91efa18f94c83d493f740a5d5a941e4b01efa6a124bf2d4af040e133e0",
    "data/task1/tok/train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "data/task1/tok/train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "data/task1/tok/train.lc.norm.tok.fr": "8fa41bb718412bcb7c5dfa58603842810a01543eae86a51279f9886b901266e1",
    "data/task1/tok/val.lc.norm.tok.cs": "b87ee4917f4a0f9ca6cca03e402026c9f4437dc1bd6a7dadfd2544ecfb6c5501",
    "data/task1/tok/val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "data/task1/tok/val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "data/task1/tok/val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    # upstream commit a3d2e0d (issue 21); not verifiable on this offline machine
    "data/task1/raw/test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "data/task1/tok/test_2017_flickr.lc.norm.tok.en": "c9d1dfd7a26add989382e534af235af9f0f658b2a30e7eb0efdaf142496ee54f",
    "data/task1/raw/test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "data/task1/tok/test_2017_flickr.lc.norm.tok.de": "02067e4a9402786a4fcb8c1b6f4307e4a5073ced64800abead5273b54f5f31f6",
    "data/task1/raw/test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "data/task1/tok/test_2017_flickr.lc.norm.tok.fr": "c0583117a47b31e8a6c6a97cfe8de153e462074668f4e994764fcc80b21d33b4",
    "data/task1/raw/test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "data/task1/tok/test_2017_mscoco.lc.norm.tok.en": "fe69ae004d71c42ead0301e70c57de5b1b6b5fb7f52210d42b22801e98e656f3",
    "data/task1/raw/test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "data/task1/tok/test_2017_mscoco.lc.norm.tok.de": "e2825990b8a4e5289d2cdba801d57c187810bab9b4f5d87a30c35800a0d871b6",
    "data/task1/raw/test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "data/task1/tok/test_2017_mscoco.lc.norm.tok.fr": "0b6a4620f02b6b9acf7811fda23f90fed9c6baa0b96aa224db50a273078c84d1",
    "data/task1/raw/test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "data/task1/tok/test_2018_flickr.lc.norm.tok.en": "a66e25cbb8323d74a40873dcd222659f39e30ee7687a6ed5445833aed0673239",
    "data/task1/raw/test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "data/task1/tok/test_2018_flickr.lc.norm.tok.de": "45ce6b121708adf538d3a8c71dc1acbcb1e0f2bca74ace8e58652f9ea5b96335",
    "data/task1/raw/test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "data/task1/tok/test_2018_flickr.lc.norm.tok.fr": "22d44a4ba21e050f218399f2c4f9e1a36875f209820c1f1c9af5b76a2947a71c",
    "data/task1/raw/test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "data/task1/tok/test_2018_flickr.lc.norm.tok.cs": "09a4987a524dea4852ccfef35329281b2cd577780691b732341ccecc4015aa4c",
}

# Which languages each Multi30K task-1 split has upstream (github.com/multi30k/dataset).
_MULTI30K_SPLITS = {
    "train": ("en", "de", "fr", "cs"),
    "val": ("en", "de", "fr", "cs"),
    "test_2016_flickr": ("en", "de", "fr", "cs"),
    "test_2017_flickr": ("en", "de", "fr"),
    "test_2017_mscoco": ("en", "de", "fr"),
    "test_2018_flickr": ("en", "de", "fr", "cs"),
}


def _multi30k() -> Corpus:
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    for split, langs in _MULTI30K_SPLITS.items():
        for lang in langs:
            for variant, path in (
                ("raw", f"data/task1/raw/{split}.{lang}.gz"),
                ("tok", f"data/task1/tok/{split}.lc.norm.tok.{lang}"),
            ):
                layout[variant, split, lang] = (Part(RemoteFile(path, _MULTI30K_SHA256.get(path))),)
    upstream = "github.com/multi30k/dataset data/task1/raw/{split}.{lang}.gz (tok: tok/{split}.lc.norm.tok.{lang})"
    return Corpus(
        name="multi30k",
        description="Multi30K task 1, image captions (Elliott et al., 2016)",
        base_url=MULTI30K.base_url,
        languages=("en", "de", "fr", "cs"),
        variants=("raw", "tok"),
        splits=tuple(_MULTI30K_SPLITS),
        layout=layout,
        line_counts={
            "train": 29000,
            "val": 1014,
            "test_2016_flickr": 1000,
            "test_2017_flickr": 1000,
            "test_2017_mscoco": 461,
            "test_2018_flickr": 1071,
        },
        tokenized_variants=("tok",),
        cites={
            **{split: upstream.format(split=split, lang="LANG") for split in _MULTI30K_SPLITS},
            "test_2016_flickr": "sacreBLEU multi30k/2016 (the same raw files); "
            + upstream.format(split="test_2016_flickr", lang="LANG"),
            "test_2017_flickr": "sacreBLEU multi30k/2017; "
            + upstream.format(split="test_2017_flickr", lang="LANG"),
            "test_2018_flickr": "sacreBLEU multi30k/2018; "
            + upstream.format(split="test_2018_flickr", lang="LANG"),
        },
    )


# IWSLT 2014 de-en: fairseq's examples/translation/prepare-iwslt14.sh, line by line:
#   URL="http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"   (fairseq's copy since
#       "Fix IWSLT'14 link", fairseq issue 2984; the WIT3 2014-01 address is gone)
#   train: cat train.tags.de-en.$l | grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>'
#          | sed -e 's/<title>//g' ... 's/<\/description>//g' | tokenizer.perl -threads 8 -l $l
#          clean-corpus-n.perl -ratio 1.5 train.tags.de-en.tok de en train.tags.de-en.clean 1 175
#          lowercase.perl
#   valid/test: grep '<seg id' IWSLT14.TED*.$l.xml | sed -e 's/<seg id="[0-9]*">\s*//g'
#          | sed -e 's/\s*<\/seg>\s*//g' | sed -e "s/\’/\'/g" | tokenizer.perl -l $l | lowercase.perl
#   valid = awk '{if (NR%23 == 0) print $0; }' train.tags.de-en.$l; train = awk 'NR%23 != 0'
#   test  = cat IWSLT14.TED.dev2010 IWSLT14.TEDX.dev2012 IWSLT14.TED.tst2010 .tst2011 .tst2012
# Variant `fairseq` is that pipeline's output byte for byte (before its BPE); variant `raw` is the
# same sentence pairs, cased and untokenized (train/valid: the lines clean-corpus-n keeps, counted
# on their Moses tokenization; test sets as sacreBLEU reads XML). The IWSLT 2017 test sets
# (sacreBLEU iwslt17 = tst2017, iwslt17/tst2016) come from the WIT3 repository.
_IWSLT14_TRAIN = RemoteFile("iwslt14/de-en.tgz", None, FAIRSEQ)
_IWSLT17_TEST = {
    # sha256 of the mirrored files (../shared/data/wit3/SHA256SUMS; upstream WIT3 commit e43615b);
    # md5 as in sacreBLEU's iwslt17 definition
    "de": RemoteFile(
        "2017-01-ted-test/texts/de/en/de-en.tgz",
        "b0034e3c957da26eaf3c573390c3fc669d509ea94c0b398889ad74bddadb4974",
        WIT3,
        md5="e3f5b2a075a2da1a395c8b60bf1e9be1",
    ),
    "en": RemoteFile(
        "2017-01-ted-test/texts/en/de/en-de.tgz",
        "0c786a6905618af716da365592594473481ba9548a922506aaf6c17f1aee27e4",
        WIT3,
        md5="b68e7097b179491f6c466ef41ad72b9b",
    ),
}
_IWSLT14_TESTS = ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")
_IWSLT14_SETS = {"dev2010": "TED.dev2010", "dev2012": "TEDX.dev2012", "tst2010": "TED.tst2010",
                 "tst2011": "TED.tst2011", "tst2012": "TED.tst2012"}  # fmt: skip
_FAIRSEQ_TRAIN = (MosesTokenize(), CleanCorpus(1, 175, 1.5), Lowercase())
_FAIRSEQ_TEST = (Replace("’", "'"), MosesTokenize(), Lowercase())
_RAW_TRAIN = (CleanCorpus(1, 175, 1.5, count_tokenized=True),)


def _iwslt14() -> Corpus:
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    steps: dict[tuple[str, str], tuple[Step, ...]] = {}
    for lang in ("de", "en"):
        other = "en" if lang == "de" else "de"
        tags = (Part(_IWSLT14_TRAIN, f"de-en/train.tags.de-en.{lang}", "iwslt_tags"),)
        for variant, fmt in (("raw", "sgm"), ("fairseq", "fairseq_seg")):

            def xml(name: str, fmt: str = fmt, lang: str = lang) -> Part:
                return Part(_IWSLT14_TRAIN, f"de-en/IWSLT14.{name}.de-en.{lang}.xml", fmt)

            layout[variant, "train", lang] = tags
            layout[variant, "valid", lang] = tags
            layout[variant, "test", lang] = tuple(xml(n) for n in _IWSLT14_TESTS)
            for split, name in _IWSLT14_SETS.items():
                layout[variant, split, lang] = (xml(name),)
            # sacreBLEU iwslt17 (tst2017) and iwslt17/tst2016: each side is the source file of the
            # direction that starts with it (de-en/...de.xml and en-de/...en.xml).
            for split, tst in (("iwslt17", "tst2017"), ("iwslt17_tst2016", "tst2016")):
                member = f"{lang}-{other}/IWSLT17.TED.{tst}.{lang}-{other}.{lang}.xml"
                layout[variant, split, lang] = (Part(_IWSLT17_TEST[lang], member, fmt),)
    for variant, train_steps, test_steps in (
        ("fairseq", _FAIRSEQ_TRAIN, _FAIRSEQ_TEST),
        ("raw", _RAW_TRAIN, ()),
    ):
        steps[variant, "train"] = (*train_steps, EveryNth(23, keep=False))
        steps[variant, "valid"] = (*train_steps, EveryNth(23, keep=True))
        for split in ("test", *_IWSLT14_SETS, "iwslt17", "iwslt17_tst2016"):
            if test_steps:
                steps[variant, split] = test_steps
    script = "fairseq examples/translation/prepare-iwslt14.sh"
    return Corpus(
        name="iwslt14",
        description="IWSLT 2014 German-English TED talks, fairseq's splits (prepare-iwslt14.sh); "
        "sacreBLEU's iwslt17 (tst2017) and iwslt17/tst2016",
        base_url=FAIRSEQ.base_url,
        languages=("de", "en"),
        variants=("raw", "fairseq"),
        splits=(
            "train",
            "valid",
            "test",
            *_IWSLT14_SETS,
            "iwslt17",
            "iwslt17_tst2016",
        ),  # fmt: skip
        layout=layout,
        steps=steps,
        line_counts={"iwslt17": 1138, "iwslt17_tst2016": 1133},
        tokenized_variants=("fairseq",),
        source_name=FAIRSEQ.name,
        cites={
            "train": f"{script}: awk '{{if (NR%23 != 0) print $0; }}' of the cleaned train.tags "
            "(grep -v <url>/<talkid>/<keywords>, tokenizer.perl, clean-corpus-n.perl -ratio 1.5 "
            "1 175, lowercase.perl)",
            "valid": f"{script}: awk '{{if (NR%23 == 0) print $0; }}' of the same text",
            "test": f"{script}: cat IWSLT14.TED.dev2010 IWSLT14.TEDX.dev2012 IWSLT14.TED.tst2010 "
            "IWSLT14.TED.tst2011 IWSLT14.TED.tst2012 (grep '<seg id' | sed | s/’/'/ | "
            "tokenizer.perl | lowercase.perl)",
            **{
                s: f"{script}: one of the five test sets (IWSLT14.{n})"
                for s, n in _IWSLT14_SETS.items()
            },
            "iwslt17": "sacreBLEU iwslt17 (de-en/IWSLT17.TED.tst2017.de-en.de.xml, "
            "en-de/IWSLT17.TED.tst2017.en-de.en.xml)",
            "iwslt17_tst2016": "sacreBLEU iwslt17/tst2016 (de-en/IWSLT17.TED.tst2016.de-en.de.xml, "
            "en-de/IWSLT17.TED.tst2016.en-de.en.xml)",
        },
    )


# WMT14 en-de: training data as fairseq's prepare-wmt14en2de.sh --icml17 lists it (Europarl v7,
# CommonCrawl, News Commentary v9: the WMT14 task's own; without --icml17 the script takes
# News Commentary v12 from WMT17). Variant `norm` runs its training-text steps
#   cat $orig/$f.$l | perl $NORM_PUNC $l | perl $REM_NON_PRINT_CHAR | ...
# (it then Moses-tokenizes and BPEs; here SentencePiece takes the text as it is). Its
#   perl $CLEAN -ratio 1.5 $tmp/bpe.train $src $tgt $prep/train 1 250
# is the configs' data.max_ratio 1.5 / data.max_len 250, counted in SentencePiece pieces.
# Test sets are sacreBLEU's in every variant: wmt14 (test-filtered.tgz) and wmt14/full
# (test-full.tgz), whose files depend on the direction; wmt13 (newstest2013) validates.
_WMT14_FILES = {
    "europarl": RemoteFile("wmt13/training-parallel-europarl-v7.tgz", None, STATMT),
    "commoncrawl": RemoteFile("wmt13/training-parallel-commoncrawl.tgz", None, STATMT),
    "news": RemoteFile("wmt14/training-parallel-nc-v9.tgz", None, STATMT),
    # md5 as in sacreBLEU's wmt13, wmt14 and wmt14/full definitions
    "wmt13": RemoteFile("wmt13/test.tgz", None, STATMT, md5="48eca5d02f637af44e85186847141f67"),
    "wmt14": RemoteFile(
        "wmt14/test-filtered.tgz", None, STATMT, md5="84c597844c1542e29c2aff23aaee4310"
    ),
    "wmt14_full": RemoteFile(
        "wmt14/test-full.tgz", None, STATMT, md5="a8cd784e006feb32ac6f3d9ec7eb389a"
    ),
}


def _wmt14() -> Corpus:
    f = _WMT14_FILES
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    directed: dict[tuple[str, str, str, str], tuple[Part, ...]] = {}
    steps: dict[tuple[str, str], tuple[Step, ...]] = {
        ("norm", "train"): (NormalizePunctuation(), RemoveNonPrinting())
    }
    for variant in ("raw", "norm"):
        for lang in ("en", "de"):
            layout[variant, "train", lang] = (
                Part(f["europarl"], f"training/europarl-v7.de-en.{lang}"),
                Part(f["commoncrawl"], f"commoncrawl.de-en.{lang}"),
                Part(f["news"], f"training/news-commentary-v9.de-en.{lang}"),
            )
            # sacreBLEU wmt13: test/newstest2013-src.{en,de}.sgm in both directions
            layout[variant, "wmt13", lang] = (
                Part(f["wmt13"], f"test/newstest2013-src.{lang}.sgm", "sgm"),
            )
        # sacreBLEU wmt14 / wmt14/full: de-en = src.de + ref.en, en-de = src.en + ref.de
        for split, folder in (("wmt14", "test"), ("wmt14_full", "test-full")):
            for src, tgt in (("de", "en"), ("en", "de")):
                pair = f"{src}-{tgt}"
                directed[variant, split, pair, src] = (
                    Part(f[split], f"{folder}/newstest2014-deen-src.{src}.sgm", "sgm"),
                )
                directed[variant, split, pair, tgt] = (
                    Part(f[split], f"{folder}/newstest2014-deen-ref.{tgt}.sgm", "sgm"),
                )
    script = "fairseq examples/translation/prepare-wmt14en2de.sh"
    return Corpus(
        name="wmt14",
        description="WMT14 English-German: Europarl v7 + CommonCrawl + News Commentary v9; "
        "newstest2013 (wmt13) for validation; newstest2014 (sacreBLEU wmt14 and wmt14/full)",
        base_url=STATMT.base_url,
        languages=("en", "de"),
        variants=("raw", "norm"),
        splits=("train", "wmt13", "wmt14", "wmt14_full"),
        layout=layout,
        directed=directed,
        steps=steps,
        line_counts={"wmt13": 3000, "wmt14:en-de": 2737, "wmt14_full": 3003},
        source_name=STATMT.name,
        cites={
            "train": f"{script} --icml17: CORPORA europarl-v7, commoncrawl, news-commentary-v9 "
            "(norm: perl $NORM_PUNC $l | perl $REM_NON_PRINT_CHAR)",
            "wmt13": "sacreBLEU wmt13 (test/newstest2013-src.{en,de}.sgm)",
            "wmt14": "sacreBLEU wmt14 (test-filtered.tgz: test/newstest2014-deen-src.SRC.sgm, "
            "-ref.TGT.sgm)",
            "wmt14_full": "sacreBLEU wmt14/full (test-full.tgz: test-full/newstest2014-deen-"
            f"src.SRC.sgm, -ref.TGT.sgm; {script}'s test set)",
        },
    )


# WMT16 en-ro: the WMT16 task's training data (Europarl v8 + SETimes2), newsdev2016 and
# newstest2016 as sacreBLEU's wmt16/dev and wmt16 define them: en-ro reads the enro files, ro-en
# the roen files.
_WMT16_FILES = {
    "europarl": RemoteFile("wmt16/translation-task/training-parallel-ep-v8.tgz", None, STATMT_DATA),
    "setimes": RemoteFile("OPUS-SETIMES/v2/moses/en-ro.txt.zip", None, OPUS),
    "newsdev2016": RemoteFile(
        "wmt16/translation-task/dev.tgz", None, STATMT_DATA, md5="4a3dc2760bb077f4308cce96b06e6af6"
    ),
    "wmt16": RemoteFile(
        "wmt16/translation-task/test.tgz", None, STATMT_DATA, md5="3d809cd0c2c86adb2c67034d15c4e446"
    ),
}


def _wmt16() -> Corpus:
    f = _WMT16_FILES
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    directed: dict[tuple[str, str, str, str], tuple[Part, ...]] = {}
    for lang in ("en", "ro"):
        layout["raw", "train", lang] = (
            Part(f["europarl"], f"training-parallel-ep-v8/europarl-v8.ro-en.{lang}"),
            Part(f["setimes"], f"SETIMES.en-ro.{lang}"),
        )
    for split, folder, name in (
        ("newsdev2016", "dev", "newsdev2016"),
        ("wmt16", "test", "newstest2016"),
    ):
        for src, tgt in (("en", "ro"), ("ro", "en")):
            pair = f"{src}-{tgt}"
            stem = f"{folder}/{name}-{src}{tgt}"
            directed["raw", split, pair, src] = (Part(f[split], f"{stem}-src.{src}.sgm", "sgm"),)
            directed["raw", split, pair, tgt] = (Part(f[split], f"{stem}-ref.{tgt}.sgm", "sgm"),)
    return Corpus(
        name="wmt16",
        description="WMT16 English-Romanian: Europarl v8 + SETimes2; newsdev2016 for validation; "
        "newstest2016 (sacreBLEU wmt16)",
        base_url=STATMT_DATA.base_url,
        languages=("en", "ro"),
        variants=("raw",),
        splits=("train", "newsdev2016", "wmt16"),
        layout=layout,
        directed=directed,
        line_counts={"newsdev2016": 1999, "wmt16": 1999},
        source_name=STATMT_DATA.name,
        cites={
            "train": "WMT16 news task en-ro training data: training-parallel-ep-v8.tgz "
            "(europarl-v8.ro-en) + SETimes2 (OPUS SETIMES v2 en-ro)",
            "newsdev2016": "sacreBLEU wmt16/dev (dev/newsdev2016-{enro,roen}-src/ref)",
            "wmt16": "sacreBLEU wmt16 (test/newstest2016-{enro,roen}-src/ref)",
        },
    )


_REGISTRY: dict[str, Corpus] = {c.name: c for c in (_multi30k(), _iwslt14(), _wmt14(), _wmt16())}


def list_corpora() -> list[str]:
    """Names of the registered corpora, sorted."""
    return sorted(_REGISTRY)


def list_sources() -> list[Source]:
    """The sources the registry downloads from; their names are a mirror root's folders."""
    return list(_SOURCES)


def get_corpus(name: str) -> Corpus:
    """The registered corpus ``name``; an unknown name is a :class:`UserError` listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"unknown corpus {name!r}; known corpora: {', '.join(list_corpora())}"
        ) from None


def parse_pair(pair: str) -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``; anything else is a :class:`UserError`."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise UserError(f"language pair {pair!r} must look like src-tgt, e.g. en-de")
    return parts[0], parts[1]


def default_cache_dir() -> Path:
    """``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``."""
    env = os.environ.get("SEQ2SEQ_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "seq2seq"


def default_mirror() -> Path | None:
    """``$SEQ2SEQ_MIRROR`` when set (and not empty), else None (download)."""
    env = os.environ.get("SEQ2SEQ_MIRROR")
    return Path(env) if env else None


# ---------------------------------------------------------------------------------------------
# Downloading and fetching


class _Interrupted(OSError):
    """The connection ended before the announced number of bytes arrived."""


def _receive(url: str, part: Path, timeout: float) -> None:
    """One HTTP request appending to (206) or rewriting (200) ``part``."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "seq2seq (python urllib)"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        mode = "wb"
        if offset and response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                part.unlink()
                raise _Interrupted(f"unexpected Content-Range {content_range!r} for {url}")
            mode = "ab"
        expected = response.headers.get("Content-Length")
        received = 0
        with open(part, mode) as f:
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                received += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        if expected is not None and received < int(expected):
            raise _Interrupted(f"connection closed after {received} of {expected} bytes of {url}")


def download(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None,
    md5: str | None = None,
    retries: int = 3,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest``, resumably, verified, atomically.

    Bytes go to ``dest.part``; an existing ``.part`` (an interrupted earlier download) is resumed
    with an HTTP ``Range`` request, and a connection that drops mid-way is resumed the same way up
    to ``retries`` times. A server that ignores ``Range`` (answers 200) restarts the file. When
    complete, the file is checked against ``sha256`` and only then renamed to ``dest``.

    Args:
        url: What to download (``http``, ``https`` or ``file``).
        dest: Final path.
        sha256: Expected hex digest; None checks ``md5`` instead.
        md5: Expected md5 when no sha256 is known; with neither, the file is used unverified
            (with an :class:`UnverifiedFileWarning`).
        retries: Attempts (each resuming the previous one) before giving up.
        timeout: Socket timeout in seconds.

    Returns:
        ``dest``.

    Raises:
        NotAvailableError: The server answered an error, or could not be reached (the ``.part``
            file is kept for a later resume).
        ChecksumError: The downloaded bytes have another sha256 (the ``.part`` file is deleted).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    error: Exception | None = None
    for _ in range(max(1, retries)):
        try:
            _receive(url, part, timeout)
            error = None
            break
        except urllib.error.HTTPError as e:
            if e.code == 416 and part.exists():
                # Range not satisfiable: the .part is already complete (or longer than the file).
                if _matches(part, sha256=sha256, md5=md5):
                    error = None
                    break
                part.unlink()
                error = e
                continue
            raise NotAvailableError(
                f"could not download {url}: HTTP {e.code} {e.reason}; "
                "without network, point --mirror (or SEQ2SEQ_MIRROR) at a local copy"
            ) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            error = e
    if error is not None:
        reason = getattr(error, "reason", None) or error
        kept = f"; the partial download {part} is kept and will be resumed" if part.exists() else ""
        raise NotAvailableError(
            f"could not download {url} ({reason}){kept}; "
            "without network, point --mirror (or SEQ2SEQ_MIRROR) at a local copy"
        )
    try:
        _verify(part, sha256=sha256, md5=md5, what=f"{dest.name} downloaded from {url}")
    except ChecksumError:
        part.unlink()
        raise
    os.replace(part, dest)
    return dest


def _md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _matches(path: Path, *, sha256: str | None, md5: str | None) -> bool:
    """Whether ``path`` has the given checksum (False when none is known)."""
    if sha256 is not None:
        return sha256_file(path) == sha256
    if md5 is not None:
        return _md5_file(path) == md5
    return False


def _verify(path: Path, *, sha256: str | None, md5: str | None, what: str, after: str = "") -> None:
    """Check ``path`` against its sha256 (else md5); unknown sums warn, mismatches raise."""
    if sha256 is None and md5 is None:
        warnings.warn(
            f"{what}: no checksum is registered for this file; it is used unverified",
            UnverifiedFileWarning,
            stacklevel=3,
        )
        return
    kind, expected = ("sha256", sha256) if sha256 is not None else ("md5", md5)
    got = sha256_file(path) if sha256 is not None else _md5_file(path)
    if got != expected:
        raise ChecksumError(
            f"checksum mismatch for {what}: expected {kind} {expected}, got {got}{after}"
        )


def mirror_candidates(corpus: Corpus, file: RemoteFile, mirror: Path) -> list[Path]:
    """Where a mirror may hold ``file``: ``ROOT/<source>/PATH`` (a root), then ``DIR/PATH``."""
    return [Path(mirror) / corpus.file_source(file).name / file.path, Path(mirror) / file.path]


def fetch(corpus: Corpus, file: RemoteFile, *, cache_dir: Path, mirror: Path | None) -> Path:
    """A verified local copy of ``file``: from the mirror, the cache, or downloaded into the cache.

    Raises:
        NotAvailableError: Not in the mirror (when one is given), or the download failed.
        ChecksumError: The mirror's copy or the download has another checksum.
    """
    if mirror is not None:
        candidates = mirror_candidates(corpus, file, Path(mirror))
        for path in candidates:
            if path.is_file():
                _verify(path, sha256=file.sha256, md5=file.md5, what=str(path), after="; not used")
                return path
        raise NotAvailableError(
            f"{corpus.name}: {file.path} is not available: not in the mirror {mirror} "
            f"(looked for {' and '.join(str(p) for p in candidates)})"
        )
    path = Path(cache_dir) / corpus.file_source(file).name / file.path
    if path.is_file():
        if file.sha256 is None and file.md5 is None:
            _verify(path, sha256=None, md5=None, what=str(path))
            return path
        if _matches(path, sha256=file.sha256, md5=file.md5):
            return path
        path.unlink()  # a damaged cache entry: fetch it again
    return download(corpus.url(file), path, sha256=file.sha256, md5=file.md5)


# ---------------------------------------------------------------------------------------------
# Extraction


@contextlib.contextmanager
def _open_member(path: Path, member: str | None) -> Iterator[BinaryIO]:
    """The bytes of ``path`` (or of its archive ``member``), gunzipped when they are gzip."""
    with contextlib.ExitStack() as stack:
        if member is None:
            raw: BinaryIO = stack.enter_context(open(path, "rb"))
        elif zipfile.is_zipfile(path):
            archive = stack.enter_context(zipfile.ZipFile(path))
            try:
                raw = stack.enter_context(archive.open(member))
            except KeyError:
                raise NotAvailableError(f"{path} has no member {member}") from None
        else:
            try:
                tar = stack.enter_context(tarfile.open(path, "r:*"))
                extracted = tar.extractfile(member)
            except KeyError:
                raise NotAvailableError(f"{path} has no member {member}") from None
            except tarfile.TarError as e:
                raise UserError(f"{path} is not a readable archive ({e})") from None
            if extracted is None:
                raise NotAvailableError(f"{path}: {member} is not a regular file")
            raw = stack.enter_context(extracted)
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw))
        yield raw


# sacreBLEU's FakeSGMLDataset._convert_format and Dataset._clean, on decoded text
_SACREBLEU_SEG = re.compile(r"<seg.*?>(.*)</seg>.*?")
_SACREBLEU_SPACE = re.compile(r"\s+")
# prepare-iwslt14.sh, train: grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>' |
# sed -e 's/<title>//g' -e 's/<\/title>//g' -e 's/<description>//g' -e 's/<\/description>//g'
_IWSLT_DROP = (b"<url>", b"<talkid>", b"<keywords>")
_IWSLT_STRIP = re.compile(rb"</?(?:title|description)>")
# prepare-iwslt14.sh, valid/test: grep '<seg id' | sed -e 's/<seg id="[0-9]*">\s*//g' |
# sed -e 's/\s*<\/seg>\s*//g'
_FAIRSEQ_SEG_OPEN = re.compile(rb'<seg id="[0-9]*">[ \t\n\r\f\v]*')
_FAIRSEQ_SEG_CLOSE = re.compile(rb"[ \t\n\r\f\v]*</seg>[ \t\n\r\f\v]*")


def _decode(raw: bytes, where: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{where}:{lineno}: invalid UTF-8 (byte {e.start + 1} of the line)"
        ) from None


def _write_part(src: BinaryIO, fmt: str, out: BinaryIO, where: str = "") -> int:
    """Copy one part's sentences to ``out`` (one a line); returns the number of lines written."""
    lines = 0
    if fmt == "text":
        last = b"\n"
        while chunk := src.read(_CHUNK):
            out.write(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
        if last != b"\n":  # a missing final newline must not glue two parts together
            out.write(b"\n")
            lines += 1
        return lines
    for lineno, raw in enumerate(src, 1):  # binary iteration splits on b"\n" only
        if fmt == "sgm":
            # sacreBLEU: `if line.startswith("<seg "): line = _clean(re.sub(...))`
            if not raw.startswith(b"<seg "):
                continue
            text = _SACREBLEU_SEG.sub(r"\1", _decode(raw, where, lineno))
            line = _SACREBLEU_SPACE.sub(" ", text.strip()).encode("utf-8")
        elif fmt == "fairseq_seg":
            if b"<seg id" not in raw:
                continue
            line = _FAIRSEQ_SEG_CLOSE.sub(b"", _FAIRSEQ_SEG_OPEN.sub(b"", raw.rstrip(b"\n")))
        else:  # iwslt_tags
            line = raw.rstrip(b"\n")
            if any(tag in line for tag in _IWSLT_DROP):
                continue
            line = _IWSLT_STRIP.sub(b"", line)
        out.write(line + b"\n")
        lines += 1
    return lines


def _read_lines(path: Path) -> Iterator[str]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            yield _decode(raw[:-1] if raw.endswith(b"\n") else raw, str(path), lineno)


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
        corpus: A registered name (:func:`list_corpora`) or a :class:`Corpus`.
        pair: ``src-tgt`` languages, e.g. ``en-de`` (either direction of the corpus' languages).
        out_dir: Where the text files go.
        variant: ``raw`` or another of the corpus' variants (Multi30K: ``tok``; IWSLT14:
            ``fairseq``; WMT14: ``norm``).
        splits: Splits to prepare. None: every registered split that has both languages; those
            that are not available (no network, not in the mirror) are skipped and reported via
            ``log``. Splits named here must be available.
        cache_dir: Download cache (default :func:`default_cache_dir`).
        mirror: Offline mirror: a root of source folders or one source's folder (default
            :func:`default_mirror`); it replaces the network.
        log: Called with one line per split written, skipped or reused (e.g. ``print``).

    Returns:
        ``split -> (source file, target file)`` for the splits asked for, in registry order.

    Raises:
        UserError: Unknown corpus, pair, variant or split; a requested split not available
            (:class:`NotAvailableError`); a checksum mismatch (:class:`ChecksumError`); the two
            sides of a split with different line counts.
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
                    with _open_member(path, part.member) as raw:
                        where = f"{path}:{part.member}" if part.member else str(path)
                        counts[lang] += _write_part(raw, part.format, f, where)
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
                pairs = zip(_read_lines(extracted[src]), _read_lines(extracted[tgt]))
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

"""Registry of public parallel corpora: where their files are, how to check and extract them.

A :class:`Corpus` lists its downloadable files (:class:`RemoteFile`: a path relative to a base
URL and its sha256) and, for every ``(variant, split, language)``, the :class:`Part` s whose
lines, concatenated, make that side of the split (a file, or a member of a ``.tgz``/``.zip``
archive, in plain text, WMT "fake SGML" or IWSLT ``train.tags`` format).

Where files come from:

- the cache directory (``cache_dir``; default ``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``), where
  downloads land as ``CACHE/CORPUS/PATH``. A download is written to ``PATH.part`` and resumed
  with an HTTP ``Range`` request when it was interrupted; it is checked against its sha256 and only
  then renamed (atomically) to ``PATH``. A file whose sum does not match is deleted and reported
  with both sums, so a bad file is never used nor kept.
- or an offline mirror (``mirror``; default ``$SEQ2SEQ_MIRROR``): a local folder holding the same
  relative paths as the base URL. A mirror *replaces* the network: a file missing from it is
  "not available" (nothing is downloaded). Mirror files are checked against their sha256 too.

Files whose sha256 is unknown (``None`` in the registry: the larger benchmarks, and the Multi30K
test sets that are not in our reference mirror) are accepted unverified with an
:class:`UnverifiedFileWarning`.

:func:`prepare_corpus` writes each available split as plain UTF-8 text files
``OUT/{split}.{lang}`` (one sentence per line, the two sides line-aligned); ``seq2seq prepare`` is
its command-line face. Validation of the text itself (UTF-8, empty lines, lengths) happens when it
is read (:mod:`seq2seq.data`).
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import re
import tarfile
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from seq2seq.errors import UserError
from seq2seq.files import atomic_open, sha256_file

__all__ = [
    "ChecksumError",
    "Corpus",
    "NotAvailableError",
    "Part",
    "RemoteFile",
    "UnverifiedFileWarning",
    "default_cache_dir",
    "default_mirror",
    "download",
    "fetch",
    "get_corpus",
    "list_corpora",
    "parse_pair",
    "prepare_corpus",
]

_CHUNK = 1 << 20
_FORMATS = ("text", "sgm", "iwslt_tags")


class NotAvailableError(UserError):
    """A registered file or split cannot be obtained here (no network, not in the mirror, 404)."""


class ChecksumError(UserError):
    """A file's sha256 differs from the registered one (the file is not used)."""


class UnverifiedFileWarning(UserWarning):
    """A file was used without checking it, because the registry has no sha256 for it."""


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file.

    Attributes:
        path: Path relative to the base URL; also its path inside a mirror and the cache.
        sha256: Hex digest, or None when unknown (then the file is used unverified, with a warning).
        base_url: A base URL for this file alone (a file hosted elsewhere than the corpus' other
            files); None means the corpus' ``base_url``.
    """

    path: str
    sha256: str | None
    base_url: str | None = None


@dataclass(frozen=True)
class Part:
    """A piece of one side of a split: a file, or a member of an archive file.

    Attributes:
        file: The downloaded file.
        member: Path of a member inside ``file`` when it is a ``.tgz``/``.tar``/``.zip`` archive.
        format: ``text`` (one sentence a line, gzip detected from its magic bytes), ``sgm`` (WMT
            and IWSLT XML: the text of each ``<seg ...>`` line, whitespace collapsed, as sacreBLEU
            reads it) or ``iwslt_tags`` (IWSLT ``train.tags`` files, filtered like fairseq's
            ``prepare-iwslt14.sh``: lines with ``<url>``, ``<talkid>`` or ``<keywords>`` dropped,
            ``<title>``/``<description>`` tags removed).
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
        base_url: URL that every :attr:`RemoteFile.path` is relative to (unless the file has its own).
        languages: Languages; any ordered pair of two of them is a valid ``pair``.
        variants: Text variants (``raw``; Multi30K also has ``tok``).
        splits: Split names in their natural order (training split first).
        layout: ``(variant, split, lang) -> parts`` whose lines, concatenated, form that side.
            A ``(split, lang)`` missing here does not exist upstream.
        line_counts: Documented number of sentences of some splits; a prepared split whose count
            differs gets a warning (the sha256 is the real check).
    """

    name: str
    description: str
    base_url: str
    languages: tuple[str, ...]
    variants: tuple[str, ...]
    splits: tuple[str, ...]
    layout: Mapping[tuple[str, str, str], tuple[Part, ...]]
    line_counts: Mapping[str, int] = field(default_factory=dict)

    def files(self) -> list[RemoteFile]:
        """Every distinct file the layout uses."""
        seen: dict[str, RemoteFile] = {}
        for parts in self.layout.values():
            for part in parts:
                seen.setdefault(part.file.path, part.file)
        return list(seen.values())

    def url(self, file: RemoteFile) -> str:
        """The download URL of ``file``."""
        return (file.base_url or self.base_url).rstrip("/") + "/" + file.path

    def summary(self) -> str:
        """One line: name, languages, variants, splits and description."""
        return (
            f"{self.name}: {self.description} (languages {','.join(self.languages)}; "
            f"variants {','.join(self.variants)}; splits {','.join(self.splits)})"
        )


# ---------------------------------------------------------------------------------------------
# The registry (data). Checksums of Multi30K are those of the upstream files (identical to the
# reference mirror's SHA256SUMS); its test_2017/test_2018 files are not in that mirror, so their
# sums are unknown here: None (used unverified, with a warning).

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
    return Corpus(
        name="multi30k",
        description="Multi30K task 1, image captions (Elliott et al., 2016)",
        base_url="https://raw.githubusercontent.com/multi30k/dataset/master/",
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
    )


# The larger benchmarks: their checksums are not known here (None: used unverified, with a
# warning). URLs are those of fairseq's preparation scripts and of sacreBLEU's test sets.

_WIT3 = "https://raw.githubusercontent.com/hlt-mt/WIT3/master/archive/"


def _iwslt14() -> Corpus:
    train = RemoteFile("2014-01/texts/de/en/de-en.tgz", None)
    test17 = {
        "de": RemoteFile("2017-01-ted-test/texts/de/en/de-en.tgz", None),
        "en": RemoteFile("2017-01-ted-test/texts/en/de/en-de.tgz", None),
    }
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}

    def xml(name: str, lang: str) -> Part:
        return Part(train, f"de-en/IWSLT14.{name}.de-en.{lang}.xml", "sgm")

    for lang in ("de", "en"):
        other = "en" if lang == "de" else "de"
        layout["raw", "train", lang] = (
            Part(train, f"de-en/train.tags.de-en.{lang}", "iwslt_tags"),
        )
        for name in ("dev2010", "tst2010", "tst2011", "tst2012"):
            layout["raw", name, lang] = (xml(f"TED.{name}", lang),)
        # fairseq's IWSLT'14 test set: these five sets concatenated, in this order.
        layout["raw", "test", lang] = tuple(
            xml(n, lang)
            for n in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")
        )
        # sacreBLEU's iwslt17: tst2017; each side is the source file of the direction it starts.
        layout["raw", "iwslt17", lang] = (
            Part(
                test17[lang], f"{lang}-{other}/IWSLT17.TED.tst2017.{lang}-{other}.{lang}.xml", "sgm"
            ),
        )
    return Corpus(
        name="iwslt14",
        description="IWSLT 2014 German-English TED talks (fairseq's splits) and sacreBLEU's iwslt17",
        base_url=_WIT3,
        languages=("de", "en"),
        variants=("raw",),
        splits=("train", "dev2010", "tst2010", "tst2011", "tst2012", "test", "iwslt17"),
        layout=layout,
        line_counts={"test": 6750},
    )


def _wmt14() -> Corpus:
    europarl = RemoteFile("wmt13/training-parallel-europarl-v7.tgz", None)
    commoncrawl = RemoteFile("wmt13/training-parallel-commoncrawl.tgz", None)
    news = RemoteFile("wmt14/training-parallel-nc-v9.tgz", None)
    dev = RemoteFile("wmt13/test.tgz", None)
    test = RemoteFile("wmt14/test-filtered.tgz", None)
    test_full = RemoteFile("wmt14/test-full.tgz", None)
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    for lang in ("en", "de"):
        side = "src" if lang == "en" else "ref"
        layout["raw", "train", lang] = (
            Part(europarl, f"training/europarl-v7.de-en.{lang}"),
            Part(commoncrawl, f"commoncrawl.de-en.{lang}"),
            Part(news, f"training/news-commentary-v9.de-en.{lang}"),
        )
        layout["raw", "wmt13", lang] = (Part(dev, f"test/newstest2013-src.{lang}.sgm", "sgm"),)
        layout["raw", "wmt14", lang] = (
            Part(test, f"test/newstest2014-deen-{side}.{lang}.sgm", "sgm"),
        )
        layout["raw", "wmt14_full", lang] = (
            Part(test_full, f"test-full/newstest2014-deen-{side}.{lang}.sgm", "sgm"),
        )
    return Corpus(
        name="wmt14",
        description="WMT14 English-German: Europarl v7 + CommonCrawl + News Commentary v9; "
        "newstest2013 (wmt13) for validation; newstest2014 (sacreBLEU wmt14, and wmt14_full)",
        base_url="https://statmt.org/",
        languages=("en", "de"),
        variants=("raw",),
        splits=("train", "wmt13", "wmt14", "wmt14_full"),
        layout=layout,
        line_counts={"wmt13": 3000, "wmt14": 2737, "wmt14_full": 3003},
    )


def _wmt16() -> Corpus:
    europarl = RemoteFile("wmt16/translation-task/training-parallel-ep-v8.tgz", None)
    setimes = RemoteFile(
        "OPUS-SETIMES/v2/moses/en-ro.txt.zip", None, base_url="https://object.pouta.csc.fi/"
    )
    dev = RemoteFile("wmt16/translation-task/dev.tgz", None)
    test = RemoteFile("wmt16/translation-task/test.tgz", None)
    layout: dict[tuple[str, str, str], tuple[Part, ...]] = {}
    for lang in ("en", "ro"):
        side = "src" if lang == "en" else "ref"
        layout["raw", "train", lang] = (
            Part(europarl, f"training-parallel-ep-v8/europarl-v8.ro-en.{lang}"),
            Part(setimes, f"SETIMES.en-ro.{lang}"),
        )
        # Both directions use the en->ro files (the same sentence pairs as sacreBLEU's en-ro).
        layout["raw", "newsdev2016", lang] = (
            Part(dev, f"dev/newsdev2016-enro-{side}.{lang}.sgm", "sgm"),
        )
        layout["raw", "wmt16", lang] = (
            Part(test, f"test/newstest2016-enro-{side}.{lang}.sgm", "sgm"),
        )
    return Corpus(
        name="wmt16",
        description="WMT16 English-Romanian: Europarl v8 + SETimes2; newsdev2016 for validation; "
        "newstest2016 (sacreBLEU wmt16)",
        base_url="https://data.statmt.org/",
        languages=("en", "ro"),
        variants=("raw",),
        splits=("train", "newsdev2016", "wmt16"),
        layout=layout,
        line_counts={"newsdev2016": 1999, "wmt16": 1999},
    )


_REGISTRY: dict[str, Corpus] = {c.name: c for c in (_multi30k(), _iwslt14(), _wmt14(), _wmt16())}


def list_corpora() -> list[str]:
    """Names of the registered corpora, sorted."""
    return sorted(_REGISTRY)


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
    url: str, dest: str | Path, *, sha256: str | None, retries: int = 3, timeout: float = 60.0
) -> Path:
    """Download ``url`` to ``dest``, resumably, verified, atomically.

    Bytes go to ``dest.part``; an existing ``.part`` (an interrupted earlier download) is resumed
    with an HTTP ``Range`` request, and a connection that drops mid-way is resumed the same way up
    to ``retries`` times. A server that ignores ``Range`` (answers 200) restarts the file. When
    complete, the file is checked against ``sha256`` and only then renamed to ``dest``.

    Args:
        url: What to download (``http``, ``https`` or ``file``).
        dest: Final path.
        sha256: Expected hex digest; None skips the check (with an :class:`UnverifiedFileWarning`).
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
                if sha256 is not None and sha256_file(part) == sha256:
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
    if sha256 is None:
        warnings.warn(
            f"{url}: no sha256 is registered for this file; it is used unverified",
            UnverifiedFileWarning,
            stacklevel=2,
        )
    else:
        got = sha256_file(part)
        if got != sha256:
            part.unlink()
            raise ChecksumError(
                f"checksum mismatch for {dest.name} downloaded from {url}: expected sha256 "
                f"{sha256}, got {got}; the file was deleted"
            )
    os.replace(part, dest)
    return dest


def fetch(corpus: Corpus, file: RemoteFile, *, cache_dir: Path, mirror: Path | None) -> Path:
    """A verified local copy of ``file``: from the mirror, the cache, or downloaded into the cache.

    Raises:
        NotAvailableError: Not in the mirror (when one is given), or the download failed.
        ChecksumError: The mirror's copy or the download has another sha256.
    """
    if mirror is not None:
        path = Path(mirror) / file.path
        if not path.is_file():
            raise NotAvailableError(
                f"{corpus.name}: {file.path} is not available: not in the mirror {mirror} "
                f"(looked for {path})"
            )
        _check(path, file)
        return path
    path = Path(cache_dir) / corpus.name / file.path
    if path.is_file():
        if file.sha256 is None or sha256_file(path) == file.sha256:
            if file.sha256 is None:
                _warn_unverified(path)
            return path
        path.unlink()  # a damaged cache entry: fetch it again
    return download(corpus.url(file), path, sha256=file.sha256)


def _warn_unverified(path: Path) -> None:
    warnings.warn(
        f"{path}: no sha256 is registered for this file; it is used unverified",
        UnverifiedFileWarning,
        stacklevel=3,
    )


def _check(path: Path, file: RemoteFile) -> None:
    if file.sha256 is None:
        _warn_unverified(path)
        return
    got = sha256_file(path)
    if got != file.sha256:
        raise ChecksumError(
            f"checksum mismatch for {path}: expected sha256 {file.sha256}, got {got}; not used"
        )


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


_SEG = re.compile(rb"<seg[^>]*>(.*)</seg>")
_IWSLT_DROP = (b"<url>", b"<talkid>", b"<keywords>")
_IWSLT_STRIP = re.compile(rb"</?(?:title|description)>")


def _write_part(src: BinaryIO, fmt: str, out: BinaryIO) -> int:
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
    for raw in src:
        line = raw.rstrip(b"\r\n")
        if fmt == "sgm":
            if not line.lstrip().startswith(b"<seg"):
                continue
            match = _SEG.search(line)
            text = match.group(1) if match else b""
            line = b" ".join(text.split())  # entities kept as they are, like sacreBLEU
        elif fmt == "iwslt_tags":
            if any(tag in line for tag in _IWSLT_DROP):
                continue
            line = _IWSLT_STRIP.sub(b"", line)
        out.write(line + b"\n")
        lines += 1
    return lines


def _part_key(part: Part) -> list:
    return [part.file.path, part.file.sha256, part.member, part.format]


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

    Splits already extracted from the same sources (recorded in ``OUT/.prepare.json``) are not
    extracted again.

    Args:
        corpus: A registered name (:func:`list_corpora`) or a :class:`Corpus`.
        pair: ``src-tgt`` languages, e.g. ``en-de`` (either direction of the corpus' languages).
        out_dir: Where the text files go.
        variant: ``raw`` or another of the corpus' variants (Multi30K: ``tok``).
        splits: Splits to prepare. None: every registered split that has both languages; those
            that are not available (no network, not in the mirror) are skipped and reported via
            ``log``. Splits named here must be available.
        cache_dir: Download cache (default :func:`default_cache_dir`).
        mirror: Offline mirror folder (default :func:`default_mirror`); it replaces the network.
        log: Called with one line per split written, skipped or reused (e.g. ``print``).

    Returns:
        ``split -> (source file, target file)`` for the splits prepared, in registry order.

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
            missing = [lang for lang in (src, tgt) if (variant, split, lang) not in corpus.layout]
            if missing:
                has = [lang for lang in corpus.languages if (variant, split, lang) in corpus.layout]
                raise NotAvailableError(
                    f"{corpus.name} {split} ({variant}) is not available in {missing[0]}: "
                    f"the dataset has it in {', '.join(has) or 'no language'}"
                )
        wanted, required = list(splits), True
    else:
        wanted = [
            s
            for s in corpus.splits
            if all((variant, s, lang) in corpus.layout for lang in (src, tgt))
        ]
        required = False
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    mirror_dir = Path(mirror) if mirror is not None else default_mirror()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / ".prepare.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        manifest = {}
    say = log or (lambda _line: None)

    result: dict[str, tuple[Path, Path]] = {}
    for split in wanted:
        files: dict[str, Path] = {}
        counts: dict[str, int] = {}
        reused = 0
        try:
            for lang in (src, tgt):
                parts = corpus.layout[variant, split, lang]
                path = out / f"{split}.{lang}"
                entry = {"corpus": corpus.name, "parts": [_part_key(p) for p in parts]}
                old = manifest.get(path.name, {})
                if (
                    path.is_file()
                    and {k: old.get(k) for k in entry} == entry
                    and old.get("size") == path.stat().st_size
                ):
                    files[lang], counts[lang] = path, old["lines"]
                    reused += 1
                    continue
                local = [fetch(corpus, p.file, cache_dir=cache, mirror=mirror_dir) for p in parts]
                lines = 0
                with atomic_open(path, "wb") as f:
                    for p, local_path in zip(parts, local):
                        with _open_member(local_path, p.member) as raw:
                            lines += _write_part(raw, p.format, f)
                manifest[path.name] = {**entry, "size": path.stat().st_size, "lines": lines}
                files[lang], counts[lang] = path, lines
        except NotAvailableError as e:
            if required:
                raise
            say(f"{corpus.name} {split}: skipped ({e})")
            continue
        if counts[src] != counts[tgt]:
            raise UserError(
                f"{corpus.name} {split}: {files[src]} has {counts[src]} lines but "
                f"{files[tgt]} has {counts[tgt]}"
            )
        with atomic_open(manifest_path, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        documented = corpus.line_counts.get(split)
        if documented is not None and documented != counts[src]:
            warnings.warn(
                f"{corpus.name} {split}: {counts[src]} lines, but the dataset documents {documented}",
                stacklevel=2,
            )
        note = " (already prepared)" if reused == 2 else ""
        say(f"{corpus.name} {split}: {counts[src]:,} lines -> {files[src]}, {files[tgt]}{note}")
        result[split] = (files[src], files[tgt])
    if not result and wanted:
        raise NotAvailableError(
            f"no split of {corpus.name} ({pair}, {variant}) is available: "
            + (f"not in the mirror {mirror_dir}" if mirror_dir else "downloads failed")
        )
    return result

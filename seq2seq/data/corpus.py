"""What a registered corpus is: its sources, files, the parts of each split, and their steps.

A :class:`Corpus` lists its downloadable files (:class:`RemoteFile`: a path below a
:class:`Source` and its checksum) and, for every ``(variant, split, language)``, the
:class:`Part` s whose lines, concatenated, make that side of the split (a file, or a member of a
``.tgz``/``.zip`` archive, in plain text, WMT/IWSLT SGML-XML or IWSLT ``train.tags`` format;
:mod:`seq2seq.data.extract` reads them). A split whose files differ by direction (sacreBLEU's
WMT test sets: ``de-en`` reads ``src.de`` + ``ref.en``, ``en-de`` reads ``src.en`` + ``ref.de``)
lists them per direction in :attr:`Corpus.directed`. A split may then go through the text steps
of a reference script (:mod:`seq2seq.data.text_steps`: Moses tokenization,
``clean-corpus-n.perl``, lowercasing, fairseq's every-23rd-line validation split...), listed in
:attr:`Corpus.steps`. Every split's :attr:`Corpus.cites` entry names the line of the script, or
the sacreBLEU definition, it mirrors.

The corpora themselves are in :mod:`seq2seq.data.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from seq2seq.data.text_steps import Step

__all__ = ["Corpus", "Part", "RemoteFile", "Source"]

_FORMATS = ("text", "sgm", "iwslt_tags", "fairseq_seg")


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
            :mod:`seq2seq.data.text_steps`). Splits that end in an
            :class:`~seq2seq.data.text_steps.EveryNth` over the same parts and earlier steps
            (fairseq's train/valid) are written in one pass.
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

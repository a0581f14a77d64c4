"""The table of public corpora (Multi30K, IWSLT14, WMT14, WMT16) and how to look them up.

Each corpus is built from the reference it mirrors: the upstream repository's file layout, a
fairseq preparation script, or sacreBLEU's dataset definitions (each split's
:attr:`~seq2seq.data.corpus.Corpus.cites` says which). The :class:`~seq2seq.data.corpus.Source`
s below are where files are downloaded from; their names are the folders of a mirror root
(:func:`list_sources`).
"""

from __future__ import annotations

from seq2seq.config import split_pair
from seq2seq.core import UserError
from seq2seq.data.corpus import Corpus, Part, RemoteFile, Source
from seq2seq.data.text_steps import (
    CleanCorpus,
    EveryNth,
    Lowercase,
    MosesTokenize,
    NormalizePunctuation,
    RemoveNonPrinting,
    Replace,
    Step,
)

__all__ = ["get_corpus", "list_corpora", "list_sources", "parse_pair"]

# Sources: their names are the folders of a mirror root.
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
    # upstream commit a3d2e0d (issue 21); not in the test mirror, so not checked by the tests
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
    """The registered corpus ``name``; an unknown name is a :class:`UserError` listing them all."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"unknown corpus {name!r}; known corpora: {', '.join(list_corpora())}"
        ) from None


def parse_pair(pair: str) -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``; anything else is a :class:`UserError`
    (:func:`seq2seq.config.schema.split_pair`, the one check of a pair)."""
    return split_pair(pair, "language pair")

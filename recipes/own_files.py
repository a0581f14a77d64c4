#!/usr/bin/env python
"""Your own parallel text, end to end: SentencePiece -> train -> average -> test -> export.

    python recipes/own_files.py --pair en-de --train data/train --valid data/valid \
        --test data/test --out runs/mine
    python recipes/own_files.py --pair en-de --train tatoeba/train.tsv --valid tatoeba/dev.tsv \
        --test tatoeba/test.tsv --out runs/tatoeba data.tsv_columns=[1,3]

Each of --train, --valid and --test (repeatable) is either a prefix of two line-aligned files
named by language code (data/train -> data/train.en + data/train.de for --pair en-de) or one
tab-separated file with a sentence pair a line (Tatoeba, many OPUS dumps). The config
(default configs/own_files.yaml: a small Transformer, exact duplicate pairs removed) takes any
key.sub=value override after the options. The stages are those of every recipe
(seq2seq/cli/recipe.py), each skipped when its output exists, each printed as the `seq2seq`
command it runs; the results go to OUT/results.tsv.
"""

import argparse
import json
import sys

from seq2seq.cli.recipe import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--train", help="training text: PREFIX (PREFIX.src-lang, PREFIX.tgt-lang) or a .tsv"
    )
    parser.add_argument("--valid", help="validation text, as --train")
    parser.add_argument(
        "--test", action="append", default=None, help="a test set, as --train (repeatable)"
    )
    known, rest = parser.parse_known_args()
    overrides = []
    if known.train:
        overrides.append(f"data.train_prefix={known.train}")  # string keys take the text as is
    if known.valid:
        overrides.append(f"data.valid_prefix={known.valid}")
    if known.test:
        overrides.append(f"data.test_splits={json.dumps(known.test)}")
    sys.exit(
        main(
            [*rest, *overrides],
            corpus="files",
            default_config="configs/own_files.yaml",
            doc=__doc__,
        )
    )

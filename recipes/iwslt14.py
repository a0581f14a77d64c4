#!/usr/bin/env python
"""IWSLT14 German<->English (TED talks), end to end, on a GPU.

    python recipes/iwslt14.py --out runs/iwslt14                 # de-en, configs/iwslt14_de_en.yaml
    python recipes/iwslt14.py --pair en-de --out runs/iwslt14-en-de

The same stages as recipes/multi30k.py (seq2seq/cli/recipe.py): prepare -> SentencePiece -> train
-> average -> BLEU/chrF/TER on every available test split -> export -> examples ->
OUT/results.tsv, each skipped when done. The corpus is downloaded from the registry's URLs
(seq2seq prepare --list), or read from SEQ2SEQ_MIRROR / --mirror offline. The config is
Transformer-base-sized for a GPU; on a CPU it would take days.
"""

import sys

from seq2seq.cli.recipe import main

if __name__ == "__main__":
    sys.exit(
        main(
            corpus="iwslt14",
            default_config="configs/iwslt14_de_en.yaml",
            pairs=("de-en", "en-de"),
            doc=__doc__,
        )
    )

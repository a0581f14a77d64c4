#!/usr/bin/env python
"""WMT16 English<->Romanian, end to end, on GPUs (Transformer base).

    python recipes/wmt16.py --out runs/wmt16_en_ro
    python recipes/wmt16.py --pair ro-en --out runs/wmt16_ro_en

The same stages as recipes/multi30k.py (seq2seq/cli/recipe.py): prepare -> SentencePiece -> train
-> average -> BLEU/chrF/TER on newstest2016 (sacreBLEU wmt16, the files of the chosen
direction) -> export -> examples -> OUT/results.tsv, each skipped when done. The corpus is
downloaded from the registry's URLs (seq2seq prepare --list), or read from SEQ2SEQ_MIRROR /
--mirror offline (a mirror root with statmt-data/ and opus/ folders).
"""

import sys

from seq2seq.cli.recipe import main

if __name__ == "__main__":
    sys.exit(
        main(
            corpus="wmt16",
            default_config="configs/wmt16_en_ro.yaml",
            pairs=("en-ro", "ro-en"),
            doc=__doc__,
        )
    )

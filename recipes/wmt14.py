#!/usr/bin/env python
"""WMT14 English->German, end to end, on GPUs: Transformer base (default) or big.

    python recipes/wmt14.py --out runs/wmt14-base
    python recipes/wmt14.py --config configs/wmt14_en_de_big.yaml --out runs/wmt14-big

The same stages as recipes/multi30k.py (seq2seq/cli/recipe.py): prepare -> SentencePiece -> train
-> average -> BLEU/chrF/TER on newstest2014 -> export -> examples -> OUT/results.tsv, each
skipped when done. The corpus (4.5M pairs) is downloaded from the registry's URLs (seq2seq
prepare --list), or read from SEQ2SEQ_MIRROR / --mirror offline.
"""

import sys

from seq2seq.cli.recipe import main

if __name__ == "__main__":
    sys.exit(
        main(
            corpus="wmt14",
            default_config="configs/wmt14_en_de_base.yaml",
            pairs=("en-de", "de-en"),
            doc=__doc__,
        )
    )

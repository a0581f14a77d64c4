#!/usr/bin/env python
"""Multi30K, end to end: corpus -> SentencePiece -> train -> average -> test -> export.

    python recipes/multi30k.py --config configs/multi30k_quick.yaml --pair en-de --out runs/demo
    python recipes/multi30k.py --config configs/multi30k_tiny.yaml --pair de-en --out runs/tiny \
        training.max_steps=30000

Each stage writes its output under --out and is skipped when that output already exists, so
an interrupted recipe run again continues where it stopped (training resumes from its last
checkpoint). Offline, set SEQ2SEQ_MIRROR (or --mirror) to a local copy of the Multi30K
repository. Every stage is one `seq2seq` command, printed before it runs, so each can be
rerun by hand. The pipeline itself is seq2seq/cli/recipe.py, shared with the other recipes.
"""

import sys

from seq2seq.cli.recipe import main

if __name__ == "__main__":
    sys.exit(
        main(
            corpus="multi30k",
            default_config="configs/multi30k_quick.yaml",
            pairs=("en-de", "de-en", "en-fr", "fr-en", "en-cs"),
            doc=__doc__,
        )
    )

"""``python -m seq2seq.cli``: the ``seq2seq`` command."""

import sys

from seq2seq.cli import main

sys.exit(main())

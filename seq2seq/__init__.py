"""seq2seq: encoder-decoder Transformer translators, from raw corpus to exported model.

Shape letters used in comments and docstrings throughout:
    B batch, S source length, T target length, D model width (d_model), H heads,
    Dh head width (D / H), K beam size, V vocabulary, N rows of a search (B * K),
    L a generic sequence length, Lq / Lk query / key lengths.

Mask convention: a boolean attention mask is True where a query may attend; a padding
indicator is named ``*_pad`` and is True where padding is (see seq2seq/masks.py).
"""

from seq2seq.config import ExperimentConfig, load_config
from seq2seq.errors import UserError
from seq2seq.model import Seq2SeqTransformer, build_model

__all__ = ["ExperimentConfig", "Seq2SeqTransformer", "UserError", "build_model", "load_config"]
__version__ = "0.1.0"

"""The checks of single config values, and the limits they hold values to: what each
section's ``validate`` (:mod:`seq2seq.config.schema`) is made of, and the one check of a
``src-tgt`` language pair."""

from __future__ import annotations

import math
import re
from typing import Any

from seq2seq.config.errors import InvalidValue
from seq2seq.core import printable

__all__ = [
    "BEAM_LIMIT",
    "INT_LIMIT",
    "LANG_CODE_RE",
    "SEED_LIMIT",
    "SIZE_LIMITS",
    "at_least",
    "at_most",
    "check_float",
    "check_integer",
    "choice",
    "fraction",
    "positive",
    "split_pair",
]

INT_LIMIT = 2**31 - 1
"""The largest count a search option may be (lengths, ``max_tokens``, ``top_k``, ...): what a
32-bit int holds, as CTranslate2's options and the search's index arithmetic need."""

BEAM_LIMIT = 256
"""The largest beam (and n-best) a search may use: the search allocates rows, a KV cache and
log-probabilities for each of (sentences x beam), so a beam from a mistyped flag or a hostile
config (10**9) must be refused before it allocates; far above any useful beam (4 to 12)."""

SEED_LIMIT = 2**64
"""Seeds are in ``[0, SEED_LIMIT)``: the unsigned 64-bit range ``torch.Generator`` takes."""

SIZE_LIMITS = {
    "d_model": 2**16,
    "n_heads": 2**10,
    "d_ff": 2**18,
    "n_encoder_layers": 2**10,
    "n_decoder_layers": 2**10,
    "max_positions": 2**16,
    "vocab_size": 2**21,
}
"""The largest model sizes a config may ask for (``data.vocab_size``, the rest in ``model.``):
far above any translation model (NLLB-200: d_model 2,048, 24 layers, 256,206 pieces, 1,024
positions), and far below what cannot be allocated: a size from a hostile or mistyped config
(``max_positions: 1000000000``) is an error naming the key, not an attempt to allocate 100 GB."""


def choice(prefix: str, key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidValue(prefix + key, f"is {value!r}; expected one of {', '.join(allowed)}")


def at_least(prefix: str, obj: Any, minimum: int | float, *keys: str) -> None:
    for key in keys:
        value = getattr(obj, key)
        if not value >= minimum:  # also refuses NaN
            raise InvalidValue(prefix + key, f"must be >= {minimum}, got {value}")


def positive(prefix: str, obj: Any, *keys: str) -> None:
    for key in keys:
        value = getattr(obj, key)
        if not value > 0:
            raise InvalidValue(prefix + key, f"must be > 0, got {value}")


def at_most(prefix: str, obj: Any, limits: dict[str, int]) -> None:
    for key, maximum in limits.items():
        value = getattr(obj, key)
        if value > maximum:
            raise InvalidValue(prefix + key, f"must be <= {maximum:,}, got {value:,}")


def fraction(prefix: str, obj: Any, *keys: str) -> None:
    """Each key in [0, 1)."""
    for key in keys:
        value = getattr(obj, key)
        if not 0.0 <= value < 1.0:
            raise InvalidValue(prefix + key, f"must be in [0, 1), got {value}")


LANG_CODE_RE = re.compile(r"[A-Za-z]{2,3}(?:_[A-Za-z0-9]{1,8})?")
"""A language code as a pair names it: two or three letters (ISO 639-1 or -3), optionally an
``_``-joined script or region (``pt_BR``, ``eng_Latn``, ``zh_Hant``)."""


def split_pair(pair: Any, key: str = "data.pair") -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``: the one check of a ``src-tgt`` language pair (a config's
    ``data.pair`` and each of ``data.pairs``, ``prepare --pair``, ``convert --pair``).

    Raises:
        InvalidValue: not two different language codes (:data:`LANG_CODE_RE`) joined by one
            ``-``, naming ``key``.
    """
    parts = pair.split("-") if isinstance(pair, str) else []
    if (
        len(parts) != 2
        or not all(LANG_CODE_RE.fullmatch(part) for part in parts)
        or parts[0].lower() == parts[1].lower()
    ):
        shown = printable(repr(pair))
        raise InvalidValue(
            key, f"is {shown}; expected src-tgt, two different language codes (en-de, pt_BR-en)"
        )
    return parts[0], parts[1]


def check_integer(key: str, value: Any, low: int, high: int) -> None:
    # bool is an int subclass: True would silently be a beam of 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(key, f"must be an integer, got {value!r}")
    if value < low:
        raise InvalidValue(key, f"must be >= {low}, got {value}")
    if value > high:
        raise InvalidValue(key, f"must be <= {high}, got {value}")


def check_float(key: str, value: Any, rule: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValue(key, f"must be a number, got {value!r}")
    if rule == "penalty":  # +inf is fine: never generate the unknown token
        if math.isnan(value) or value == -math.inf:
            raise InvalidValue(key, f"must be a number or inf, got {value}")
        return
    if not math.isfinite(value):
        raise InvalidValue(key, f"must be a finite number, got {value}")
    if rule == "length":
        if not value >= 0:
            raise InvalidValue(key, f"must be >= 0, got {value}")
        if value > INT_LIMIT:  # max_len_a * src_len must stay an int
            raise InvalidValue(key, f"must be <= {INT_LIMIT}, got {value}")
    elif rule == "positive" and not value > 0:
        raise InvalidValue(key, f"must be > 0, got {value}")
    elif rule == "fraction" and not 0.0 < value <= 1.0:
        raise InvalidValue(key, f"must be in (0, 1], got {value}")

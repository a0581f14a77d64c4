"""The configuration's errors: a mistake the user can fix, naming the key and where it came from."""

from __future__ import annotations

from seq2seq.core import UserError

__all__ = ["ConfigError", "InvalidValue"]


class ConfigError(UserError):
    """A configuration mistake the user can fix (unknown key, wrong type, missing file)."""


class InvalidValue(ConfigError):
    """A value of the right type that cannot work (``model.n_heads`` not dividing ``d_model``).

    ``key`` is the dotted key; :func:`load_config` adds where the value came from (the file,
    or the command line for an override).
    """

    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"{key} {text}")
        self.key = key
        self.text = text

    def at(self, source: str) -> ConfigError:
        """The same error, saying where the value came from."""
        return InvalidValue(self.key, f"in {source} {self.text}")

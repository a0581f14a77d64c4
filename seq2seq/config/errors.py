"""The configuration's errors: a mistake the user can fix, naming the key and where it came from."""

from __future__ import annotations

from seq2seq.core import UserError

__all__ = ["ConfigError", "InvalidValue"]


class ConfigError(UserError):
    """A configuration mistake the user can fix (unknown key, wrong type, missing file).

    ``key`` and ``text`` are set when the mistake is one key's value: the dotted key and what
    is wrong with it, so that a caller that read the value from elsewhere (a converted model's
    own config) can name it in its own terms.
    """

    def __init__(self, message: str, *, key: str | None = None, text: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.text = text


class InvalidValue(ConfigError):
    """A value of the right type that cannot work (``model.n_heads`` not dividing ``d_model``).

    ``key`` is the dotted key; :func:`load_config` adds where the value came from (the file,
    or the command line for an override).
    """

    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"{key} {text}", key=key, text=text)

    def at(self, source: str) -> ConfigError:
        """The same error, saying where the value came from."""
        return InvalidValue(self.key, f"in {source} {self.text}")

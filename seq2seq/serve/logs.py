"""The server's one logger, and the redaction of secrets in every log line.

Every module of the server logs under the package's name, ``seq2seq.serve``, which its log
lines show (``INFO:     seq2seq.serve: serving ...``).

Two secrets travel in URLs, and so in uvicorn's access log and in any message that quotes a
path: an API key sent as ``?api_key=KEY`` (a documented way) and the token of a translated
file's download URL (``/download_file/TOKEN/NAME``: the URL is the capability).
:func:`redact` replaces each with :func:`key_label`, the first 16 hex digits of its sha256 (the
label ``/metrics`` gives a key too, so a log line and a scrape can be matched), and
:func:`redact_logs` installs it on every handler of the process' loggers, tracebacks included.
"""

from __future__ import annotations

import hashlib
import logging
import re
import urllib.parse

__all__ = ["RedactSecrets", "key_label", "log", "redact", "redact_logs"]

log = logging.getLogger("seq2seq.serve")

# api_key=VALUE in a query string (or a form quoted in a message), up to the next separator;
# the name may be percent-encoded (api%5Fkey), which the server decodes to api_key
_KEY_PARAM = re.compile(r"(?i)(\bapi(?:_|%5f)key=)([^&\s\"'#;]+)")
# /download_file/TOKEN (the name after it is the user's file name, not a secret)
_FILE_TOKEN = re.compile(r"(/download_file/)([^/\s?\"'#]+)")


def key_label(key: str) -> str:
    """How a secret is shown in logs and metrics: the first 16 hex digits of its sha256."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def _key(match: re.Match) -> str:
    # The label of the key as the server reads it (percent-decoded): /metrics' label.
    value = urllib.parse.unquote_plus(match.group(2))
    return f"{match.group(1)}<sha256:{key_label(value)}>"


def _token(match: re.Match) -> str:
    return f"{match.group(1)}<sha256:{key_label(match.group(2))}>"


def redact(text: str) -> str:
    """``text`` with every ``api_key=KEY`` and ``/download_file/TOKEN`` shown as
    ``<sha256:LABEL>`` (:func:`key_label`)."""
    lowered = text.lower()
    if "api_key" not in lowered and "api%5fkey" not in lowered and "/download_file/" not in text:
        return text
    return _FILE_TOKEN.sub(_token, _KEY_PARAM.sub(_key, text))


def _redacted(value: object) -> object:
    return redact(value) if isinstance(value, str) else value


class RedactSecrets(logging.Filter):
    """A handler filter that redacts (:func:`redact`) a record's message, each of its string
    arguments (uvicorn's access formatter reads them one by one) and its traceback."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redacted(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER = RedactSecrets()


def redact_logs(names: tuple[str, ...] = ("", "uvicorn", "uvicorn.access", "uvicorn.error")):
    """Add :class:`RedactSecrets` to every handler of the loggers ``names`` (``""``: the
    root), once; call it after the handlers are configured (uvicorn's ``Config`` sets its own)."""
    for name in names:
        for handler in logging.getLogger(name).handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)

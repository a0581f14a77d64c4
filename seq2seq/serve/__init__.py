"""Serving: the HTTP server (native and LibreTranslate APIs): its app, request schemas and
bodies, translation service, dynamic batching, paragraphs, API keys and rate limits, language
detection, HTML and file translation, metrics, the web page and the launcher.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "KeyStore": "keys",
    "ServeConfig": "config",
    "serve": "launcher",
    "split_text": "paragraphs",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

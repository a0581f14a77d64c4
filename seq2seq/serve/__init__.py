"""Serving: the HTTP server (native and LibreTranslate APIs): its app, request schemas and
bodies, translation service, dynamic batching, several models (routing, pivoting, a memory
budget), API keys and rate limits, named glossaries, the state they live in (in memory or in Redis),
worker processes, language detection, HTML and file translation, metrics, the web page and the
launcher.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "KeyStore": "keys",
    "RedisKeyStore": "state_redis",
    "ModelSpec": "model_specs",
    "ServeConfig": "config",
    "SqliteGlossaries": "glossaries",
    "read_models_file": "model_specs",
    "serve": "launcher",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

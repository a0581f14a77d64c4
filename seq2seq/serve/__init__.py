"""Serving: the HTTP server (native and LibreTranslate APIs), dynamic batching, paragraphs and
the web page.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "ServeConfig": "server",
    "serve": "server",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

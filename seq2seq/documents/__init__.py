"""Documents: the file formats a translation goes in and out of (one module per format behind
one interface, :mod:`seq2seq.documents.base`), the inline-markup projection that puts
formatting back around the words it covered (:mod:`seq2seq.documents.html`), and the hardened
reading of zip archives and XML they share.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "Document": "base",
    "FORMATS": "registry",
    "HtmlDocument": "html",
    "HtmlLimitError": "html",
    "MAX_INLINE_ELEMENTS": "html",
    "Limits": "base",
    "RunTranslation": "html",
    "format_for": "registry",
    "html_kind": "html",
    "needs_alignments": "boundaries",
    "run_translation": "boundaries",
    "open_document": "registry",
    "translate_document": "registry",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

"""The ground floor: the user-error type, atomic writes and checksums, signals, terminal-safe
text, up-front path and device checks, and CPU memory reuse. Imports nothing else of seq2seq.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "READ_CHUNK": "files",
    "Stopped": "signals",
    "UserError": "errors",
    "atomic_dir": "files",
    "atomic_open": "files",
    "check_accelerator": "devices",
    "check_device": "devices",
    "check_paths": "paths",
    "check_strategy": "devices",
    "defer_sigterm": "signals",
    "discard_dir": "files",
    "exclusive": "files",
    "file_digest": "files",
    "keep_freed_memory": "memory",
    "printable": "terminal",
    "say": "terminal",
    "raise_on_sigterm": "signals",
    "recover_replaced": "files",
    "replace_dir": "files",
    "sha256_file": "files",
    "sha256_files": "files",
    "signal_name": "signals",
    "signals_deferred": "signals",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)

"""What a ``translate -o FILE`` partial output was started with, so ``--resume`` can trust it.

``FILE.partial`` holds the lines translated so far; ``--resume`` keeps them and skips their
input lines. That is only right when the resumed run reads the same input with the same model
and search options: otherwise its first lines come from one run and the rest from another,
and nothing shows it. So the run records a fingerprint next to the partial output,
``FILE.partial.json``: the input (path, size and sha256 of a file; standard input cannot be
checked and is recorded as ``<stdin>``), the model (the sha256 of its manifest.json or
export.json), the engine and every search option. ``--resume`` compares it and refuses a
mismatch, naming what differs; the record is removed once FILE is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from seq2seq.core import UserError, atomic_open, sha256_file

__all__ = ["fingerprint", "guard"]


def _model_id(model_dir: Path) -> str:
    for name in ("manifest.json", "export.json"):
        if (model_dir / name).is_file():
            return f"{name} sha256 {sha256_file(model_dir / name)}"
    return str(model_dir.resolve())


def fingerprint(
    *, input_path: str, model_dir: str | Path | list, engine: str, options: dict
) -> dict:
    """The record of one translation run (JSON-able); ``model_dir``: one or several (an
    ensemble)."""
    if input_path == "-":
        source: dict | str = "<stdin>"
    else:
        path = Path(input_path)
        source = {
            "path": str(path.resolve()),
            "size": path.stat().st_size,
            "sha256": sha256_file(path),
        }
    return {
        "input": source,
        "model": (
            [_model_id(Path(d)) for d in model_dir]
            if isinstance(model_dir, (list, tuple))
            else _model_id(Path(model_dir))
        ),
        "engine": engine,
        "options": {k: v for k, v in sorted(options.items())},
    }


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for key in ("input", "model", "engine"):
        if old.get(key) != new.get(key):
            out.append(key)
    old_opts, new_opts = old.get("options", {}), new.get("options", {})
    for key in sorted(set(old_opts) | set(new_opts)):
        if old_opts.get(key) != new_opts.get(key):
            out.append(f"{key} ({old_opts.get(key)!r} -> {new_opts.get(key)!r})")
    return out


@contextlib.contextmanager
def guard(output: str | Path | None, *, resume: bool, record: dict) -> Iterator[None]:
    """Around ``translate_stream``: check (``resume``) or write ``OUTPUT.partial.json``;
    remove it once the output is complete. Without ``output`` (standard output): nothing.

    Raises:
        UserError: ``--resume`` of a partial output whose record is missing or differs.
    """
    if output is None:
        yield
        return
    partial = Path(f"{output}.partial")
    sidecar = Path(f"{output}.partial.json")
    if resume and partial.is_file():
        try:
            old = json.loads(sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(
                f"{partial} has no record of the input and options it was started with "
                f"({sidecar.name}); translate again without --resume"
            ) from None
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{sidecar} is corrupt; translate again without --resume") from None
        diffs = _differences(old, record) if isinstance(old, dict) else ["everything"]
        if diffs:
            shown = ", ".join(diffs[:4]) + (f" and {len(diffs) - 4} more" if len(diffs) > 4 else "")
            raise UserError(
                f"cannot resume {partial}: it was started with another {shown}; "
                "translate again without --resume (or with the first run's input and options)"
            )
    else:
        with atomic_open(sidecar, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    yield
    if Path(output).is_file() and not partial.exists():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sidecar)

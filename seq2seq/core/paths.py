"""Up-front checks of the files and folders a command reads and writes.

Every subcommand calls :func:`check_paths` before it loads a model, trains or translates, so a
path mistake is one line naming the path and what is wrong with it, instead of a traceback
after all the work is done (a translation stranded in ``FILE.partial`` because ``-o`` named a
folder, an ``--out`` under a file, a training file without read permission). The checks:

- an input file exists, is a file (not a folder) and can be opened for reading;
- an input folder exists, is a folder and can be listed;
- an output file is not a folder, does not lie under a file, and its folder (or the nearest
  existing one above it, which the command will create the rest under) is writable;
- an output folder is not a file, does not lie under a file, and is writable where it exists;
- an output is never one of the command's inputs (``translate -i X -o X``).

Permission checks use :func:`os.access`, which is the truth for ordinary users; for root
(which may read and write anything) they pass, as the later open would.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from seq2seq.core.errors import UserError
from seq2seq.core.terminal import printable

__all__ = ["PathError", "check_paths"]


class PathError(UserError):
    """An input that cannot be read or an output that cannot be written, found before any work."""


def _show(path: Path) -> str:
    return printable(str(path))


def _blocking_parent(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a folder (``path`` lies under a
    file), else None."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _nearest_existing(path: Path) -> Path:
    for parent in path.absolute().parents:
        if parent.is_dir():
            return parent
    return Path("/")


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _under(inner: Path, outer: Path) -> bool:
    """Whether ``inner`` lies inside ``outer`` (symbolic links resolved)."""
    try:
        return outer.resolve() in inner.resolve().parents
    except OSError:
        return False


def _check_input_file(path: Path, what: str) -> None:
    shown = _show(path)
    if not path.exists():
        blocker = _blocking_parent(path)
        if blocker is not None:
            raise PathError(f"{what} {shown} not found: {_show(blocker)} is a file")
        raise PathError(f"{what} {shown} not found")
    if path.is_dir():
        raise PathError(f"{what} {shown} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise PathError(f"{what} {shown} cannot be read: permission denied")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise PathError(f"{what} {shown} cannot be read: {e.strerror}") from None


def _check_input_dir(path: Path, what: str) -> None:
    shown = _show(path)
    if not path.exists():
        raise PathError(f"{what} {shown} not found")
    if not path.is_dir():
        raise PathError(f"{what} {shown} is a file, not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise PathError(f"{what} {shown} cannot be read: permission denied")


def _check_writable_place(path: Path, what: str) -> None:
    """``path`` does not lie under a file, and can be created (or replaced) by this process."""
    shown = _show(path)
    blocker = _blocking_parent(path)
    if blocker is not None:
        raise PathError(f"{what} {shown} lies under {_show(blocker)}, which is a file")
    parent = _nearest_existing(path)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PathError(f"{what} {shown} cannot be written: {_show(parent)} is not writable")


def _check_output_file(path: Path, what: str) -> None:
    shown = _show(path)
    if path.is_dir():
        raise PathError(f"{what} {shown} is a directory; give a file name")
    special = str(path.resolve()).startswith(("/dev/", "/proc/"))  # /dev/stdout, /proc/...
    if (path.exists() and not path.is_file()) or special:  # renaming over it would replace it
        raise PathError(
            f"{what} {shown} is not a regular file (a device or a pipe?); give a file name, or "
            "leave the option out to write to standard output"
        )
    _check_writable_place(path, what)
    if path.exists() and not os.access(path, os.W_OK):
        raise PathError(f"{what} {shown} exists and is not writable")


def _check_output_dir(path: Path, what: str) -> None:
    shown = _show(path)
    if path.exists() and not path.is_dir():
        raise PathError(f"{what} {shown} is a file, not a directory")
    _check_writable_place(path, what)
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise PathError(f"{what} {shown} is not writable")


def _pairs(items: Iterable[tuple[str, object]] | None) -> list[tuple[str, Path]]:
    """``(what, path)`` pairs; a list of paths (an ensemble's model directories) is each one."""
    out = []
    for what, given in items or []:
        for p in given if isinstance(given, (list, tuple)) else [given]:
            if p is not None and str(p) != "-":
                out.append((what, Path(p)))
    return out


def check_paths(
    *,
    input_files: Iterable[tuple[str, str | Path | None]] = (),
    input_dirs: Iterable[tuple[str, str | Path | None]] = (),
    output_files: Iterable[tuple[str, str | Path | None]] = (),
    output_dirs: Iterable[tuple[str, str | Path | None]] = (),
    replaced_dirs: Iterable[tuple[str, str | Path | None]] = (),
) -> None:
    """Check a command's paths before it does any work.

    Each argument is a list of ``(what, path)``: ``what`` names the option in the error
    (``"-o"``, ``"--out"``, ``"training file"``); a None path or ``-`` (standard input or
    output) is skipped, and a list of paths stands for each of them. ``replaced_dirs`` are output folders that the command replaces as a
    whole (``export --force``, ``average``): besides the output-folder checks, none may be an
    input or hold one.

    Raises:
        PathError: the first problem found, naming the option, the path and what is wrong.
    """
    ins = _pairs(input_files)
    in_dirs = _pairs(input_dirs)
    outs = _pairs(output_files)
    replaced = _pairs(replaced_dirs)
    out_dirs = _pairs(output_dirs) + replaced
    for what, path in ins:
        _check_input_file(path, what)
    for what, path in in_dirs:
        _check_input_dir(path, what)
    for what, path in outs:
        _check_output_file(path, what)
    for what, path in out_dirs:
        _check_output_dir(path, what)
    for what, path in outs + out_dirs:
        for in_what, in_path in ins + in_dirs:
            if _same(path, in_path):
                raise PathError(
                    f"{what} {_show(path)} is the {in_what} itself; writing it would destroy "
                    "the input: choose another output"
                )
    for what, path in replaced:
        for in_what, in_path in ins + in_dirs:
            if path.absolute() in in_path.absolute().parents or _under(in_path, path):
                raise PathError(
                    f"{what} {_show(path)} holds the {in_what} {_show(in_path)}; replacing it "
                    "would destroy the input: choose another output"
                )

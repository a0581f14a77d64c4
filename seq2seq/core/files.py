"""Atomic file and directory writes, and checksums.

Everything the toolkit writes that a later step trusts (downloads, checkpoints, model
directories, exports, translations) goes through here, so an interrupted process leaves
either the previous complete file or nothing, never a half-written one.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["READ_CHUNK", "atomic_dir", "atomic_open", "exclusive", "file_digest", "sha256_file"]

READ_CHUNK = 1 << 20
"""Bytes per read of every streaming loop over a file (constant memory, few system calls)."""


def file_digest(path: str | Path, algorithm: str, chunk_size: int = READ_CHUNK) -> str:
    """Hex digest of a file under ``algorithm`` (a :mod:`hashlib` name), read in chunks."""
    h = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: str | Path, chunk_size: int = READ_CHUNK) -> str:
    """Hex SHA-256 of a file, read in chunks (constant memory)."""
    return file_digest(path, "sha256", chunk_size)


def sha256_files(paths: Iterable[str | Path]) -> str:
    """Hex SHA-256 over the SHA-256 of each file, in order: one fingerprint for a set of files
    (two tokenizers encode alike iff their files' fingerprints are equal)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(bytes.fromhex(sha256_file(path)))
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kwargs) -> Iterator:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _owner_tag() -> str:
    """``HOST-PID`` of this process, in the names of its temporary siblings (a shared file
    system can hold several machines' folders: only this host's dead processes are judged)."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())
    return f"{host or 'host'}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _remove_stale(path: Path) -> None:
    """Remove the temporary siblings of ``path`` that killed processes of this host left."""
    host = _owner_tag().rsplit("-", 1)[0]
    for kind in ("tmp", "old"):
        for stale in path.parent.glob(f".{glob.escape(path.name)}.{kind}-{glob.escape(host)}-*"):
            rest = stale.name[len(f".{path.name}.{kind}-{host}-") :]
            pid = rest.split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory to fill; it becomes ``path`` only on success.

    On an exception (or a kill) nothing appears at ``path``: the temporary directory is
    removed (or, after a kill, left as a hidden ``.NAME.tmp-HOST-PID-*`` sibling that no reader
    uses, and that the next atomic_dir of the same ``path`` on this host removes once that
    process is gone).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{_owner_tag()}-", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} already exists")
            old = path.with_name(f".{path.name}.old-{_owner_tag()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def exclusive(lock_path: str | Path, *, waiting: str | None = None) -> Iterator[bool]:
    """Hold an exclusive lock on ``lock_path`` (``fcntl.flock``; the file is created) while
    inside: other processes, on this machine or on another node of a shared file system
    (NFS and Lustre honour it), wait at the same ``exclusive`` until it is released.

    Args:
        waiting: printed once on stderr when the lock is held by someone else.

    Yields:
        Whether this process had to wait (someone else held it first).
    """
    import fcntl
    import sys

    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as f:
        waited = False
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            if waiting:
                print(waiting, file=sys.stderr, flush=True)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield waited
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)

"""Atomic file and directory writes, and checksums.

Everything the toolkit writes that a later step trusts (downloads, checkpoints, model
directories, exports, translations) goes through here, so an interrupted process leaves
either the previous complete file or nothing, never a half-written one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import hashlib
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from seq2seq.core.errors import UserError
from seq2seq.core.signals import signals_deferred
from seq2seq.core.terminal import printable, say

__all__ = [
    "READ_CHUNK",
    "atomic_dir",
    "atomic_open",
    "discard_dir",
    "exclusive",
    "file_digest",
    "recover_replaced",
    "replace_dir",
    "sha256_file",
]

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


def _left_by_dead(path: Path, kind: str) -> list[Path]:
    """The ``.NAME.KIND-HOST-PID[-*]`` siblings of ``path`` whose process (of this host) is gone."""
    host = _owner_tag().rsplit("-", 1)[0]
    prefix = f".{path.name}.{kind}-{host}-"
    found = []
    for left in sorted(path.parent.glob(f"{glob.escape(prefix)}*")):
        pid = left.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            found.append(left)
    return found


def recover_replaced(path: str | Path) -> None:
    """Deal with what a killed process left beside ``path`` while writing or replacing it.

    A replace (:func:`atomic_dir` with ``overwrite``) moves the previous ``path`` aside as
    ``.NAME.old-HOST-PID`` only where the platform cannot swap two directories in one step, and
    only for the instant between two renames; a SIGKILL in that instant leaves it there. Such a
    sibling, of a process of this host that is gone, is never deleted: it is moved back to
    ``path`` when nothing is there (said on stderr), and otherwise refused, by name. The
    siblings that hold nothing anyone needs (a ``.tmp-`` folder being filled, a ``.trash-``
    folder being deleted) are removed.

    Raises:
        UserError: a left-over previous ``path`` beside a ``path`` that exists again.
    """
    path = Path(path)
    for old in _left_by_dead(path, "old"):
        if not os.path.lexists(path):
            os.replace(old, path)
            say(
                f"restored {printable(str(path))} from {printable(old.name)}, where a replace "
                "that was killed had left it"
            )
            continue
        raise UserError(
            f"{printable(str(old))} holds the previous {printable(path.name)}, left by a replace "
            f"that was killed; check both, then delete one or move it back to {printable(str(path))}"
        )
    for kind in ("tmp", "trash"):
        for stale in _left_by_dead(path, kind):
            _delete(stale)


def _delete(path: Path) -> None:
    """Delete a folder (a symlink: the link only), quietly: nothing anyone needs is in it."""
    if path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
        return
    shutil.rmtree(path, ignore_errors=True)


def _rename(src: Path, dst: Path) -> None:
    """One rename of a replace (its own function, so a test can stop a process between two)."""
    os.replace(src, dst)


@functools.cache
def _renameat2():
    """libc's ``renameat2`` (Linux, glibc 2.28 and later), or None."""
    if sys.platform != "linux":
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one atomic step (``renameat2(RENAME_EXCHANGE)``); False where
    the platform or the file system has no such step (nothing was changed then)."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _trash_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.trash-{_owner_tag()}-{secrets.token_hex(4)}")


def replace_dir(new: str | Path, path: str | Path) -> None:
    """Put the directory ``new`` at ``path`` in place of what is there, safe against a signal
    at any point: ``path`` holds the previous folder or the new one, never neither.

    Where the platform swaps two directories in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``) that is all it takes, and not even SIGKILL can land in between.
    Elsewhere the previous folder moves aside to ``.NAME.old-HOST-PID`` and ``new`` moves in,
    with the stop signals held off over both renames (:func:`signals_deferred`); only a SIGKILL
    in between can leave ``path`` empty, and the next write of ``path`` moves the previous folder
    back (:func:`recover_replaced`). The previous folder is then deleted.
    """
    new, path = Path(new), Path(path)
    if _exchange(new, path):  # ``new`` now holds the previous folder
        _fsync_dir(path.parent)
        _delete(new)
        return
    old = path.with_name(f".{path.name}.old-{_owner_tag()}")
    trash = _trash_name(path)
    with signals_deferred():
        _rename(path, old)
        try:
            _rename(new, path)
        except BaseException:
            _rename(old, path)
            raise
        _rename(old, trash)  # no longer needed by anyone: the next write may delete it
    _fsync_dir(path.parent)
    _delete(trash)


def discard_dir(path: str | Path) -> None:
    """Delete the directory ``path`` (``--force``): it disappears in one rename, then its
    contents go; a kill meanwhile leaves a ``.trash-`` sibling that the next write removes."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    trash = _trash_name(path)
    os.replace(path, trash)
    _fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory to fill; it becomes ``path`` only on success.

    On an exception (or a kill) nothing appears at ``path``: the temporary directory is
    removed (or, after a kill, left as a hidden ``.NAME.tmp-HOST-PID-*`` sibling that no reader
    uses, and that the next atomic_dir of the same ``path`` on this host removes once that
    process is gone). With ``overwrite`` an existing ``path`` is replaced by
    :func:`replace_dir`, safe against a signal at any point; what an earlier replace that was
    killed left is dealt with first (:func:`recover_replaced`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_replaced(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{_owner_tag()}-", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if os.path.lexists(path):
            if not overwrite:
                raise FileExistsError(f"{path} already exists")
            replace_dir(tmp, path)
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

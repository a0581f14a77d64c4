"""Getting a registered file onto this machine: the offline mirror, the cache, or HTTP.

Where files come from:

- the cache directory (``cache_dir``; default ``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``), where
  downloads land as ``CACHE/SOURCE/PATH``. A download is written to ``PATH.part`` and resumed
  with an HTTP ``Range`` request when it was interrupted; it is checked against its sha256 (or
  the md5 sacreBLEU publishes, where no sha256 is known) and only then renamed (atomically) to
  ``PATH``. A file whose sum does not match is deleted and reported with both sums.
- or an offline mirror (``mirror``; default ``$SEQ2SEQ_MIRROR``), in either of two forms: a
  *root* holding one folder per source, ``ROOT/<source>/PATH`` (``multi30k/``, ``wit3/``,
  ``fairseq/``, ``statmt/``, ``opus/``: :func:`seq2seq.data.registry.list_sources`), so one
  setting serves every corpus; or one source's folder itself, ``DIR/PATH`` (the older one-corpus
  form). A mirror *replaces* the network: a file missing from it is "not available" (nothing is
  downloaded). Mirror files are checked against their checksums too.

Files without a known checksum are accepted unverified with an :class:`UnverifiedFileWarning`.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
import warnings
from pathlib import Path

from seq2seq.core import READ_CHUNK, UserError, file_digest, sha256_file
from seq2seq.data.corpus import Corpus, RemoteFile

__all__ = [
    "ChecksumError",
    "NotAvailableError",
    "UnverifiedFileWarning",
    "default_cache_dir",
    "default_mirror",
    "download",
    "fetch",
]


class NotAvailableError(UserError):
    """A registered file or split cannot be obtained here (no network, not in the mirror, 404)."""


class ChecksumError(UserError):
    """A file's checksum differs from the registered one (the file is not used)."""


class UnverifiedFileWarning(UserWarning):
    """A file was used without checking it, because the registry has no checksum for it."""


def default_cache_dir() -> Path:
    """``$SEQ2SEQ_CACHE`` or ``~/.cache/seq2seq``."""
    env = os.environ.get("SEQ2SEQ_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "seq2seq"


def default_mirror() -> Path | None:
    """``$SEQ2SEQ_MIRROR`` when set (and not empty), else None (download)."""
    env = os.environ.get("SEQ2SEQ_MIRROR")
    return Path(env) if env else None


class _Interrupted(OSError):
    """The connection ended before the announced number of bytes arrived."""


def _receive(url: str, part: Path, timeout: float) -> None:
    """One HTTP request appending to (206) or rewriting (200) ``part``."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "seq2seq (python urllib)"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        mode = "wb"
        if offset and response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                part.unlink()
                raise _Interrupted(f"unexpected Content-Range {content_range!r} for {url}")
            mode = "ab"
        expected = response.headers.get("Content-Length")
        received = 0
        with open(part, mode) as f:
            while chunk := response.read(READ_CHUNK):
                f.write(chunk)
                received += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        if expected is not None and received < int(expected):
            raise _Interrupted(f"connection closed after {received} of {expected} bytes of {url}")


def download(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None,
    md5: str | None = None,
    retries: int = 3,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest``, resumably, verified, atomically.

    Bytes go to ``dest.part``; an existing ``.part`` (an interrupted earlier download) is resumed
    with an HTTP ``Range`` request, and a connection that drops mid-way is resumed the same way up
    to ``retries`` times. A server that ignores ``Range`` (answers 200) restarts the file. When
    complete, the file is checked against ``sha256`` and only then renamed to ``dest``.

    Args:
        url: What to download (``http``, ``https`` or ``file``).
        dest: Final path.
        sha256: Expected hex digest; None checks ``md5`` instead.
        md5: Expected md5 when no sha256 is known; with neither, the file is used unverified
            (with an :class:`UnverifiedFileWarning`).
        retries: Attempts (each resuming the previous one) before giving up.
        timeout: Socket timeout in seconds.

    Returns:
        ``dest``.

    Raises:
        NotAvailableError: The server answered an error, or could not be reached (the ``.part``
            file is kept for a later resume).
        ChecksumError: The downloaded bytes have another sha256 (the ``.part`` file is deleted).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    error: Exception | None = None
    for _ in range(max(1, retries)):
        try:
            _receive(url, part, timeout)
            error = None
            break
        except urllib.error.HTTPError as e:
            if e.code == 416 and part.exists():
                # Range not satisfiable: the .part is already complete (or longer than the file).
                if _matches(part, sha256=sha256, md5=md5):
                    error = None
                    break
                part.unlink()
                error = e
                continue
            raise NotAvailableError(
                f"could not download {url}: HTTP {e.code} {e.reason}; "
                "without network, point --mirror (or SEQ2SEQ_MIRROR) at a local copy"
            ) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            error = e
    if error is not None:
        reason = getattr(error, "reason", None) or error
        kept = f"; the partial download {part} is kept and will be resumed" if part.exists() else ""
        raise NotAvailableError(
            f"could not download {url} ({reason}){kept}; "
            "without network, point --mirror (or SEQ2SEQ_MIRROR) at a local copy"
        )
    try:
        _verify(part, sha256=sha256, md5=md5, what=f"{dest.name} downloaded from {url}")
    except ChecksumError:
        part.unlink()
        raise
    os.replace(part, dest)
    return dest


def _matches(path: Path, *, sha256: str | None, md5: str | None) -> bool:
    """Whether ``path`` has the given checksum (False when none is known)."""
    if sha256 is not None:
        return sha256_file(path) == sha256
    if md5 is not None:
        return file_digest(path, "md5") == md5
    return False


def _verify(path: Path, *, sha256: str | None, md5: str | None, what: str, after: str = "") -> None:
    """Check ``path`` against its sha256 (else md5); unknown sums warn, mismatches raise."""
    if sha256 is None and md5 is None:
        warnings.warn(
            f"{what}: no checksum is registered for this file; it is used unverified",
            UnverifiedFileWarning,
            stacklevel=3,
        )
        return
    kind, expected = ("sha256", sha256) if sha256 is not None else ("md5", md5)
    got = sha256_file(path) if sha256 is not None else file_digest(path, "md5")
    if got != expected:
        raise ChecksumError(
            f"checksum mismatch for {what}: expected {kind} {expected}, got {got}{after}"
        )


def _mirror_candidates(corpus: Corpus, file: RemoteFile, mirror: Path) -> list[Path]:
    """Where a mirror may hold ``file``: ``ROOT/<source>/PATH`` (a root), then ``DIR/PATH``."""
    return [Path(mirror) / corpus.file_source(file).name / file.path, Path(mirror) / file.path]


def fetch(corpus: Corpus, file: RemoteFile, *, cache_dir: Path, mirror: Path | None) -> Path:
    """A verified local copy of ``file``: from the mirror, the cache, or downloaded into the cache.

    Args:
        corpus: The corpus ``file`` belongs to (it names the file's default source).
        file: The registered file.
        cache_dir: Where downloads land, as ``CACHE/SOURCE/PATH``.
        mirror: An offline mirror (root or one source's folder); when given, it replaces the
            network.

    Returns:
        The local path (in the mirror or the cache).

    Raises:
        NotAvailableError: Not in the mirror (when one is given), or the download failed.
        ChecksumError: The mirror's copy or the download has another checksum.
    """
    if mirror is not None:
        candidates = _mirror_candidates(corpus, file, Path(mirror))
        for path in candidates:
            if path.is_file():
                _verify(path, sha256=file.sha256, md5=file.md5, what=str(path), after="; not used")
                return path
        raise NotAvailableError(
            f"{corpus.name}: {file.path} is not available: not in the mirror {mirror} "
            f"(looked for {' and '.join(str(p) for p in candidates)})"
        )
    path = Path(cache_dir) / corpus.file_source(file).name / file.path
    if path.is_file():
        if file.sha256 is None and file.md5 is None:
            _verify(path, sha256=None, md5=None, what=str(path))
            return path
        if _matches(path, sha256=file.sha256, md5=file.md5):
            return path
        path.unlink()  # a damaged cache entry: fetch it again
    return download(corpus.url(file), path, sha256=file.sha256, md5=file.md5)

"""Replace a file's contents atomically: readers see the old bytes or the new, never a mix."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import tempfile
from pathlib import Path

from fetchproxy.errors import FetchproxyError


class WriteError(FetchproxyError, OSError):
    """A file fetchproxy must write cannot be (read-only, no space, no permission)."""


def write_error(path: Path, exc: OSError, fix: str) -> WriteError:
    """``cannot write PATH: <why> — <fix>``."""
    return WriteError(f"cannot write {path}: {exc.strerror or exc} — {fix}")


def check_writable(path: Path, fix: str) -> None:
    """:class:`WriteError` (ending in ``fix``) unless a file could be written at ``path``.

    Nothing is created at ``path`` or truncated: its directory is made if need be and a
    probe file written there and removed; a directory at ``path`` itself is refused.
    """
    try:
        probe_writable(path.parent)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    except OSError as exc:
        raise write_error(path, exc, fix) from None


def probe_writable(directory: Path) -> None:
    """Make ``directory`` if need be and a file in it, then remove the file; ``OSError`` if not.

    For a run to find out before it starts that it could not write its results there.
    """
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".fetchproxy-probe-", dir=directory)
    os.close(fd)
    Path(name).unlink()


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new file.

    The bytes go to an exclusively created temp file in the same directory
    (named ``.<name>.<random>.tmp``), which is fsynced, given ``mode`` (not
    subject to the umask) and renamed over ``path``; then the directory is
    fsynced. On any error the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (a rename, a new file) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The store's file operations: only regular files are read, nothing is changed through a link.

A blob is opened ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`` and ``fstat``-ed before a byte is read
(:func:`open_regular`): whatever else holds its name — a FIFO that would wait for a writer, a
device or a link to one that might never end, a link to a file elsewhere — is a
:class:`~fetchproxy.store.base.NotRegularBlobError`. Listings and changes (prune, quarantine,
temp files) work relative to descriptors of the store's own directories, opened
``O_DIRECTORY | O_NOFOLLOW`` (:class:`Directory`): a directory of the store that was replaced
by a link is not entered, and ``rename``/``link``/``unlink`` take names inside those
descriptors, so no operation of the store ever removes or moves a file outside it, whatever
its directories hold. Links are linked as themselves (``link(2)`` without following).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Self

from fetchproxy.digest import Digest
from fetchproxy.store.errors import MissingBlobError, NotRegularBlobError, StoreError
from fetchproxy.store.reader import BlobReader

DIR_MODE = 0o755

_OPEN_BLOB = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""How a blob is opened: never through a link, never waiting (for a FIFO's writer), never
making a terminal ours; ``O_NONBLOCK`` is cleared once the file is known to be regular."""
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_A_LINK = "a symbolic link, not a directory of the store"
_NOT_A_DIRECTORY = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
"""``open(O_DIRECTORY | O_NOFOLLOW)`` errors meaning: no directory of the store here."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, for messages: ``a FIFO``, ``a directory``…"""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((kind for test, kind in kinds if test(mode)), f"mode {mode:o}")


def open_regular(
    path: Path, digest: Digest, *, name: str | None = None, dir_fd: int | None = None
) -> tuple[io.FileIO, os.stat_result]:
    """The blob file at ``path`` opened for reading, and its ``fstat``.

    With ``dir_fd``, the file opened is ``name`` inside that directory (``path`` is for
    messages). ``MissingBlobError`` if there is none; ``NotRegularBlobError`` if the name holds
    anything but a regular file, checked on the opened file so it cannot change in between;
    ``OSError`` for anything else.
    """
    where = os.fspath(path) if dir_fd is None else (name or path.name)
    try:
        fd = os.open(where, _OPEN_BLOB, dir_fd=dir_fd)
    except FileNotFoundError:
        raise MissingBlobError(digest, path) from None
    except OSError as exc:
        mode = _lstat_mode(where, dir_fd) if exc.errno in (errno.ELOOP, errno.ENXIO) else None
        if mode is not None and not stat.S_ISREG(mode):  # a link (O_NOFOLLOW), a socket
            raise NotRegularBlobError(expected=digest, kind=kind_of(mode), path=path) from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            os.set_blocking(fd, True)
            return io.FileIO(fd, "rb", closefd=True), info
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    raise NotRegularBlobError(expected=digest, kind=kind_of(info.st_mode), path=path)


def _lstat_mode(where: str, dir_fd: int | None) -> int | None:
    try:
        return os.lstat(where, dir_fd=dir_fd).st_mode
    except OSError:
        return None


class Directory:
    """One of the store's directories, held open by a descriptor that no link led to.

    Every operation names an entry inside it; none follows a link.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> Self:
        """The directory ``path`` (made first with ``create``).

        ``OSError`` if it is missing, not a directory, or a link (``ELOOP``).
        """
        if create:
            path.mkdir(mode=DIR_MODE, exist_ok=True)
        try:
            return cls(path, os.open(path, _OPEN_DIR))
        except NotADirectoryError:
            mode = _lstat_mode(os.fspath(path), None)
            if mode is not None and stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, _A_LINK, os.fspath(path)) from None
            raise

    @classmethod
    def listing(cls, path: Path) -> Self | None:
        """The directory ``path`` to list, or ``None`` if there is none (or a link is there)."""
        try:
            return cls.open(path)
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY:
                return None
            raise

    def child(self, name: str) -> Directory | None:
        """The directory ``name`` in this one, or ``None`` if that is no directory (or a link)."""
        try:
            fd = os.open(name, _OPEN_DIR, dir_fd=self._fd)
        except OSError as exc:
            if exc.errno in _NOT_A_DIRECTORY:
                return None
            raise
        return Directory(self.path / name, fd)

    def names(self) -> list[str]:
        """The entries' names, sorted."""
        return sorted(os.listdir(self._fd))  # noqa: PTH208 -- a descriptor, not a path

    def lstat(self, name: str) -> os.stat_result:
        return os.lstat(name, dir_fd=self._fd)

    def mkdir(self, name: str) -> None:
        os.mkdir(name, DIR_MODE, dir_fd=self._fd)

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self._fd)

    def rename(self, name: str, to: Directory, new_name: str) -> None:
        """Rename ``name`` to ``new_name`` in ``to``; replaces an entry there, as rename(2) does."""
        os.rename(name, new_name, src_dir_fd=self._fd, dst_dir_fd=to._fd)

    def link(self, name: str, to: Directory, new_name: str) -> None:
        """Hard-link ``name`` (itself, if it is a link) as ``new_name`` in ``to``."""
        os.link(name, new_name, src_dir_fd=self._fd, dst_dir_fd=to._fd, follow_symlinks=False)

    def open_regular(self, name: str, digest: Digest) -> tuple[io.FileIO, os.stat_result]:
        """:func:`open_regular` of the entry ``name``."""
        return open_regular(self.path / name, digest, name=name, dir_fd=self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def move_no_clobber(directory: Directory, name: str, new_name: str) -> bool:
    """Rename ``name`` to ``new_name`` in ``directory`` unless that is taken; whether it did.

    Any kind of entry, never followed: a hard link fails on a taken name; a directory, which
    cannot be linked, is renamed onto an empty directory made for it first (``mkdir`` fails on
    a taken name, and renaming onto one that someone filled meanwhile fails too).
    """
    if stat.S_ISDIR(directory.lstat(name).st_mode):
        try:
            directory.mkdir(new_name)
        except FileExistsError:
            return False
        try:
            directory.rename(name, directory, new_name)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                return False
            raise
        return True
    try:
        directory.link(name, directory, new_name)
    except FileExistsError:
        return False
    directory.unlink(name)
    return True


def put_back(aside: Directory, name: str, home: Directory, home_name: str) -> bool:
    """Give an entry taken aside its name again, unless a writer published the blob anew.

    Whether this call put it back (``False`` if another process did first). A link goes back
    as the link itself, never as a hard link to what it points to.
    """
    try:
        aside.link(name, home, home_name)
    except FileExistsError:
        pass
    except FileNotFoundError:  # another process put it back first
        return False
    with contextlib.suppress(FileNotFoundError):
        aside.unlink(name)
    return True


def is_intact(directory: Directory, name: str, digest: Digest) -> bool:
    """Whether ``name`` is a regular file that can be read and hashes to ``digest``."""
    try:
        source, info = directory.open_regular(name, digest)
    except OSError:  # not there, not a regular file, unreadable
        return False
    reader = BlobReader(
        source, digest=digest, size=info.st_size, path=directory.path / name, chunk_size=1 << 20
    )
    try:
        with reader:
            for _chunk in reader:
                pass
    except StoreError:  # CorruptBlobError, or an I/O error
        return False
    return True

"""The record journal: every finished fetch, appended as it happens.

``record`` writes the canonical lock only at the end. Until then each locked fetch is one JSON
line in ``<lock>.journal`` (flushed per line, so a killed run keeps everything it finished; the
blobs themselves are already fsynced in the store). A run makes the file, empty, before the
build starts (so the sandbox can keep it read-only to the build) and holds an ``flock`` on it
while it lives; the first fetch writes the first line, which says whether the run keeps the
existing lock (``--keep``): ``{"journal": 1, "keep": false}``. A run that recorded nothing
removes the file; so does the next run, when a killed run left it empty (and unlocked). A
successful run removes the journal; after an interrupted or failed one, ``fetchproxy lock
recover`` turns it into a lock (on top of the existing lock for ``--keep``).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, Self

from fetchproxy.errors import FetchproxyError
from fetchproxy.lock.model import Fetch, LockFieldError


class JournalError(FetchproxyError, ValueError):
    """A journal line that cannot be read back."""


_HEADER = "journal"
"""The key of a journal's first line, which says how the run records."""


def journal_path(lock_path: Path) -> Path:
    """Where a record of ``lock_path`` keeps its journal."""
    return lock_path.with_name(lock_path.name + ".journal")


class Journal:
    """An append-only file of fetches; ``close(remove=True)`` once the lock is written.
    ``keep``: the run adds to the existing lock (``--keep``)."""

    def __init__(self, path: Path, *, keep: bool = False) -> None:
        self.path = path
        self.keep = keep
        self.appended = 0
        self._file: IO[str] | None = None
        self._closed = False

    def create(self) -> None:
        """Make the (empty) file now, exclusively and never through a link planted in its
        place, and hold it as this run's: ``FileExistsError`` if it exists."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._file = open(fd, "w", encoding="utf-8")  # noqa: PTH123, SIM115

    def append(self, fetch: Fetch) -> None:
        assert not self._closed, "journal is closed"
        if self._file is None:
            self.create()
        assert self._file is not None
        if not self.appended:
            self._file.write(json.dumps({_HEADER: 1, "keep": self.keep}) + "\n")
        self._file.write(json.dumps(fetch.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()
        self.appended += 1

    def close(self, *, remove: bool) -> None:
        """Close the file; remove it when asked, or when it holds no fetch."""
        self._closed = True
        made = self._file is not None
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.flush()
                os.fsync(file.fileno())
            finally:  # a full disk fails the flush: the file is let go all the same
                file.close()
        if remove or (made and not self.appended):
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(remove=False)


def journal_state(path: Path) -> Literal["absent", "in-use", "left-empty", "left"]:
    """Whether a record's journal is at ``path``: none; one a live run holds; an empty one a
    killed run left before its first fetch (safe to remove); or one holding fetches."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except OSError:
        return "left"  # a link, or unreadable: not ours to judge, say it is there
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "in-use"
        info = os.fstat(fd)
        return "left-empty" if stat.S_ISREG(info.st_mode) and info.st_size == 0 else "left"
    finally:
        os.close(fd)


def journal_mode(path: Path) -> Literal["fresh", "keep", "older"]:
    """How the run that wrote the journal at ``path`` recorded: afresh, ``--keep`` (adding to
    the existing lock), or unknown: a journal from before the first line said."""
    with path.open(encoding="utf-8") as file:
        first = file.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        return "older"
    if not (isinstance(header, dict) and _HEADER in header):
        return "older"
    return "keep" if header.get("keep") is True else "fresh"


def read_journal(path: Path) -> Iterator[Fetch]:
    """The fetches in a journal, in order. A torn last line (a killed write) is skipped."""
    with path.open(encoding="utf-8") as file:
        lines = file.read().split("\n")
    last = len(lines)
    while last and not lines[last - 1]:
        last -= 1
    for lineno, line in enumerate(lines[:last], 1):
        if not line:
            continue
        try:
            table = json.loads(line)
        except json.JSONDecodeError:
            if lineno == last:
                return  # the line a killed run was writing
            raise JournalError(f"{path}:{lineno}: not a journal line") from None
        if lineno == 1 and isinstance(table, dict) and _HEADER in table:
            continue
        try:
            yield Fetch.from_dict(table)
        except LockFieldError as exc:
            raise JournalError(f"{path}:{lineno}: {exc}") from None

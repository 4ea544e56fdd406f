"""The record journal: every finished fetch, appended as it happens.

``record`` writes the canonical lock only at the end. Until then each locked fetch is one JSON
line in ``<lock>.journal`` (flushed per line, so a killed run keeps everything it finished; the
blobs themselves are already fsynced in the store). A successful run removes the journal; after an
interrupted one, ``fetchproxy lock recover`` turns it into a lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Self

from fetchproxy.errors import FetchproxyError
from fetchproxy.lock import Fetch, LockFieldError


class JournalError(FetchproxyError, ValueError):
    """A journal line that cannot be read back."""


def journal_path(lock_path: Path) -> Path:
    """Where a record of ``lock_path`` keeps its journal."""
    return lock_path.with_name(lock_path.name + ".journal")


class Journal:
    """An append-only file of fetches; ``close(remove=True)`` once the lock is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("w", encoding="utf-8")

    def append(self, fetch: Fetch) -> None:
        assert self._file is not None, "journal is closed"
        self._file.write(json.dumps(fetch.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self, *, remove: bool) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        if remove:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(remove=False)


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
        try:
            yield Fetch.from_dict(table)
        except LockFieldError as exc:
            raise JournalError(f"{path}:{lineno}: {exc}") from None

"""The store's errors: what the caller asked for is missing, corrupt, or the store failed.

All are ``FetchproxyError``s (exit status 2 in the CLI) and ``OSError``s; their messages say
what happened, where, and what to do. docs/store.md lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import blake3

from fetchproxy.digest import PREFIX, Digest
from fetchproxy.errors import FetchproxyError

_ELSEWHERE = "or pick another store with --store or FETCHPROXY_STORE"
FIX_WRITE = f"free space or fix permissions there, {_ELSEWHERE}"
FIX_READ = f"check the store's files and permissions, {_ELSEWHERE}"
_VERIFY_HINT = "`fetchproxy lock verify` lists every missing or damaged blob"


class StoreError(FetchproxyError, OSError):
    """The store could not do what was asked (I/O failure, bad state on disk)."""


class MissingBlobError(StoreError, FileNotFoundError):
    """A blob the caller asked for is not in the store."""

    def __init__(self, digest: Digest, path: Path | None) -> None:
        where = f"no file {path}" if path is not None else "not in the in-memory store"
        super().__init__(
            f"blob {digest} is missing from the store ({where}); "
            f"record again to fetch it — {_VERIFY_HINT}"
        )
        self.digest = digest
        self.path = path


_NOT_SERVED = (
    "it will not be served. `fetchproxy store verify --repair` moves it aside, then "
    f"record again — {_VERIFY_HINT}"
)


class CorruptBlobError(StoreError):
    """Bytes do not hash to the digest they are stored or committed under."""

    def __init__(
        self, message: str, *, expected: Digest, actual: Digest | None, path: Path | None
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
        """What the bytes hash to; ``None`` when there are no bytes to hash (not a file)."""
        self.path = path

    @property
    def problem(self) -> str:
        """What is wrong, in a few words: ``hashes to blake3:…``."""
        return f"hashes to {self.actual}"

    @classmethod
    def stored(cls, *, expected: Digest, actual: Digest, path: Path | None) -> Self:
        """A blob in the store whose bytes changed after it was written."""
        return cls(
            f"corrupt blob in {place(path)}: expected {expected}, got {actual}; {_NOT_SERVED}",
            expected=expected,
            actual=actual,
            path=path,
        )

    @classmethod
    def written(cls, *, expected: Digest, actual: Digest, path: Path | None) -> Self:
        """Bytes streamed into a writer that do not hash to what the caller expected."""
        return cls(
            f"refused to store a blob: expected {expected}, got {actual}; "
            f"nothing was written to {place(path)}",
            expected=expected,
            actual=actual,
            path=path,
        )


class NotRegularBlobError(CorruptBlobError):
    """A blob's name holds no regular file (a FIFO, a device, a directory, a symbolic link).

    The store never reads such a thing: a FIFO would block, a device or a link to one might
    never end, and a link's target is no file of the store. It is a corrupt blob.
    """

    def __init__(self, *, expected: Digest, kind: str, path: Path) -> None:
        super().__init__(
            f"corrupt blob in {path}: not a regular file ({kind}); {_NOT_SERVED}",
            expected=expected,
            actual=None,
            path=path,
        )
        self.kind = kind
        """``a FIFO``, ``a symbolic link``, ``a directory``, ``a character device``…"""

    @property
    def problem(self) -> str:
        return f"not a regular file ({self.kind})"


def place(path: Path | None) -> str:
    """Where a blob is, for messages: its file, or the in-memory store."""
    return str(path) if path is not None else "the in-memory store"


def digest_of(hasher: blake3.blake3) -> Digest:
    return Digest(PREFIX + hasher.hexdigest())


class ChangedBlobError(CorruptBlobError):
    """A blob's file changed while part of it was served unhashed, trusted by its identity.

    Nothing after the change is served: the client sees an answer cut short.
    """

    def __init__(self, *, digest: Digest, path: Path | None, how: str) -> None:
        super().__init__(
            f"blob {digest} in {place(path)} changed while a part of it was served ({how}); "
            f"the rest will not be served — {_VERIFY_HINT}",
            expected=digest,
            actual=None,
            path=path,
        )
        self.how = how

    @property
    def problem(self) -> str:
        return f"changed while it was served ({self.how})"


def store_error(action: str, exc: OSError, fix: str = FIX_WRITE) -> StoreError:
    """``cannot ACTION: <why> (FILE) — FIX``: an OSError the store met, said for the user."""
    where = f" ({exc.filename})" if exc.filename else ""
    return StoreError(f"cannot {action}: {exc.strerror or exc}{where} — {fix}")

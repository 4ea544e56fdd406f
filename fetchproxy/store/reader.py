"""``BlobReader``: one blob streamed out of the store, rehashed as it is read.

Shared by both implementations: ``DiskStore`` hands it a file, ``MemoryStore`` a ``BytesIO``.
A reader also knows the :class:`BlobIdentity` of what it has open, so that a caller who
verified that very file before (replay's ``VerifiedBlobs``) can read a part of it without
rehashing the whole (:meth:`BlobReader.part`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

import blake3

from fetchproxy.digest import Digest
from fetchproxy.store.errors import (
    ChangedBlobError,
    CorruptBlobError,
    StoreError,
    digest_of,
    place,
)


class BlobSource(Protocol):
    """What a ``BlobReader`` reads from: an unbuffered binary file or ``BytesIO``."""

    def read(self, size: int, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class BlobIdentity:
    """Which file a reader has open, and in which state.

    Two readers with equal identities read the same bytes: any change to a file — a write, a
    truncation, a chmod or a touch — sets its ctime, which no one can set back (``utime``
    itself sets it), and a file put in its place has another inode. What this cannot see: a
    writable memory mapping made before the identity was taken, a write to the block device
    below the file system, and a change within the same timestamp tick as the previous one on
    a file system with coarse timestamps (which ``VerifiedBlobs`` guards against by not
    trusting an identity whose ctime is that recent).
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> Self:
        """The identity of the file ``info`` (an ``fstat`` of the opened file) describes."""
        return cls(
            device=info.st_dev,
            inode=info.st_ino,
            size=info.st_size,
            mtime_ns=info.st_mtime_ns,
            ctime_ns=info.st_ctime_ns,
        )


class BlobReader:
    """Streams one blob out of the store, rehashing every byte.

    Iteration yields chunks but withholds the last one until the whole blob
    has been read and its digest checked, so a corrupt blob is never handed
    out whole: the mismatch raises ``CorruptBlobError`` instead. A reader can
    be iterated (or ``part`` read) once; it closes itself when that ends.
    """

    def __init__(
        self,
        source: BlobSource,
        *,
        digest: Digest,
        size: int,
        path: Path | None,
        chunk_size: int,
        identity: BlobIdentity | None = None,
        restat: Callable[[], BlobIdentity] | None = None,
    ) -> None:
        """``identity`` is what ``source`` is (``None``: unknown, never trusted), ``restat``
        says what it is now (``None``: it cannot change while open, as a ``BytesIO``)."""
        if chunk_size < 1:
            source.close()
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self._source = source
        self._chunk_size = chunk_size
        self._started = False
        self._restat = restat
        self.digest = digest
        self.size = size
        self.path = path
        self.identity = identity
        """What this reader has open, as it was when opened."""

    def __iter__(self) -> Iterator[bytes]:
        self._start()
        return self._verified_chunks()

    def read_all(self) -> bytes:
        """The whole blob, verified."""
        return b"".join(self)

    def check(self) -> None:
        """Rehash the whole file this reader has open, handing out nothing.

        ``CorruptBlobError`` if it does not hash to its digest. The reader can still be
        iterated or ``part`` read afterwards, from the file's start.
        """
        if self._started:
            raise ValueError(f"blob {self.digest} was already read; open it again")
        self._seek(0)
        hasher = blake3.blake3()
        while chunk := self._read(self._chunk_size):
            hasher.update(chunk)
        actual = digest_of(hasher)
        if actual != self.digest:
            raise CorruptBlobError.stored(expected=self.digest, actual=actual, path=self.path)
        self._seek(0)

    def current_identity(self) -> BlobIdentity | None:
        """What the open file is now (one ``fstat``); ``None`` if its identity is unknown."""
        return self._restat() if self._restat is not None else self.identity

    def part(self, start: int, end: int) -> Iterator[memoryview]:
        """Bytes ``start`` to ``end`` (exclusive) of the open file, **not rehashed**.

        Only for a caller that verified this very file before: one whose ``identity`` it
        checked against the one it verified. The last piece is withheld until the file's
        identity is found unchanged once more, so a file changed while the part streamed is
        cut off (``ChangedBlobError``), and so is one that ends early.
        """
        if not 0 <= start <= end <= self.size:
            raise ValueError(
                f"bytes {start}-{end} are not within blob {self.digest} of {self.size}"
            )
        self._start()
        return self._part(start, end)

    def close(self) -> None:
        """Release the underlying file; safe to call more than once."""
        self._source.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        if self._started:
            raise ValueError(f"blob {self.digest} was already read; open it again")
        self._started = True

    def _verified_chunks(self) -> Iterator[bytes]:
        hasher = blake3.blake3()
        held = b""
        try:
            while chunk := self._read(self._chunk_size):
                hasher.update(chunk)
                if held:
                    yield held
                held = chunk
            actual = digest_of(hasher)
            if actual != self.digest:
                raise CorruptBlobError.stored(expected=self.digest, actual=actual, path=self.path)
            if held:
                yield held
        finally:
            self.close()

    def _part(self, start: int, end: int) -> Iterator[memoryview]:
        try:
            self._seek(start)
            position = start
            held: memoryview | None = None
            while position < end:
                chunk = self._read(min(self._chunk_size, end - position))
                if not chunk:
                    raise ChangedBlobError(
                        digest=self.digest, path=self.path, how=f"it ends at byte {position}"
                    )
                position += len(chunk)
                if held is not None:
                    yield held
                held = memoryview(chunk)
            if self.identity is None or self.current_identity() != self.identity:
                raise ChangedBlobError(digest=self.digest, path=self.path, how="it was changed")
            if held is not None:
                yield held
        finally:
            self.close()

    def _read(self, size: int) -> bytes:
        try:
            return self._source.read(size)
        except OSError as exc:
            raise StoreError(
                f"cannot read blob {self.digest} from {place(self.path)}: {exc.strerror or exc}"
            ) from exc

    def _seek(self, offset: int) -> None:
        try:
            self._source.seek(offset)
        except OSError as exc:
            raise StoreError(
                f"cannot read blob {self.digest} from {place(self.path)}: {exc.strerror or exc}"
            ) from exc

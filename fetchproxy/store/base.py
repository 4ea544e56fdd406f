"""The store's interface: the streaming writer, ``Store``; the errors and reader it uses.

``BlobWriter`` and ``BlobReader`` (:mod:`fetchproxy.store.reader`) hold everything both
implementations share — hashing, the writer's open/committed/aborted states, verification while
reading — so ``DiskStore`` and ``MemoryStore`` differ only in where bytes go. The errors live
in :mod:`fetchproxy.store.errors` and are named here too.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import blake3

from fetchproxy.digest import Digest, parse_digest
from fetchproxy.store.errors import (
    ChangedBlobError,
    CorruptBlobError,
    MissingBlobError,
    NotRegularBlobError,
    StoreError,
    digest_of,
)
from fetchproxy.store.reader import BlobIdentity, BlobReader, BlobSource

__all__ = [
    "BlobIdentity",
    "BlobReader",
    "BlobSource",
    "BlobWriter",
    "ChangedBlobError",
    "CorruptBlobError",
    "MissingBlobError",
    "NotRegularBlobError",
    "Quarantined",
    "Store",
    "StoreError",
]


class BlobWriter(ABC):
    """Streams one blob into the store: ``update()`` chunks, then ``commit()``.

    Bytes are hashed as they arrive and become visible under their digest only
    on ``commit()``. ``abort()``, an error, or leaving a ``with`` block without
    committing discards them. A writer is used by one thread at a time.
    """

    def __init__(self) -> None:
        self._hasher = blake3.blake3()
        self._size = 0
        self._state = "open"

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._size

    def update(self, chunk: bytes) -> None:
        """Hash and write ``chunk``; on failure the writer is aborted."""
        self._check_open("update")
        if not chunk:
            return
        try:
            self._write(chunk)
        except BaseException:
            self._abort_quietly()
            raise
        self._hash(chunk)
        self._size += len(chunk)

    def commit(self, expected: Digest | None = None) -> Digest:
        """Make the blob durable under its digest and return the digest.

        If the store already holds the blob, it is kept and the new copy is
        dropped. With ``expected``, bytes hashing to anything else are discarded
        and ``CorruptBlobError`` is raised.
        """
        self._check_open("commit")
        if expected is not None:
            expected = parse_digest(expected)
        try:
            actual = self._digest()
        except BaseException:
            self._abort_quietly()
            raise
        if expected is not None and expected != actual:
            self._abort_quietly()
            raise CorruptBlobError.written(
                expected=expected, actual=actual, path=self._target_path(expected)
            )
        try:
            self._publish(actual)
        except BaseException:
            self._abort_quietly()
            raise
        self._state = "committed"
        return actual

    async def commit_async(self, expected: Digest | None = None) -> Digest:
        """``commit()`` in a worker thread, so fsync never stalls the event loop."""
        return await asyncio.to_thread(self.commit, expected)

    def abort(self) -> None:
        """Discard what was written; does nothing once committed or aborted."""
        if self._state == "open":
            self._state = "aborted"
            self._discard()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.abort()
        else:
            self._abort_quietly()

    def _check_open(self, action: str) -> None:
        if self._state != "open":
            raise ValueError(f"cannot {action}: this blob writer is already {self._state}")

    def _abort_quietly(self) -> None:
        """Abort on an error path, keeping the original error in charge."""
        with contextlib.suppress(OSError):
            self.abort()

    @abstractmethod
    def _write(self, chunk: bytes) -> None:
        """Append ``chunk`` to the pending blob."""

    def _hash(self, chunk: bytes) -> None:
        """Hash ``chunk``, just written; a writer hashing elsewhere (a thread) overrides this."""
        self._hasher.update(chunk)

    def _digest(self) -> Digest:
        """The digest of every byte written, once all of them are."""
        return digest_of(self._hasher)

    @abstractmethod
    def _publish(self, digest: Digest) -> None:
        """Make the pending bytes the blob ``digest`` (or drop them if it exists)."""

    @abstractmethod
    def _discard(self) -> None:
        """Throw the pending bytes away."""

    @abstractmethod
    def _target_path(self, digest: Digest) -> Path | None:
        """Where the blob ``digest`` lives, for messages."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Quarantined:
    """A corrupt blob the store moved out of its blobs' namespace, kept for inspection."""

    digest: Digest
    """The name it had."""
    name: str
    """Its name among the quarantined: ``blake3-<hex>``, or ``blake3-<hex>-N`` if taken."""
    path: Path | None
    """The file now holding it (``<store>/corrupt/<name>``); ``None`` in a store without files."""


class Store(ABC):
    """A content-addressed store of response bodies, named by BLAKE3 digest.

    Every method taking a digest first validates it (``ValueError`` for a
    malformed one). A blob is only ever visible under the digest of its bytes.

    The store alone touches its files: garbage collection and repair go through
    ``prune``, ``restore_pruned`` and ``quarantine``, which keep blobs that
    writers use or publish meanwhile.
    """

    @abstractmethod
    def writer(self) -> BlobWriter:
        """A writer for a new blob."""

    @abstractmethod
    def open(self, digest: Digest, *, chunk_size: int = 1 << 20) -> BlobReader:
        """A verifying reader for ``digest``; ``MissingBlobError`` if absent."""

    @abstractmethod
    def contains(self, digest: Digest) -> bool:
        """Whether the store holds ``digest`` (without verifying it)."""

    @abstractmethod
    def size_of(self, digest: Digest) -> int:
        """The size in bytes of ``digest``; ``MissingBlobError`` if absent."""

    @abstractmethod
    def digests(self) -> Iterator[Digest]:
        """Every blob in the store, in sorted order; temp files and junk are skipped."""

    @abstractmethod
    def remove(self, digest: Digest) -> None:
        """Delete ``digest`` (for garbage collection); ``MissingBlobError`` if absent."""

    @abstractmethod
    def prune(self, digest: Digest, *, older_than: float, dry_run: bool = False) -> int | None:
        """Remove ``digest`` unless it was written or used after ``older_than``.

        ``older_than`` is a ``time.time()`` value. A blob counts as used when a writer
        stored it or found it already stored (which refreshes its mtime), and on disk also
        when its ctime is later (publishing and restoring set it). A writer that touches
        the blob while it is being removed keeps it. Returns the bytes freed, or ``None``
        when the blob is kept or was not there. ``dry_run`` only says what would go.
        """

    @abstractmethod
    def restore_pruned(self) -> int:
        """Give back their names to blobs an interrupted ``prune`` left aside; how many.

        Safe while other prunes run: it only ever puts a blob back.
        """

    @abstractmethod
    def quarantine(self, digest: Digest) -> Quarantined | None:
        """Move ``digest`` out of the way if it is corrupt, keeping its bytes for inspection.

        The blob is first taken away from its name atomically, then checked once more:
        if it is intact after all (a writer published a good copy after the bad one was
        found), it is put back and ``None`` returned; ``None`` too when it is not there.
        """

    @abstractmethod
    def blob_path(self, digest: Digest) -> Path | None:
        """The file holding ``digest`` if the store has files (for zero-copy serving)."""

    @abstractmethod
    def check_writable(self) -> None:
        """``StoreError`` if new blobs could not be written (a read-only store), else nothing."""

    def put(self, data: bytes) -> Digest:
        """Store ``data`` and return its digest."""
        with self.writer() as writer:
            writer.update(data)
            return writer.commit()

    def verify(self, digest: Digest) -> None:
        """Rehash ``digest`` in full: ``CorruptBlobError`` or ``MissingBlobError`` if bad."""
        with self.open(digest) as reader:
            reader.check()

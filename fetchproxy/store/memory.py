"""``MemoryStore``: the store as a dict, for tests and for code that needs no disk.

It behaves exactly like ``DiskStore`` — same digests, errors and messages, an
existing blob kept (and its time of use refreshed), corruption detected on read,
prune and quarantine — and ``corrupt()`` lets tests damage a blob the way a
failing disk would.
"""

from __future__ import annotations

import io
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from fetchproxy.digest import Digest, digest_bytes, parse_digest
from fetchproxy.store.base import (
    BlobIdentity,
    BlobReader,
    BlobWriter,
    MissingBlobError,
    Quarantined,
    Store,
)
from fetchproxy.store.layout import quarantine_name


@dataclass(frozen=True, slots=True)
class _Blob:
    data: bytes
    used: float
    """When it was stored, or last found already stored: the disk store's mtime."""
    generation: int
    """Which bytes these are: new for every blob stored or damaged (the disk store's inode)."""


class MemoryStore(Store):
    """Blobs in a dict, guarded by a lock so threads can share the store."""

    def __init__(self) -> None:
        self._blobs: dict[Digest, _Blob] = {}
        self._lock = threading.Lock()
        self._generations = itertools.count(1)
        self.quarantined: dict[str, bytes] = {}
        """What ``quarantine`` moved aside, by its name there (``blake3-<hex>[-N]``)."""

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._blobs)} blobs>)"

    def writer(self) -> MemoryBlobWriter:
        return MemoryBlobWriter(self)

    def check_writable(self) -> None:
        """Memory always takes new blobs."""

    def open(self, digest: Digest, *, chunk_size: int = 1 << 20) -> BlobReader:
        blob = self._blob(digest)
        identity = BlobIdentity(
            device=0, inode=blob.generation, size=len(blob.data), mtime_ns=0, ctime_ns=0
        )
        return BlobReader(
            io.BytesIO(blob.data),
            digest=digest,
            size=len(blob.data),
            path=None,
            chunk_size=chunk_size,
            identity=identity,  # an open BytesIO keeps its bytes: no restat
        )

    def contains(self, digest: Digest) -> bool:
        digest = parse_digest(digest)
        with self._lock:
            return digest in self._blobs

    def size_of(self, digest: Digest) -> int:
        return len(self._get(digest))

    def digests(self) -> Iterator[Digest]:
        with self._lock:
            snapshot = sorted(self._blobs)
        return iter(snapshot)

    def remove(self, digest: Digest) -> None:
        digest = parse_digest(digest)
        with self._lock:
            if self._blobs.pop(digest, None) is None:
                raise MissingBlobError(digest, None)

    def prune(self, digest: Digest, *, older_than: float, dry_run: bool = False) -> int | None:
        digest = parse_digest(digest)
        with self._lock:
            blob = self._blobs.get(digest)
            if blob is None or blob.used > older_than:
                return None
            if not dry_run:
                del self._blobs[digest]
            return len(blob.data)

    def restore_pruned(self) -> int:
        """Nothing to restore: a prune in memory is never left half done."""
        return 0

    def quarantine(self, digest: Digest) -> Quarantined | None:
        digest = parse_digest(digest)
        with self._lock:
            blob = self._blobs.get(digest)
            if blob is None or digest_bytes(blob.data) == digest:
                return None
            del self._blobs[digest]
            for attempt in itertools.count(1):
                name = quarantine_name(digest, attempt)
                if name not in self.quarantined:
                    self.quarantined[name] = blob.data
                    return Quarantined(digest=digest, name=name, path=None)
        raise AssertionError("unreachable")

    def blob_path(self, digest: Digest) -> None:
        parse_digest(digest)

    def corrupt(self, digest: Digest, data: bytes | None = None) -> None:
        """Test hook: replace the bytes of ``digest`` (default: flip the first bit)."""
        old = self._get(digest)
        if data is None:
            data = bytes([old[0] ^ 1]) + old[1:] if old else b"\0"
        with self._lock:
            used = self._blobs[digest].used
            self._blobs[digest] = _Blob(data, used, next(self._generations))

    def _get(self, digest: Digest) -> bytes:
        return self._blob(digest).data

    def _blob(self, digest: Digest) -> _Blob:
        digest = parse_digest(digest)
        with self._lock:
            blob = self._blobs.get(digest)
        if blob is None:
            raise MissingBlobError(digest, None)
        return blob

    def _add(self, digest: Digest, data: bytes) -> None:
        """Store ``data``, or keep the blob already there and refresh when it was used."""
        with self._lock:
            kept = self._blobs.get(digest)
            if kept is None:
                self._blobs[digest] = _Blob(data, time.time(), next(self._generations))
            else:
                self._blobs[digest] = _Blob(kept.data, time.time(), kept.generation)


class MemoryBlobWriter(BlobWriter):
    """Collects chunks and adds them to the store on commit."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self._store = store
        self._chunks: list[bytes] = []

    def _write(self, chunk: bytes) -> None:
        self._chunks.append(bytes(chunk))

    def _publish(self, digest: Digest) -> None:
        self._store._add(digest, b"".join(self._chunks))
        self._chunks = []

    def _discard(self) -> None:
        self._chunks = []

    def _target_path(self, digest: Digest) -> None:
        return None

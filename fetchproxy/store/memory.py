"""``MemoryStore``: the store as a dict, for tests and for code that needs no disk.

It behaves exactly like ``DiskStore`` — same digests, errors and messages, an
existing blob kept, corruption detected on read — and ``corrupt()`` lets tests
damage a blob the way a failing disk would.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

from fetchproxy.digest import Digest, parse_digest
from fetchproxy.store.base import BlobReader, BlobWriter, MissingBlobError, Store


class MemoryStore(Store):
    """Blobs in a dict, guarded by a lock so threads can share the store."""

    def __init__(self) -> None:
        self._blobs: dict[Digest, bytes] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._blobs)} blobs>)"

    def writer(self) -> MemoryBlobWriter:
        return MemoryBlobWriter(self)

    def check_writable(self) -> None:
        """Memory always takes new blobs."""

    def open(self, digest: Digest, *, chunk_size: int = 1 << 20) -> BlobReader:
        data = self._get(digest)
        return BlobReader(
            io.BytesIO(data), digest=digest, size=len(data), path=None, chunk_size=chunk_size
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

    def blob_path(self, digest: Digest) -> None:
        parse_digest(digest)

    def corrupt(self, digest: Digest, data: bytes | None = None) -> None:
        """Test hook: replace the bytes of ``digest`` (default: flip the first bit)."""
        old = self._get(digest)
        if data is None:
            data = bytes([old[0] ^ 1]) + old[1:] if old else b"\0"
        with self._lock:
            self._blobs[digest] = data

    def _get(self, digest: Digest) -> bytes:
        digest = parse_digest(digest)
        with self._lock:
            data = self._blobs.get(digest)
        if data is None:
            raise MissingBlobError(digest, None)
        return data

    def _add(self, digest: Digest, data: bytes) -> None:
        with self._lock:
            self._blobs.setdefault(digest, data)


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

"""Blobs as replay serves them: each rehashed before its first use in a run, small ones cached.

Shared by both replay engines (and ``record --keep``). A blob is verified once per run, in a
worker thread; bodies up to :data:`SMALL_BODY` are then kept in a bounded in-memory cache, so a
build that fetches the same small file many times reads it from disk once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Iterator

from fetchproxy.digest import Digest
from fetchproxy.store import Store, StoreError

SMALL_BODY = 256 * 1024
"""Bodies up to this size are answered from memory; larger ones are streamed from the store."""
CACHE_BYTES = 64 * 1024 * 1024


def blob_range(chunks: Iterable[bytes], start: int, end: int) -> Iterator[memoryview]:
    """The bytes ``start`` to ``end`` (exclusive) of a blob read in ``chunks``, in order.

    Stops reading at ``end``: a part is rehashed only as far as it is read, so stream a part
    only of a blob verified before (a whole blob's last chunk comes after its digest check).
    """
    position = 0
    for chunk in chunks:
        chunk_end = position + len(chunk)
        if chunk_end > start:
            yield memoryview(chunk)[max(start - position, 0) : end - position]
        position = chunk_end
        if position >= end:
            return


class WrongSizeError(StoreError):
    """The lock's ``size`` for a body is not the size of the blob it names."""


class VerifiedBlobs:
    """Verification state and the small-body cache of one run."""

    def __init__(self, store: Store, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.store = store
        self._sizes: dict[Digest, int] = {}
        """The blobs this run verified, with their sizes."""
        self._cache: OrderedDict[Digest, bytes] = OrderedDict()
        self._cache_size = 0
        self._cache_bytes = cache_bytes

    async def verify(self, digest: Digest, size: int) -> None:
        """Rehash the blob unless this run did already, and check it is ``size`` bytes long.

        Raises :class:`~fetchproxy.store.CorruptBlobError` when it does not hash to its name,
        :class:`WrongSizeError` when it is not ``size`` bytes long (the answer would carry a
        wrong content-length).
        """
        actual = self._sizes.get(digest)
        if actual is None:
            await asyncio.to_thread(self.store.verify, digest)
            actual = self._sizes[digest] = self.store.size_of(digest)
        if actual != size:
            raise WrongSizeError(
                f"{digest}: the store holds {actual} bytes, the lock says size = {size} — "
                "the lock was edited by hand? Record it again, or check it with "
                "`fetchproxy lock verify`"
            )

    def cached(self, digest: Digest) -> bytes | None:
        """The small body ``digest`` if it is in memory (it was verified to get there)."""
        body = self._cache.get(digest)
        if body is not None:
            self._cache.move_to_end(digest)
        return body

    async def small_body(self, digest: Digest, size: int) -> bytes:
        """The whole (small) body, verified, from memory or read once from the store."""
        await self.verify(digest, size)
        cached = self.cached(digest)
        if cached is not None:
            return cached
        store = self.store

        def read() -> bytes:
            with store.open(digest) as blob:
                return blob.read_all()

        body = await asyncio.to_thread(read)
        self._cache[digest] = body
        self._cache_size += len(body)
        while self._cache_size > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cache_size -= len(dropped)
        return body

"""Blobs as replay serves them: each rehashed before its first use in a run, small ones cached.

Shared by both replay engines (and ``record --keep``). A blob is verified once per run, in a
worker thread; bodies up to :data:`SMALL_BODY` are then kept in a bounded in-memory cache, so a
build that fetches the same small file many times reads it from disk once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from fetchproxy.digest import Digest
from fetchproxy.store import Store

SMALL_BODY = 256 * 1024
"""Bodies up to this size are answered from memory; larger ones are streamed from the store."""
CACHE_BYTES = 64 * 1024 * 1024


class VerifiedBlobs:
    """Verification state and the small-body cache of one run."""

    def __init__(self, store: Store, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.store = store
        self._verified: set[Digest] = set()
        self._cache: OrderedDict[Digest, bytes] = OrderedDict()
        self._cache_size = 0
        self._cache_bytes = cache_bytes

    def is_verified(self, digest: Digest) -> bool:
        return digest in self._verified

    async def verify(self, digest: Digest) -> None:
        """Rehash the blob unless this run did already.

        Raises :class:`~fetchproxy.store.CorruptBlobError` when it does not hash to its name.
        """
        if digest not in self._verified:
            await asyncio.to_thread(self.store.verify, digest)
            self._verified.add(digest)

    def cached(self, digest: Digest) -> bytes | None:
        """The small body ``digest`` if it is in memory (it was verified to get there)."""
        body = self._cache.get(digest)
        if body is not None:
            self._cache.move_to_end(digest)
        return body

    async def small_body(self, digest: Digest) -> bytes:
        """The whole (small) body, verified, from memory or read once from the store."""
        cached = self.cached(digest)
        if cached is not None:
            return cached
        await self.verify(digest)
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

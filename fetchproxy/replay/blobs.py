"""Blobs as replay serves them: verified once per run, served only as the file verified.

Shared by both replay engines (and ``record --keep``). The rule (docs/store.md, "Serving what
was verified"):

- A blob is rehashed in full, in a worker thread, before its first use in a run, and the
  :class:`~fetchproxy.store.BlobIdentity` of the file that hashed right (device, inode, size,
  mtime, ctime, from ``fstat`` on the opened file) is remembered.
- Every later serve opens the blob and compares the opened file's identity (the ``fstat`` the
  store makes anyway) with the one remembered. Equal: the bytes are the ones verified, and a
  part (a ``Range``) is read from its offset without rehashing, its last piece withheld until
  a second ``fstat`` shows the file still unchanged. Different (the file was written, touched,
  replaced): the opened file is rehashed in full before anything is served from it, and its
  identity remembered if it hashes right. A whole blob is rehashed while it streams anyway.
- An identity whose ctime is less than :data:`RACY_NS` old when it is taken is not trusted
  (a change in the same timestamp tick would not show; git's "racily clean" rule): such a
  blob is rehashed at its next serve too.
- Bodies up to :data:`SMALL_BODY` are kept in a bounded in-memory cache, filled from the read
  that verified them. The cache is answered without a system call: what it holds are bytes
  that hashed to their digest, and bytes in memory cannot change — whatever later happens to
  the file on disk, the cached bytes are still the blob (content addressing), so serving
  them serves a verified blob, never the changed file.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self

from fetchproxy.digest import Digest
from fetchproxy.store import BlobIdentity, BlobReader, CorruptBlobError, Store, StoreError

SMALL_BODY = 256 * 1024
"""Bodies up to this size are answered from memory; larger ones are streamed from the store."""
CACHE_BYTES = 64 * 1024 * 1024
RACY_NS: Final = 2_000_000_000
"""An identity whose ctime is younger than this (2 s, the coarsest timestamps of common file
systems) when it is taken is not trusted: a second change within the same tick would keep it."""
_CHUNK = 1 << 20


class WrongSizeError(StoreError):
    """The lock's ``size`` for a body is not the size of the blob it names."""


@dataclass(frozen=True, slots=True)
class _Verified:
    identity: BlobIdentity | None
    """The file that hashed right; ``None`` when not to be trusted (racy, or unknown)."""
    size: int


class VerifiedBlob:
    """Bytes ``start`` to ``end`` of a blob, from a file known to hold what this run verified.

    Iterate once (see :meth:`VerifiedBlobs.open_verified`); close it, or use it as a context
    manager.
    """

    def __init__(self, reader: BlobReader, start: int, end: int, *, run: VerifiedBlobs) -> None:
        self._reader = reader
        self._run = run
        self._identity = reader.identity
        self.digest = reader.digest
        self.size = reader.size
        self.start = start
        self.end = end

    def __iter__(self) -> Iterator[memoryview]:
        """The whole blob is rehashed as it streams, its last chunk withheld until the digest
        checks out; a part is read from ``start`` without rehashing, its last piece withheld
        until the file is found unchanged once more. A failure raises
        :class:`~fetchproxy.store.CorruptBlobError` in place of the rest."""
        if self.start == 0 and self.end == self.size:
            return self._whole()
        return self._reader.part(self.start, self.end)

    def _whole(self) -> Iterator[memoryview]:
        try:
            for chunk in self._reader:
                yield memoryview(chunk)
        except CorruptBlobError:
            self._run.distrust(self.digest)  # a part must not trust this blob's file any more
            raise
        self._run.remember(self.digest, self._identity, self.size)  # every byte hashed right

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class VerifiedBlobs:
    """Verification state and the small-body cache of one run."""

    def __init__(self, store: Store, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.store = store
        self._verified: dict[Digest, _Verified] = {}
        """The blobs this run verified: their size and the identity of the file verified."""
        self._cache: OrderedDict[Digest, bytes] = OrderedDict()
        self._cache_size = 0
        self._cache_bytes = cache_bytes

    async def verify(self, digest: Digest, size: int) -> None:
        """Rehash the blob unless this run did already, and check it is ``size`` bytes long.

        Raises :class:`~fetchproxy.store.CorruptBlobError` when it does not hash to its name,
        :class:`WrongSizeError` when it is not ``size`` bytes long (the answer would carry a
        wrong content-length). A small blob is verified by reading it into the cache.
        """
        known = self._verified.get(digest)
        if known is None:
            if size <= SMALL_BODY:
                await self.small_body(digest, size)
                return
            store = self.store

            def check() -> tuple[BlobIdentity | None, int]:
                with store.open(digest, chunk_size=_CHUNK) as reader:
                    reader.check()
                    return reader.identity, reader.size

            identity, actual = await asyncio.to_thread(check)
            known = self.remember(digest, identity, actual)
        _check_size(digest, known.size, size)

    def verified_size(self, digest: Digest) -> int | None:
        """The size of ``digest`` if this run verified it, else ``None``."""
        known = self._verified.get(digest)
        return known.size if known is not None else None

    def cached(self, digest: Digest) -> bytes | None:
        """The small body ``digest`` if it is in memory (it was verified to get there)."""
        body = self._cache.get(digest)
        if body is not None:
            self._cache.move_to_end(digest)
        return body

    async def small_body(self, digest: Digest, size: int) -> bytes:
        """The whole (small) body, verified, from memory or read (and verified) once."""
        cached = self.cached(digest)
        if cached is not None:
            _check_size(digest, len(cached), size)
            return cached
        store = self.store

        def read() -> tuple[bytes | None, BlobIdentity | None, int]:
            with store.open(digest, chunk_size=_CHUNK) as reader:
                if reader.size != size:  # a lock edited by hand may say 5 for a 1 GB blob:
                    reader.check()  # verify it without holding it in memory
                    return None, reader.identity, reader.size
                return reader.read_all(), reader.identity, reader.size

        body, identity, actual = await asyncio.to_thread(read)
        self.remember(digest, identity, actual)
        _check_size(digest, actual, size)
        assert body is not None  # the size checked out
        self._cache[digest] = body
        self._cache_size += len(body)
        while self._cache_size > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cache_size -= len(dropped)
        return body

    async def open_verified(
        self,
        digest: Digest,
        size: int,
        start: int = 0,
        end: int | None = None,
        *,
        chunk_size: int = _CHUNK,
    ) -> VerifiedBlob:
        """Bytes ``start`` to ``end`` (default: the whole blob) of the blob's file, opened.

        One ``open`` and one ``fstat``, and for a part a second ``fstat`` at its end, when the
        file is the one this run verified. When it is not (or its identity is too recent to
        trust), a part is served only after the opened file itself was rehashed in full, in a
        worker thread; the whole blob is rehashed as it streams anyway. Raises what
        :meth:`verify` raises; ``ValueError`` for a span outside the blob.
        """
        end = size if end is None else end
        if not 0 <= start <= end <= size:
            raise ValueError(f"bytes {start}-{end} are not within the {size} of {digest}")
        reader = self.store.open(digest, chunk_size=chunk_size)
        try:
            # a part of a file not known to be the one verified, or one of another size (a
            # truncated blob is corrupt, not a lock edited by hand): rehash it first
            whole = (start, end) == (0, size) and reader.size == size
            if not (whole or self._trusts(digest, reader.identity)):
                try:
                    await asyncio.to_thread(reader.check)
                except CorruptBlobError:
                    self.distrust(digest)
                    raise
                self.remember(digest, reader.identity, reader.size)
            _check_size(digest, reader.size, size)
        except BaseException:
            reader.close()
            raise
        return VerifiedBlob(reader, start, end, run=self)

    def _trusts(self, digest: Digest, identity: BlobIdentity | None) -> bool:
        """Whether ``identity`` is that of the file this run verified for ``digest``."""
        known = self._verified.get(digest)
        return known is not None and known.identity is not None and identity == known.identity

    def distrust(self, digest: Digest) -> None:
        """``digest`` turned out corrupt: no file of it is trusted for a part any more.

        Its size stays known, so (as before this rule) ``verify`` does not rehash it at every
        request: a whole read is rehashed and cut off anyway, a part is rehashed first.
        """
        known = self._verified.get(digest)
        if known is not None:
            self._verified[digest] = _Verified(None, known.size)

    def remember(self, digest: Digest, identity: BlobIdentity | None, size: int) -> _Verified:
        """Note that the file ``identity`` hashed right: trusted later, unless it is racy."""
        if identity is not None and time.time_ns() - identity.ctime_ns < RACY_NS:
            identity = None
        known = self._verified[digest] = _Verified(identity, size)
        return known


def _check_size(digest: Digest, actual: int, size: int) -> None:
    if actual != size:
        raise WrongSizeError(
            f"{digest}: the store holds {actual} bytes, the lock says size = {size} — "
            "the lock was edited by hand? Record it again, or check it with "
            "`fetchproxy lock verify`"
        )

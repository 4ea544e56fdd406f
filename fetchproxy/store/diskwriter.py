"""``DiskBlobWriter``: how ``DiskStore`` writes a blob (see :mod:`fetchproxy.store.disk`).

Stream into an exclusive temp file in ``<root>/tmp/`` while hashing (past the first MiB,
where the file system allows it, a large body bypasses the page cache: ``O_DIRECT`` writes of
1 MiB batches from a worker thread, :mod:`fetchproxy.store.direct`; otherwise it is flushed,
and dropped from the page cache, in the background as it arrives); on commit ``fsync`` it,
make it read-only (0o444), hard-link it to its final name — which fails if the blob already
exists, so an existing blob is never rewritten, only its mtime refreshed for garbage
collection — remove the temp name and ``fsync`` the directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.digest import Digest
from fetchproxy.files import fsync_dir
from fetchproxy.store.base import BlobWriter
from fetchproxy.store.direct import ALIGN, DIRECT_BATCH, DirectWrites, set_direct
from fetchproxy.store.errors import store_error
from fetchproxy.store.fileops import DIR_MODE
from fetchproxy.store.layout import TEMP_SUFFIX, temp_prefix

if TYPE_CHECKING:
    from fetchproxy.store.disk import DiskStore

BLOB_MODE = 0o444
# link(2) errors meaning "this file system has no hard links": fall back to rename.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK})


def touch(blob: Path) -> bool:
    """Refresh an existing blob's mtime, the sign of use garbage collection honours.

    ``False`` if the blob vanished meanwhile. A blob someone else owns (a shared
    store) cannot be touched; it is kept as it is.
    """
    try:
        os.utime(blob, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except PermissionError:
        pass
    return True


def ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, making each new entry durable."""
    if path.is_dir():
        return
    ensure_dir(path.parent)
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    fsync_dir(path.parent)


class DiskBlobWriter(BlobWriter):
    """Writes into an exclusive temp file; see the module docstring for the protocol.

    The first ``DIRECT_BATCH`` bytes go through the page cache. Past them, with
    ``store.direct`` and a file system that takes ``O_DIRECT``, the rest is
    hashed and written direct by a thread (``DirectWrites``), so the caller
    only copies. Otherwise large blobs are flushed to disk in the background
    while they stream in (every ``store.flush_every`` bytes). Either way
    ``commit()``'s final ``fsync`` is short.
    """

    def __init__(self, store: DiskStore) -> None:
        super().__init__()
        self._store = store
        self._fd = -1
        self._written = 0
        self._unflushed = 0
        self._flusher: threading.Thread | None = None
        self._flush_error: OSError | None = None
        self._direct: DirectWrites | None = None
        self._may_go_direct = store.direct
        try:
            ensure_dir(store.temp_dir)
            self._fd, name = tempfile.mkstemp(
                prefix=temp_prefix(os.getpid()), suffix=TEMP_SUFFIX, dir=store.temp_dir
            )
        except OSError as exc:
            self._state = "aborted"
            raise store_error(f"create a temp file in {store.temp_dir}", exc) from exc
        self.temp_path = Path(name)

    @property
    def direct(self) -> bool:
        """Whether the bytes past the first ``DIRECT_BATCH`` bypass the page cache (until the
        writer commits or aborts)."""
        return self._direct is not None

    def _hash(self, chunk: bytes) -> None:
        if self._direct is None:  # else the write thread hashes
            super()._hash(chunk)

    def _digest(self) -> Digest:
        if self._direct is not None:
            direct, self._direct = self._direct, None
            try:
                direct.finish()
            except OSError as exc:
                raise store_error(f"write to {self.temp_path}", exc) from exc
        return super()._digest()

    def _write(self, chunk: bytes) -> None:
        try:
            if self._may_go_direct and self._written >= DIRECT_BATCH:
                self._go_direct()
            if self._direct is not None:
                self._direct.write(chunk)
            else:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise store_error(f"write to {self.temp_path}", exc) from exc
        self._written += len(chunk)
        if self._direct is None:
            self._flush_in_background(len(chunk))

    def _go_direct(self) -> None:
        """Write from here on with ``O_DIRECT``, if the file system takes it.

        Direct writes start at a block boundary, so the batch starts with the
        last partial block, read back from the page cache and written again.
        """
        self._may_go_direct = False
        start = self._written - self._written % ALIGN
        head = os.pread(self._fd, self._written - start, start)
        if len(head) != self._written - start:
            message = (
                f"the temp file gave back {len(head)} of its last {self._written - start} bytes"
            )
            raise OSError(errno.EIO, message)
        if not set_direct(self._fd, on=True):
            return
        self._direct = DirectWrites(self._fd, start, self._hasher, hash_from=len(head))
        self._direct.write(head)

    def _flush_in_background(self, new: int) -> None:
        flush_every = self._store.flush_every
        if flush_every is None:
            return
        self._unflushed += new
        if self._unflushed >= flush_every and not self._flushing():
            self._unflushed = 0
            self._flusher = threading.Thread(
                target=self._flush,
                args=(self._fd, self._written),
                name="fetchproxy-store-flush",
                daemon=True,
            )
            self._flusher.start()

    def _flushing(self) -> bool:
        return self._flusher is not None and self._flusher.is_alive()

    def _flush(self, fd: int, written: int) -> None:
        """Make the first ``written`` bytes durable, then (maybe) drop them from the cache."""
        try:
            os.fdatasync(fd)
        except OSError as exc:
            self._flush_error = exc
            return
        if self._store.drop_flushed:
            with contextlib.suppress(OSError):  # only advice: nothing is lost if it fails
                os.posix_fadvise(fd, 0, written, os.POSIX_FADV_DONTNEED)

    def _join_flusher(self) -> None:
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None

    def _publish(self, digest: Digest) -> None:
        target = self._store.blob_path(digest)
        try:
            self._join_flusher()
            if self._flush_error is not None:
                raise self._flush_error
            if target.exists() and touch(target):
                # The store has these bytes already (a re-recorded body): keep that blob, made
                # fresh for gc by the touch, and spare the temp file its fsync.
                self._discard()
                return
            os.fsync(self._fd)
            os.fchmod(self._fd, BLOB_MODE)
            fd, self._fd = self._fd, -1
            os.close(fd)
            ensure_dir(target.parent)
            if self._link(target):
                fsync_dir(target.parent)
        except OSError as exc:
            raise store_error(f"store blob {digest} at {target}", exc) from exc

    def _link(self, target: Path) -> bool:
        """Give the temp file its final name unless taken; whether this writer did.

        A blob that already exists is kept and touched instead (see ``_touch``).
        """
        for _attempt in range(3):
            try:
                os.link(self.temp_path, target)
            except FileExistsError:
                if touch(target):
                    linked = False
                    break
                # removed between the link and the touch (a gc): try to publish ours
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                linked = not (target.exists() and touch(target))
                if linked:
                    self.temp_path.replace(target)
                break
            else:
                linked = True
                break
        else:
            raise OSError(errno.EEXIST, "the blob keeps appearing and vanishing", str(target))
        self.temp_path.unlink(missing_ok=True)
        return linked

    def _discard(self) -> None:
        self._join_flusher()
        self._close()
        self.temp_path.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._direct is not None:
            direct, self._direct = self._direct, None
            direct.close()
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)

    def _target_path(self, digest: Digest) -> Path:
        return self._store.blob_path(digest)

"""``DiskStore``: blobs as read-only files under ``<root>/blake3/<2 hex>/<62 hex>``.

Write protocol: stream into an exclusive temp file in ``<root>/tmp/`` while
hashing (past the first MiB, where the file system allows it, a large body
bypasses the page cache: ``O_DIRECT`` writes of 1 MiB batches from a worker
thread; otherwise it is flushed, and dropped from the page cache, in the
background as it arrives); on commit ``fsync`` it, make it read-only (0o444),
hard-link it to its final name — which fails if the blob already exists, so an
existing blob is never rewritten, only its mtime refreshed for garbage
collection — remove the temp name and ``fsync`` the directory. Readers and
listings never look in ``tmp/``, so a crash leaves at worst a temp file for
garbage collection.

Removal protocol (``prune``): a blob is never unlinked in place. It is renamed
into ``tmp/`` under a name that says which blob it is, and its mtime read again:
if a writer refreshed it meanwhile (it found the blob and touched it instead of
publishing its own copy), it is linked back; a writer that looks after the rename
finds the name free and publishes its own copy. ``restore_pruned`` puts back what
an interrupted prune left aside. Repair (``quarantine``) renames a blob to a
private name in ``corrupt/``, checks it there once more, and puts it back if it
is intact after all, else links it to ``corrupt/blake3-<hex>[-N]``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.digest import ALGORITHM, Digest
from fetchproxy.files import fsync_dir, probe_writable
from fetchproxy.store.base import (
    BlobIdentity,
    BlobReader,
    BlobWriter,
    MissingBlobError,
    NotRegularBlobError,
    Quarantined,
    Store,
    StoreError,
)
from fetchproxy.store.direct import ALIGN, DIRECT_BATCH, DirectWrites, set_direct
from fetchproxy.store.fileops import (
    DIR_MODE,
    Directory,
    is_intact,
    kind_of,
    move_no_clobber,
    open_regular,
    put_back,
)
from fetchproxy.store.layout import (
    CORRUPT_DIR,
    TEMP_DIR,
    TEMP_SUFFIX,
    blob_relpath,
    default_store_path,
    digest_of_entry,
    digest_of_pruned,
    is_shard_name,
    is_temp_name,
    moving_name,
    pruned_name,
    quarantine_name,
    temp_prefix,
)

BLOB_MODE = 0o444
FLUSH_EVERY = 32 << 20
"""Start a background ``fdatasync`` after this many new bytes (see docs/store.md)."""
# link(2) errors meaning "this file system has no hard links": fall back to rename.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK})
_ELSEWHERE = "or pick another store with --store or FETCHPROXY_STORE"
_FIX_WRITE = f"free space or fix permissions there, {_ELSEWHERE}"
_FIX_READ = f"check the store's files and permissions, {_ELSEWHERE}"


@dataclass(frozen=True, kw_only=True)
class TempFile:
    """A temp file in the store: a write in progress or left by a crash."""

    path: Path
    mtime: float
    size: int


def store_error(action: str, exc: OSError, fix: str = _FIX_WRITE) -> StoreError:
    """``cannot ACTION: <why> (FILE) — FIX``: an OSError the store met, said for the user."""
    where = f" ({exc.filename})" if exc.filename else ""
    return StoreError(f"cannot {action}: {exc.strerror or exc}{where} — {fix}")


def _touch(blob: Path) -> bool:
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


def _ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, making each new entry durable."""
    if path.is_dir():
        return
    _ensure_dir(path.parent)
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    fsync_dir(path.parent)


class DiskStore(Store):
    """The store on disk. Safe for concurrent writers, threads and processes alike."""

    def __init__(
        self,
        root: Path,
        *,
        direct: bool = True,
        flush_every: int | None = FLUSH_EVERY,
        drop_flushed: bool = True,
    ) -> None:
        """``direct``, ``flush_every`` and ``drop_flushed`` tune how large blobs are written.

        With ``direct``, a blob's bytes past its first ``DIRECT_BATCH`` skip the
        page cache (``O_DIRECT``) if the file system allows it. Otherwise, every
        ``flush_every`` bytes (``None``: never) a writer starts a background
        ``fdatasync``; with ``drop_flushed`` the bytes it made durable then leave
        the page cache, so a body streamed once does not evict the build's files.
        docs/store.md has the measurements behind the defaults.
        """
        self.root = Path(root)
        self.direct = direct
        self.flush_every = flush_every
        self.drop_flushed = drop_flushed

    def __repr__(self) -> str:
        return f"DiskStore({str(self.root)!r})"

    def blob_path(self, digest: Digest) -> Path:
        return self.root.joinpath(blob_relpath(digest))

    @property
    def temp_dir(self) -> Path:
        """Where writers keep bytes until they commit."""
        return self.root / TEMP_DIR

    @property
    def quarantine_dir(self) -> Path:
        """Where ``quarantine`` keeps corrupt blobs for inspection."""
        return self.root / CORRUPT_DIR

    def writer(self) -> DiskBlobWriter:
        return DiskBlobWriter(self)

    def check_writable(self) -> None:
        """Make a temp file where writers do and remove it; ``StoreError`` saying why not."""
        try:
            _ensure_dir(self.temp_dir)
            probe_writable(self.temp_dir)
        except OSError as exc:
            raise store_error(f"create a temp file in {self.temp_dir}", exc) from exc

    def open(self, digest: Digest, *, chunk_size: int = 1 << 20) -> BlobReader:
        path = self.blob_path(digest)
        try:
            source, info = open_regular(path, digest)
        except StoreError:
            raise
        except OSError as exc:
            raise store_error(f"open blob {digest}", exc, _FIX_READ) from exc
        return BlobReader(
            source,
            digest=digest,
            size=info.st_size,
            path=path,
            chunk_size=chunk_size,
            identity=BlobIdentity.of(info),
            restat=lambda: BlobIdentity.of(os.fstat(source.fileno())),
        )

    def contains(self, digest: Digest) -> bool:
        """Whether anything holds the blob's name: a blob, or a corrupt one (see ``open``)."""
        try:
            self.blob_path(digest).lstat()
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def size_of(self, digest: Digest) -> int:
        path = self.blob_path(digest)
        try:
            info = path.lstat()
        except FileNotFoundError:
            raise MissingBlobError(digest, path) from None
        except OSError as exc:
            raise store_error(f"look up blob {digest}", exc, _FIX_READ) from exc
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularBlobError(expected=digest, kind=kind_of(info.st_mode), path=path)
        return info.st_size

    def digests(self) -> Iterator[Digest]:
        """Every name that holds a blob, a corrupt one (not a regular file) included.

        A shard (or ``blake3/``) that is a link is no directory of the store: not listed.
        """
        top = Directory.listing(self.root / ALGORITHM)
        if top is None:
            return
        with top:
            for shard_name in top.names():
                shard = top.child(shard_name) if is_shard_name(shard_name) else None
                if shard is None:
                    continue
                with shard:
                    names = shard.names()
                for name in names:
                    digest = digest_of_entry(shard_name, name)
                    if digest is not None:
                        yield digest

    def remove(self, digest: Digest) -> None:
        path = self.blob_path(digest)
        try:
            with Directory.open(path.parent) as shard:
                shard.unlink(path.name)
        except FileNotFoundError:
            raise MissingBlobError(digest, path) from None

    def prune(self, digest: Digest, *, older_than: float, dry_run: bool = False) -> int | None:
        """See ``Store.prune``. What holds the name is judged and removed itself, never what a
        link points to; a directory under a blob's name is left to ``quarantine``."""
        path = self.blob_path(digest)
        try:
            shard = Directory.open(path.parent)
        except FileNotFoundError:  # removed meanwhile (another gc): nothing to free
            return None
        with shard:
            try:
                info = shard.lstat(path.name)
            except FileNotFoundError:
                return None
            if stat.S_ISDIR(info.st_mode) or max(info.st_mtime, info.st_ctime) > older_than:
                return None
            if dry_run:
                return info.st_size
            aside = pruned_name(digest, os.getpid())
            with Directory.open(self.temp_dir, create=True) as tmp:
                try:
                    shard.rename(path.name, tmp, aside)
                    moved = tmp.lstat(aside)
                    # The rename set the ctime; only a writer's touch sets the mtime.
                    if moved.st_mtime > older_than:
                        put_back(tmp, aside, shard, path.name)
                        return None
                    tmp.unlink(aside)
                except FileNotFoundError:  # another gc removed it first, or put it back
                    return None
        return moved.st_size

    def restore_pruned(self) -> int:
        tmp = Directory.listing(self.temp_dir)
        if tmp is None:
            return 0
        restored = 0
        with tmp:
            for name in tmp.names():
                digest = digest_of_pruned(name)
                if digest is None:
                    continue
                path = self.blob_path(digest)
                path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
                with Directory.open(path.parent) as shard:
                    restored += put_back(tmp, name, shard, path.name)
        return restored

    def quarantine(self, digest: Digest) -> Quarantined | None:
        path = self.blob_path(digest)
        with Directory.open(self.quarantine_dir, create=True) as corrupt:
            try:
                shard = Directory.open(path.parent)
            except FileNotFoundError:
                return None
            private = moving_name(digest, os.getpid())
            with shard:
                try:
                    shard.rename(path.name, corrupt, private)
                except FileNotFoundError:  # removed meanwhile: nothing left to move
                    return None
                if is_intact(corrupt, private, digest):
                    with contextlib.suppress(FileExistsError):  # a writer published it again
                        corrupt.link(private, shard, path.name)
                    corrupt.unlink(private)
                    return None
            for attempt in itertools.count(1):
                name = quarantine_name(digest, attempt)
                if move_no_clobber(corrupt, private, name):
                    return Quarantined(digest=digest, name=name, path=corrupt.path / name)
        raise AssertionError("unreachable")

    def temp_files(self) -> list[TempFile]:
        """Temp files of writers in progress or crashed, oldest first.

        A live writer touches its file on every write, so anything older than a
        grace period is a leftover garbage collection may delete (``remove_temp``).
        Blobs a prune left aside are not listed: they are ``restore_pruned``'s. Each
        entry is judged by itself (a link by the link); directories and a ``tmp`` that
        is a link are not listed.
        """
        tmp = Directory.listing(self.temp_dir)
        if tmp is None:
            return []
        found = []
        with tmp:
            for name in tmp.names():
                if not is_temp_name(name) or digest_of_pruned(name) is not None:
                    continue
                try:
                    info = tmp.lstat(name)
                except FileNotFoundError:  # committed or aborted meanwhile
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    found.append(
                        TempFile(path=tmp.path / name, mtime=info.st_mtime, size=info.st_size)
                    )
        return sorted(found, key=lambda temp: (temp.mtime, temp.path))

    def remove_temp(self, temp: TempFile, *, older_than: float) -> bool:
        """Delete ``temp`` (from ``temp_files``) unless it was written after ``older_than``.

        Whether it was deleted: not when a writer wrote to it meanwhile, or it is gone.
        """
        name = temp.path.name
        if temp.path.parent != self.temp_dir or not is_temp_name(name):
            raise ValueError(f"{temp.path} is not a temp file of {self}")
        tmp = Directory.listing(self.temp_dir)
        if tmp is None:
            return False
        with tmp:
            try:
                info = tmp.lstat(name)
                if stat.S_ISDIR(info.st_mode) or info.st_mtime > older_than:
                    return False
                tmp.unlink(name)
            except FileNotFoundError:
                return False
        return True


def open_store(root: Path | str | None) -> DiskStore:
    """The store at ``root`` (``--store``, an option); None or empty: the default one."""
    return DiskStore(Path(root) if root else default_store_path())


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
            _ensure_dir(store.temp_dir)
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
            if target.exists() and _touch(target):
                # The store has these bytes already (a re-recorded body): keep that blob, made
                # fresh for gc by the touch, and spare the temp file its fsync.
                self._discard()
                return
            os.fsync(self._fd)
            os.fchmod(self._fd, BLOB_MODE)
            fd, self._fd = self._fd, -1
            os.close(fd)
            _ensure_dir(target.parent)
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
                if _touch(target):
                    linked = False
                    break
                # removed between the link and the touch (a gc): try to publish ours
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                linked = not (target.exists() and _touch(target))
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

"""``DiskStore``: blobs as read-only files under ``<root>/blake3/<2 hex>/<62 hex>``.

Write protocol (``DiskBlobWriter``, :mod:`fetchproxy.store.diskwriter`): stream
into an exclusive temp file in ``<root>/tmp/`` while hashing; on commit ``fsync``
it, make it read-only, hard-link it to its final name (an existing blob is never
rewritten, only its mtime refreshed for garbage collection), remove the temp name
and ``fsync`` the directory. Readers and listings never look in ``tmp/``, so a
crash leaves at worst a temp file for garbage collection. Reading opens regular
files only (:mod:`fetchproxy.store.fileops`).

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
import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.digest import ALGORITHM, Digest
from fetchproxy.files import probe_writable
from fetchproxy.store.base import (
    BlobIdentity,
    BlobReader,
    MissingBlobError,
    NotRegularBlobError,
    Quarantined,
    Store,
    StoreError,
)
from fetchproxy.store.diskwriter import DiskBlobWriter, ensure_dir
from fetchproxy.store.errors import FIX_READ, store_error
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
    blob_relpath,
    default_store_path,
    digest_of_entry,
    digest_of_pruned,
    is_shard_name,
    is_temp_name,
    moving_name,
    pruned_name,
    quarantine_name,
)

__all__ = ["FLUSH_EVERY", "DiskBlobWriter", "DiskStore", "TempFile", "open_store", "store_error"]

FLUSH_EVERY = 32 << 20
"""Start a background ``fdatasync`` after this many new bytes (see docs/store.md)."""


@dataclass(frozen=True, kw_only=True)
class TempFile:
    """A temp file in the store: a write in progress or left by a crash."""

    path: Path
    mtime: float
    size: int


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
            ensure_dir(self.temp_dir)
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
            raise store_error(f"open blob {digest}", exc, FIX_READ) from exc
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
            raise store_error(f"look up blob {digest}", exc, FIX_READ) from exc
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

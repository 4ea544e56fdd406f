"""Store garbage collection: remove the blobs no kept lock uses, and stale temp files.

``fetchproxy store gc --keep-lock PATH...`` keeps every blob that one of the given locks — or
the journal of a record of that lock still running or interrupted — refers to. Everything
else is removed once it is older than a grace period (default one hour), by these rules:

- **Temp files** (``<store>/tmp/blob-*.tmp``) are removed when their mtime is older than the
  grace period. A live writer refreshes its temp file's mtime with every write, so only a write
  stalled for longer than the grace period can lose its file; its ``commit()`` then fails loudly
  (the record stops), it never publishes anything wrong.
- **Blobs** no kept lock refers to are removed when both their mtime and ctime are older than
  the grace period. Publishing a blob (link, chmod) sets its ctime, so a blob a live record just
  wrote is kept for the grace period even though no lock on disk names it yet, and so is a store
  just restored from a cache (the copy sets ctime). A record longer than the grace period is
  covered through its journal when its lock is among ``--keep-lock``; pass the locks of records
  that may be running, or a longer ``--grace``.
- **A blob is never unlinked in place**: the store's ``prune`` takes it aside and puts it back
  if a writer touched it meanwhile (a live record that fetched the same bytes again), so a blob
  in use at the moment of removal stays (see :mod:`fetchproxy.store.disk`). A gc killed half-way
  leaves such blobs aside; the next gc has the store put them back before it starts
  (``restore_pruned``, which sets their ctime: they are kept for one more grace period).
- Shard directories are never removed (a writer may be about to link into one), nor anything
  else in the store (``corrupt/`` belongs to ``fetchproxy store verify --repair``).

This module decides what goes; the store alone renames and unlinks its files.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fetchproxy.digest import Digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.lock.file import load_lock
from fetchproxy.lock.journal import journal_path, read_journal
from fetchproxy.store import DiskStore, TempFile
from fetchproxy.store.disk import store_error
from fetchproxy.text import counted, human_bytes

DEFAULT_GRACE: Final = 3600.0
"""Seconds a blob or temp file is kept after it was last written (``--grace``)."""


class KeepLockError(FetchproxyError, FileNotFoundError):
    """A lock given to ``--keep-lock`` does not exist."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RemovedBlob:
    """A blob gc removed (or, in a dry run, would remove)."""

    digest: Digest
    size: int


@dataclass(frozen=True, kw_only=True, slots=True)
class GcReport:
    """What one garbage collection did."""

    store: Path
    dry_run: bool
    grace: float
    locks: int
    """How many locks were kept (journals not counted)."""
    removed_blobs: tuple[RemovedBlob, ...]
    removed_temp_files: tuple[TempFile, ...]
    kept_referenced: int
    """Blobs kept because a kept lock or journal refers to them."""
    kept_recent: int
    """Blobs no kept lock refers to, kept because they were written within the grace period."""
    kept_recent_temp_files: int

    @property
    def bytes_freed(self) -> int:
        return sum(b.size for b in self.removed_blobs) + sum(
            t.size for t in self.removed_temp_files
        )


def referenced_digests(lock_paths: Iterable[Path]) -> frozenset[Digest]:
    """Every blob the locks at ``lock_paths`` and their record journals (if any) refer to.

    A lock that cannot be read raises :class:`~fetchproxy.lockfile.LockFileError`: a typo in
    ``--keep-lock`` must stop gc, not make it remove everything.
    """
    digests: set[Digest] = set()
    for path in lock_paths:
        if not path.exists():
            raise KeepLockError(
                f"{path}: no such lock (--keep-lock) — nothing was removed; "
                "check the path: gc keeps only the blobs of locks it can read"
            )
        digests.update(load_lock(path, require_sorted=False).digests())
        journal = journal_path(path)
        if journal.exists():
            digests.update(fetch.digest for fetch in read_journal(journal))
    return frozenset(digests)


def collect_garbage(
    store: DiskStore,
    keep: Collection[Digest],
    *,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
    locks: int = 0,
    now: float | None = None,
) -> GcReport:
    """Remove what ``keep`` does not hold and the grace period no longer protects.

    ``now`` (default: the clock) only moves the cutoff, for tests; ``locks`` is reported.
    """
    if grace < 0:
        raise ValueError(f"the grace period cannot be negative, got {grace}")
    try:
        return _collect(store, keep, grace=grace, dry_run=dry_run, locks=locks, now=now)
    except OSError as exc:
        fix = "gc needs write access to the store"
        raise store_error(f"collect garbage in {store.root}", exc, fix) from exc


def _collect(
    store: DiskStore,
    keep: Collection[Digest],
    *,
    grace: float,
    dry_run: bool,
    locks: int,
    now: float | None,
) -> GcReport:
    cutoff = (time.time() if now is None else now) - grace
    if not dry_run:
        store.restore_pruned()
    removed_temps: list[TempFile] = []
    recent_temps = 0
    for temp in store.temp_files():
        if temp.mtime > cutoff or not (dry_run or store.remove_temp(temp, older_than=cutoff)):
            recent_temps += 1
            continue
        removed_temps.append(temp)
    removed: list[RemovedBlob] = []
    referenced = recent = 0
    for digest in store.digests():
        if digest in keep:
            referenced += 1
            continue
        size = store.prune(digest, older_than=cutoff, dry_run=dry_run)
        if size is None:
            recent += 1
        else:
            removed.append(RemovedBlob(digest=digest, size=size))
    return GcReport(
        store=store.root,
        dry_run=dry_run,
        grace=grace,
        locks=locks,
        removed_blobs=tuple(removed),
        removed_temp_files=tuple(removed_temps),
        kept_referenced=referenced,
        kept_recent=recent,
        kept_recent_temp_files=recent_temps,
    )


# ------------------------------------------------------------------------------------------ text


def duration_text(seconds: float) -> str:
    """``3600`` → ``1 h``, ``5400`` → ``1.5 h``, ``90`` → ``1.5 min``, ``20`` → ``20 s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{seconds:.0f} s"


def render_gc(report: GcReport, *, now: float | None = None) -> str:
    """What ``fetchproxy store gc`` prints: one line per removal, then a summary line."""
    now = time.time() if now is None else now
    verb = "would remove" if report.dry_run else "removed"
    dry = " (dry run: nothing removed)" if report.dry_run else ""
    lines = [f"fetchproxy store gc: {report.store}{dry}"]
    lines.extend(
        f"{verb} temp file {temp.path} ({human_bytes(temp.size)}, "
        f"last written {duration_text(max(0.0, now - temp.mtime))} ago)"
        for temp in report.removed_temp_files
    )
    lines.extend(
        f"{verb} blob {blob.digest} ({human_bytes(blob.size)})" for blob in report.removed_blobs
    )
    what = (
        f"{counted(len(report.removed_blobs), 'blob', 'blobs')} and "
        f"{counted(len(report.removed_temp_files), 'temp file', 'temp files')}"
    )
    freed = f"{'would free' if report.dry_run else 'freed'} {human_bytes(report.bytes_freed)}"
    kept = (
        f"kept {counted(report.kept_referenced, 'blob', 'blobs')} used by "
        f"{counted(report.locks, 'lock', 'locks')}"
    )
    if report.kept_recent or report.kept_recent_temp_files:
        kept += (
            f", and {counted(report.kept_recent, 'blob', 'blobs')} and "
            f"{counted(report.kept_recent_temp_files, 'temp file', 'temp files')} "
            f"newer than the grace period ({duration_text(report.grace)})"
        )
    return "\n".join([*lines, f"summary: {verb} {what}, {freed}; {kept}"]) + "\n"

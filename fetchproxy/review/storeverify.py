"""``fetchproxy store verify``: rehash every blob in the store; ``--repair`` moves bad ones aside.

A blob is bad when its bytes no longer hash to its name (a failing disk, a hand edit), when its
name holds no regular file (a FIFO, a device, a directory, a symbolic link: the store never reads
those), or when it cannot be read at all (an I/O error). Replay already refuses to serve such a
blob; this finds them all before a build does. Repair moves each bad blob to
``<store>/corrupt/blake3-<hex>`` (``-2``, ``-3``… when that name is taken): outside ``blake3/``,
so nothing reads it as a blob any more, and the next record fetches the body again. What was
there is kept for inspection (a link as the link itself); delete ``corrupt/`` when done.

Moving is the store's ``quarantine``, safe while records run: the blob is first taken away from
its name (atomically, whatever file holds the name at that moment) and hashed again; if it turns
out intact — a writer published a good copy after a gc removed the bad one — it is put back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fetchproxy.digest import Digest
from fetchproxy.store import (
    CorruptBlobError,
    DiskStore,
    MissingBlobError,
    NotRegularBlobError,
    StoreError,
)
from fetchproxy.store.disk import store_error
from fetchproxy.store.layout import CORRUPT_DIR
from fetchproxy.text import counted, human_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class BadBlob:
    """A blob that does not hash to its name or cannot be read."""

    digest: Digest
    path: Path
    actual: Digest | None
    """What its bytes hash to; None when they could not be read."""
    reason: str
    """``its bytes hash to blake3:…``, ``not a regular file (a FIFO)``, ``unreadable: <error>``."""
    moved_to: Path | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreVerifyReport:
    store: Path
    checked: int
    bytes_checked: int
    bad: tuple[BadBlob, ...]
    repair: bool

    @property
    def clean(self) -> bool:
        return not self.bad


def verify_store(store: DiskStore, *, repair: bool = False) -> StoreVerifyReport:
    """Rehash every blob of ``store``; with ``repair``, move the bad ones aside."""
    checked = size = 0
    bad: list[BadBlob] = []
    for digest in store.digests():
        found = _check(store, digest)
        if found is None:
            continue  # removed meanwhile (gc)
        checked += 1
        size += found[0]
        problem = found[1]
        if problem is not None and repair:
            aside = f"move {problem.path} aside into {store.quarantine_dir}"
            try:
                problem = _move_aside(store, problem)
            except OSError as exc:
                fix = "--repair needs write access to the store"
                raise store_error(aside, exc, fix) from exc
        if problem is not None:
            bad.append(problem)
    return StoreVerifyReport(
        store=store.root, checked=checked, bytes_checked=size, bad=tuple(bad), repair=repair
    )


def _check(store: DiskStore, digest: Digest) -> tuple[int, BadBlob | None] | None:
    """The blob's size and what is wrong with it; None when it no longer exists."""
    path = store.blob_path(digest)
    try:
        size = store.size_of(digest)
        store.verify(digest)
    except MissingBlobError:
        return None
    except NotRegularBlobError as exc:
        return 0, BadBlob(digest=digest, path=path, actual=None, reason=exc.problem)
    except CorruptBlobError as exc:
        reason = f"its bytes hash to {exc.actual}"
        return size, BadBlob(digest=digest, path=path, actual=exc.actual, reason=reason)
    except StoreError as exc:
        cause = exc.__cause__
        error = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(exc)
        return size, BadBlob(digest=digest, path=path, actual=None, reason=f"unreadable: {error}")
    return size, None


def _move_aside(store: DiskStore, bad: BadBlob) -> BadBlob | None:
    """Move ``bad`` into ``corrupt/``; None if the file now at its name is intact after all."""
    moved = store.quarantine(bad.digest)
    if moved is None:
        return None
    return BadBlob(
        digest=bad.digest, path=bad.path, actual=bad.actual, reason=bad.reason, moved_to=moved.path
    )


# ------------------------------------------------------------------------------------------ text


def render_verify(report: StoreVerifyReport) -> str:
    """What ``fetchproxy store verify`` prints: one line per bad blob, then a summary line."""
    lines = [f"fetchproxy store verify: {report.store}"]
    for bad in report.bad:
        lines.append(f"corrupt blob {bad.digest} at {bad.path}: {bad.reason}")
        if bad.moved_to is not None:
            lines.append(f"  moved to {bad.moved_to}")
    checked = (
        f"summary: {counted(report.checked, 'blob', 'blobs')} checked "
        f"({human_bytes(report.bytes_checked)})"
    )
    count = len(report.bad)
    if not count:
        return "\n".join([*lines, f"{checked}, all intact"]) + "\n"
    if report.repair:
        advice = (
            f"moved aside to {report.store / CORRUPT_DIR}; record again to fetch "
            f"{'its body' if count == 1 else 'their bodies'}"
        )
    else:
        advice = (
            f"move {'it' if count == 1 else 'them'} aside with "
            "`fetchproxy store verify --repair`, then record again"
        )
    return "\n".join([*lines, f"{checked}, {count} corrupt — {advice}"]) + "\n"

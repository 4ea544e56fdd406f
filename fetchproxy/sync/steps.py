"""The remote store's steps in a record or replay run; cheap to import.

- :class:`RemoteUpload`, record's upload step (the book's
  :class:`~fetchproxy.record.book.BlobUpload`): before the build, :meth:`~RemoteUpload.check`
  that these credentials may upload (a refusal stops the run before anything changed); before
  the lock is written, :meth:`~RemoteUpload.upload` every blob it names, so a lock never names
  a blob the remote lacks. A failure raises; the book then keeps the lock as it was.
- :func:`replay_fill`, replay's step before the lock's bodies are checked: every blob the
  lock names that the local store lacks is pulled (verified, published atomically); one that
  cannot be is :class:`ReplayFillError` (exit status 2) naming the entries, before anything
  listens and before the build starts.

The transfer code (and botocore with it) is imported only when a blob must move: a replay
whose blobs are all local pays nothing for a configured remote.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.errors import FetchproxyError
from fetchproxy.lock.model import Lock
from fetchproxy.store import Store, StoreError
from fetchproxy.store.remote_url import RemoteURL

if TYPE_CHECKING:
    from fetchproxy.store.remote import RemoteStore


class ReplayFillError(FetchproxyError, FileNotFoundError):
    """Blobs the lock names are neither in the local store nor obtainable from the remote."""


class RemoteStartError(FetchproxyError, PermissionError):
    """The remote store will not take this record's uploads: nothing was started."""


def _remote(url: RemoteURL) -> RemoteStore:
    from fetchproxy.store.remote import RemoteStore  # noqa: PLC0415 -- only when blobs move

    return RemoteStore(url)


class RemoteUpload:
    """Record's upload step: see the module docstring."""

    def __init__(self, url: RemoteURL, store: Store) -> None:
        self.url = url
        self.store = store

    def check(self) -> None:
        """``RemoteStartError`` unless the remote takes uploads from these credentials."""
        from fetchproxy.store.remote_errors import RemoteStoreError  # noqa: PLC0415

        try:
            _remote(self.url).check_writable()
        except RemoteStoreError as exc:
            raise RemoteStartError(
                f"record cannot upload to the remote store {self.url}, so nothing was started: "
                f"{exc} (to record without it, keeping the blobs local, give --no-remote; "
                "push them later with `fetchproxy store push`)"
            ) from None

    def upload(self, lock: Lock, lock_path: Path) -> str:
        """Upload every blob ``lock`` names; the summary line. ``StoreError`` if any failed:
        its first line says how many, the next ones which entries and why."""
        from fetchproxy.sync.progress import ProgressLine, summary_text  # noqa: PLC0415
        from fetchproxy.sync.remote import LockBlobs, LockBlobsError, push_blobs  # noqa: PLC0415

        blobs = LockBlobs.of([(lock_path, lock)])
        remote = _remote(self.url)
        try:
            report = push_blobs(remote, self.store, blobs, on_progress=ProgressLine("upload"))
        except LockBlobsError as exc:
            headline = (
                f"{exc.failed} of {exc.total} blobs could not be uploaded to {self.url}, "
                "so the lock would name blobs the remote lacks"
            )
            hint = (
                f"Once the remote takes them: `fetchproxy lock recover --lock {lock_path}`, "
                f"then `fetchproxy store push --lock {lock_path}`."
            )
            raise StoreError("\n".join([headline, *exc.lines(), hint])) from None
        return summary_text(
            "uploaded",
            moved=len(report.moved),
            bytes_moved=report.bytes_moved,
            seconds=report.seconds,
            where=f"to {self.url}",
            present=f"{len(report.present)} already there" if report.present else "",
        )


def replay_fill(url: RemoteURL, store: Store, lock_path: Path) -> Callable[[Lock], None]:
    """Replay's step: pull what ``lock`` names and the local store lacks (module docstring)."""

    def fill(lock: Lock) -> None:
        if all(store.contains(digest) for digest in lock.digests()):
            return
        from fetchproxy.sync.progress import ProgressLine, summary_text  # noqa: PLC0415
        from fetchproxy.sync.remote import LockBlobs, LockBlobsError, pull_blobs  # noqa: PLC0415

        blobs = LockBlobs.of([(lock_path, lock)])
        try:
            report = pull_blobs(_remote(url), store, blobs, on_progress=ProgressLine("pull"))
        except LockBlobsError as exc:
            root = getattr(store, "root", "(in memory)")
            headline = (
                f"{lock_path}: {exc.failed} of {exc.total} blobs the lock names are not in the "
                f"store {root} and could not be pulled from {url}; the build was not started:"
            )
            raise ReplayFillError(exc.text(headline)) from None
        print(
            summary_text(
                "pulled",
                moved=len(report.moved),
                bytes_moved=report.bytes_moved,
                seconds=report.seconds,
                where=f"from {url}",
                present=f"{len(report.present)} in the store already" if report.present else "",
            ),
            file=sys.stderr,
        )

    return fill

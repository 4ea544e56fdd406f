"""A lock's blobs between the local store and the remote store, named by the lock's entries.

The remote store itself (``fetchproxy.store.remote``) moves digests. This module moves what
locks name, and speaks of what failed in the lock's words — the request each blob answers —
so a message says ``GET https://files.example.org/foo-1.0.tar.gz (blake3:…)``, not a bare
digest:

- :class:`LockBlobs`: the blobs some locks name, their sizes, and the requests they answer;
- :func:`push_blobs`: every blob the local store holds is uploaded (create-only); a blob it
  lacks is looked up in the remote, and one that is in neither is a failure, so after a push
  that did not raise the remote holds every blob the locks name;
- :func:`pull_blobs`: every blob the local store lacks is downloaded, verified while it
  streams and published only on match; with nothing missing no client is made;
- both raise one :class:`LockBlobsError` naming every entry that failed, why, and what to do.

Larger blobs go first, so that a long transfer is not left running alone at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.digest import Digest, hex_of
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import Lock
from fetchproxy.store import Store, StoreError
from fetchproxy.store.remote import RemoteStore, RemoteTransferError, TransferReport
from fetchproxy.store.remote_errors import (
    RemoteMissingError,
    RemoteUnavailableError,
)
from fetchproxy.store.transfer import ProgressCallback
from fetchproxy.text import counted

SHOWN = 10
"""Failed entries named one by one in a message; the rest are counted."""


@dataclass(frozen=True, kw_only=True)
class LockBlobs:
    """The blobs some locks name: sizes, and the requests each answers (for messages)."""

    sizes: Mapping[Digest, int]
    requests: Mapping[Digest, tuple[RequestKey, ...]]
    locks: tuple[Path, ...]

    @classmethod
    def of(cls, locks: Iterable[tuple[Path, Lock]]) -> LockBlobs:
        """The blobs of ``locks`` (path, lock), each once."""
        sizes: dict[Digest, int] = {}
        requests: dict[Digest, list[RequestKey]] = {}
        paths: list[Path] = []
        for path, lock in locks:
            paths.append(path)
            for fetch in lock.fetches:
                sizes[fetch.digest] = fetch.size
                requests.setdefault(fetch.digest, []).append(fetch.key)
        return cls(
            sizes=sizes,
            requests={digest: tuple(keys) for digest, keys in requests.items()},
            locks=tuple(paths),
        )

    @property
    def digests(self) -> list[Digest]:
        """Every blob, largest first (ties in digest order)."""
        return sorted(self.sizes, key=lambda digest: (-self.sizes[digest], digest))

    @property
    def total_size(self) -> int:
        return sum(self.sizes.values())

    def entry(self, digest: Digest, *, why: str = "") -> str:
        """``GET https://… (blake3:…)``, and how many more entries share the blob; the digest
        is left out when ``why`` names its object already."""
        keys = self.requests.get(digest, ())
        if not keys:
            return digest
        first = keys[0]
        more = f" and {counted(len(keys) - 1, 'other entry', 'other entries')}" if keys[1:] else ""
        shown = "" if hex_of(digest) in why else f" ({digest})"
        return f"{first.method} {first.url}{more}{shown}"

    def lock_options(self) -> str:
        """``--lock A --lock B``: the locks, as the command that fixes things takes them."""
        return " ".join(f"--lock {path}" for path in self.locks)


class LockBlobsError(FetchproxyError):
    """Blobs some locks name could not be moved; ``str()`` names each entry and why.

    ``headline`` is the first line; :meth:`lines` the entries; ``hint`` what to do. A caller
    with more to say (replay: "the build was not started") builds its own first line from
    ``failed`` and ``total`` and keeps the rest.
    """

    def __init__(
        self,
        headline: str,
        *,
        failures: tuple[tuple[Digest, str], ...],
        not_attempted: tuple[Digest, ...],
        hint: str | None,
        blobs: LockBlobs,
        total: int,
        report: TransferReport | None,
    ) -> None:
        self.headline = headline
        self.failures = failures
        self.not_attempted = not_attempted
        self.hint = hint
        self.blobs = blobs
        self.total = total
        self.report = report
        super().__init__(self.text(headline))

    @property
    def failed(self) -> int:
        """How many blobs were not moved (failed, or never attempted after an error)."""
        return len(self.failures) + len(self.not_attempted)

    @property
    def digests(self) -> tuple[Digest, ...]:
        return tuple(digest for digest, _ in self.failures) + self.not_attempted

    def lines(self) -> list[str]:
        """One line per failed entry (at most :data:`SHOWN`), then the count of the rest."""
        lines = [f"  {self.blobs.entry(d, why=why)}: {why}" for d, why in self.failures[:SHOWN]]
        if len(self.failures) > SHOWN:
            lines.append(f"  … and {len(self.failures) - SHOWN} more like these")
        if self.not_attempted:
            first = self.blobs.entry(self.not_attempted[0])
            rest = len(self.not_attempted) - 1
            more = f" and {counted(rest, 'other', 'others')}" if rest else ""
            lines.append(
                f"  {len(self.not_attempted)} not attempted after that error: {first}{more}"
            )
        return lines

    def text(self, headline: str) -> str:
        """The whole message under another first line."""
        return "\n".join([headline, *self.lines(), *([self.hint] if self.hint else [])])


# ------------------------------------------------------------------------------------- push


def push_blobs(
    remote: RemoteStore,
    store: Store,
    blobs: LockBlobs,
    *,
    on_progress: ProgressCallback | None = None,
) -> TransferReport:
    """Make the remote hold every blob of ``blobs`` (see the module docstring)."""
    wanted = blobs.digests
    local = [digest for digest in wanted if store.contains(digest)]
    elsewhere = [digest for digest in wanted if digest not in frozenset(local)]
    failures: list[tuple[Digest, str]] = []
    hint: str | None = None
    if elsewhere:
        try:
            absent = remote.absent(elsewhere)
        except RemoteTransferError as exc:
            raise _error("push", "to", remote, blobs, exc, report=None) from None
        if absent:
            failures += [
                (digest, f"not in the local store {_root(store)}, nor in {remote.url}")
                for digest in absent
            ]
            hint = (
                "Pull them where the lock was recorded and push from there (`fetchproxy store "
                f"push {blobs.lock_options()}`), or record again."
            )
    try:
        report = remote.push(local, store, on_progress=on_progress)
    except RemoteTransferError as exc:
        raise _error("push", "to", remote, blobs, exc, report=exc.report, more=failures) from None
    if failures:
        raise LockBlobsError(
            _headline("push", "to", remote, len(failures), len(wanted)),
            failures=tuple(failures),
            not_attempted=(),
            hint=hint,
            blobs=blobs,
            total=len(wanted),
            report=report,
        )
    return TransferReport(
        moved=report.moved,
        present=report.present + tuple(elsewhere),
        bytes_moved=report.bytes_moved,
        seconds=report.seconds,
    )


# ------------------------------------------------------------------------------------- pull


def missing_from(store: Store, blobs: LockBlobs) -> list[Digest]:
    """The blobs of ``blobs`` the local store lacks, largest first."""
    return [digest for digest in blobs.digests if not store.contains(digest)]


def pull_blobs(
    remote: RemoteStore,
    store: Store,
    blobs: LockBlobs,
    *,
    on_progress: ProgressCallback | None = None,
) -> TransferReport:
    """Bring every blob of ``blobs`` the local store lacks, verified (module docstring)."""
    try:
        return remote.pull(blobs.digests, store, sizes=blobs.sizes, on_progress=on_progress)
    except RemoteTransferError as exc:
        raise _error("pull", "from", remote, blobs, exc, report=exc.report) from None


# ------------------------------------------------------------------------------------- errors


def _root(store: Store) -> str:
    return str(getattr(store, "root", "(in memory)"))


def _headline(verb: str, preposition: str, remote: RemoteStore, failed: int, total: int) -> str:
    blobs = counted(total, "blob", "blobs")
    return f"cannot {verb} {failed} of {blobs} {preposition} {remote.url}:"


def _error(
    verb: str,
    preposition: str,
    remote: RemoteStore,
    blobs: LockBlobs,
    exc: RemoteTransferError,
    *,
    report: TransferReport | None,
    more: Iterable[tuple[Digest, str]] = (),
) -> LockBlobsError:
    """The remote's transfer error in the lock's words."""
    failures = (*more, *((digest, str(error)) for digest, error in exc.failures))
    first: StoreError | None = exc.failures[0][1] if exc.failures else None
    hint: str | None = None
    if isinstance(first, RemoteMissingError):
        hint = (
            "Push them from a machine that has them (`fetchproxy store push "
            f"{blobs.lock_options()}`), or record again."
        )
    elif isinstance(first, RemoteUnavailableError):
        hint = f"Run it again once the store is reachable; what was {verb}ed is kept."
    if verb == "pull":
        hint = (hint + " " if hint else "") + ("Nothing that failed was put in the local store.")
    total = len(failures) + len(exc.not_attempted) + len(exc.report.moved + exc.report.present)
    return LockBlobsError(
        _headline(verb, preposition, remote, len(failures) + len(exc.not_attempted), total),
        failures=failures,
        not_attempted=exc.not_attempted,
        hint=hint,
        blobs=blobs,
        total=total,
        report=report,
    )

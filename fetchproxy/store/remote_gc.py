"""Which objects of a remote garbage collection may delete (pure: no I/O, no clock).

``plan_remote_gc(objects, keep=..., now=..., grace=...)`` decides; ``RemoteStore.delete``
performs. The rules:

- Never by age alone. The digests to keep come from the locks the user names (every branch
  and release still to be replayed); an empty set — no lock, or locks that name nothing — is
  refused, since it would make age the only rule.
- An object a kept lock names is kept, however old.
- An object no kept lock names is deleted only once it is older than ``grace``: a record may
  have pushed it for a lock not committed yet (records push every blob before they write the
  lock), so the grace period must be longer than the longest record job plus the time its
  lock takes to reach a branch the gc job reads.
- A key under the prefix that names no blob (not ``PREFIX/blake3/<64 hex>``) is never deleted;
  it is reported, so a person can look.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from fetchproxy.digest import Digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.store.remote import RemoteObject


class RemoteGcRefused(FetchproxyError, ValueError):  # noqa: N818 -- a refusal, not a failure
    """The request would delete by age alone, or with a negative grace period."""


@dataclass(frozen=True, kw_only=True)
class RemoteGcPlan:
    """What garbage collection would do with a remote's objects."""

    delete: tuple[RemoteObject, ...]
    needed: int
    young: tuple[RemoteObject, ...]
    foreign: tuple[RemoteObject, ...]
    absent: tuple[Digest, ...]

    @property
    def bytes_freed(self) -> int:
        """The bytes the deletions free."""
        return sum(obj.size for obj in self.delete)


def plan_remote_gc(
    objects: Iterable[RemoteObject],
    *,
    keep: Collection[Digest],
    now: float,
    grace: float,
) -> RemoteGcPlan:
    """Split ``objects`` into delete / needed / young / foreign (see the module docstring).

    ``now`` and each object's ``last_modified_epoch`` are seconds since the epoch; ``grace`` is
    seconds. ``absent`` lists kept digests the remote does not hold (locks naming blobs that
    were never pushed): not gc's to fix, but worth saying.
    """
    if grace < 0:
        raise RemoteGcRefused(f"the grace period must not be negative, got {grace} s")
    if not keep:
        raise RemoteGcRefused(
            "no lock given names any blob: refusing to delete by age alone — name every lock "
            "still to be replayed (--keep-lock, once per lock)"
        )
    wanted = frozenset(keep)
    cutoff = now - grace
    delete: list[RemoteObject] = []
    young: list[RemoteObject] = []
    foreign: list[RemoteObject] = []
    seen: set[Digest] = set()
    needed = 0
    for obj in objects:
        if obj.digest is None:
            foreign.append(obj)
        elif obj.digest in wanted:
            needed += 1
            seen.add(obj.digest)
        elif obj.last_modified_epoch < cutoff:
            delete.append(obj)
        else:
            young.append(obj)
    return RemoteGcPlan(
        delete=tuple(delete),
        needed=needed,
        young=tuple(young),
        foreign=tuple(foreign),
        absent=tuple(sorted(wanted - seen)),
    )

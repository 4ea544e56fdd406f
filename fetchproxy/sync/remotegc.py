"""``fetchproxy store gc --remote``: the remote's objects no kept lock needs, once old enough.

The rules are :func:`fetchproxy.store.remote_gc.plan_remote_gc`'s (never by age alone; what a
kept lock names is kept however old; anything else only once older than the grace period;
keys that name no blob never). This module lists the objects, has the plan made, has the
remote delete what it says (``RemoteStore.delete``: 1,000 per request, blob keys only), and
says what it did.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from fetchproxy.digest import Digest
from fetchproxy.store.remote import RemoteStore
from fetchproxy.store.remote_gc import RemoteGcPlan, plan_remote_gc
from fetchproxy.text import counted, human_bytes

DEFAULT_REMOTE_GRACE = 7 * 86400.0
"""Seconds an object no kept lock names is kept after it was written (``--grace``): longer
than the longest record job plus the time its lock takes to reach a branch gc keeps."""
SHOWN = 20
"""Objects named one by one in the report; the rest are counted."""


@dataclass(frozen=True, kw_only=True)
class RemoteGcReport:
    plan: RemoteGcPlan
    dry_run: bool
    grace: float
    locks: int
    remote: str


def collect_remote_garbage(
    remote: RemoteStore,
    keep: Collection[Digest],
    *,
    grace: float = DEFAULT_REMOTE_GRACE,
    dry_run: bool = False,
    locks: int = 0,
    now: float | None = None,
) -> RemoteGcReport:
    """Delete what the plan says (nothing with ``dry_run``); ``RemoteGcRefused`` before any
    request when the plan would delete by age alone."""
    if not keep:  # refused before a single request, with the plan's own words
        plan_remote_gc((), keep=keep, now=0.0, grace=grace)
    objects = list(remote.list_objects())
    plan = plan_remote_gc(objects, keep=keep, now=time.time() if now is None else now, grace=grace)
    if not dry_run and plan.delete:
        remote.delete([obj.key for obj in plan.delete])
    return RemoteGcReport(
        plan=plan, dry_run=dry_run, grace=grace, locks=locks, remote=str(remote.url)
    )


def render_remote_gc(report: RemoteGcReport, *, duration: str) -> str:
    """What ``fetchproxy store gc --remote`` prints; ``duration``: the grace period, for people."""
    plan = report.plan
    verb = "would delete" if report.dry_run else "deleted"
    dry = " (dry run: nothing deleted)" if report.dry_run else ""
    lines = [f"fetchproxy store gc: {report.remote}{dry}"]
    lines += [f"{verb} {obj.key} ({human_bytes(obj.size)})" for obj in plan.delete[:SHOWN]]
    if len(plan.delete) > SHOWN:
        lines.append(f"… and {len(plan.delete) - SHOWN} more")
    lines += [
        f"kept {obj.key}: it names no blob (not PREFIX/blake3/<64 hex>); look at it yourself"
        for obj in plan.foreign[:SHOWN]
    ]
    if plan.absent:
        lines.append(
            f"note: {counted(len(plan.absent), 'blob', 'blobs')} the kept locks name "
            f"{'is' if len(plan.absent) == 1 else 'are'} not in the remote (e.g. "
            f"{plan.absent[0]}): push them with `fetchproxy store push`"
        )
    lines.append(
        f"summary: {verb} {counted(len(plan.delete), 'object', 'objects')} "
        f"({human_bytes(plan.bytes_freed)}); kept {counted(plan.needed, 'object', 'objects')} "
        f"used by {counted(report.locks, 'lock', 'locks')}, "
        f"{counted(len(plan.young), 'object', 'objects')} newer than the grace period "
        f"({duration}) and {counted(len(plan.foreign), 'other key', 'other keys')}"
    )
    return "\n".join(lines) + "\n"

"""The lines a run prints on stderr when it ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.lock.model import Lock
from fetchproxy.review.diff import diff_locks, render_text
from fetchproxy.text import counted, human_bytes

if TYPE_CHECKING:
    from fetchproxy.addons.record import Record
    from fetchproxy.replay.book import ReplayBook


def record_summary(record: Record, *, lock: Path, written: bool = True) -> str:
    """What a record run did; ``written``: whether its lock was written (else left unchanged)."""
    stats = record.stats
    line = (
        f"fetchproxy: recorded {counted(stats.recorded, 'fetch', 'fetches')} "
        f"({human_bytes(stats.bytes)}) {'into' if written else 'for'} {lock}"
    )
    extras = []
    if stats.kept:
        kept = counted(stats.kept, "fetch", "fetches")
        extras.append(f"{kept} answered from the existing lock (--keep)")
    if stats.passed:
        extras.append(f"{stats.passed} passed through unlocked (5xx or websocket)")
    if stats.failed:
        extras.append(f"{stats.failed} failed")
    if stats.unstored:
        extras.append(f"{stats.unstored} not stored (the errors above say why)")
    return line + (f"; {', '.join(extras)}" if extras else "")


def replay_summary(replay: ReplayBook, *, lock: Path) -> str:
    stats = replay.stats
    lines = [
        f"fetchproxy: served {counted(stats.served, 'fetch', 'fetches')} "
        f"({human_bytes(stats.bytes)}) "
        f"from {lock}; refused {stats.refused}"
    ]
    lines.extend(f"fetchproxy:   refused {k.method} {k.url}" for k in replay.refused)
    hidden = stats.refused - replay.refused_unkeyed - len(replay.refused)
    if hidden > 0:
        lines.append(f"fetchproxy:   ... and {hidden} more (see the event log)")
    if replay.refused_unkeyed:
        lines.append(
            f"fetchproxy:   and {replay.refused_unkeyed} that were not HTTP requests a lock "
            "could hold (invalid, or not HTTP; see the event log)"
        )
    unused = replay.unused()
    if unused:
        lines.append(f"fetchproxy: {len(unused)} of {len(replay.lock)} lock entries went unused")
    return "\n".join(lines)


def lock_changes(old: Lock, new: Lock, *, lock: Path) -> str:
    """What a record changed in the lock, in the words of ``fetchproxy lock diff``."""
    diff = diff_locks(old, new)
    if diff.identical:
        return f"fetchproxy: {lock} is unchanged"
    return render_text(diff, old_label=f"{lock} (before)", new_label=f"{lock} (now)").rstrip("\n")

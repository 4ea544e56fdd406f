"""The lines a run prints on stderr when it ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from addons.record import Record
    from addons.replay import Replay

_SHOWN_REFUSALS = 10


def human_bytes(size: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _plural(count: int, word: str) -> str:
    return (
        f"{count} {word}"
        if count == 1
        else f"{count} {word}es"
        if word.endswith("h")
        else f"{count} {word}s"
    )


def record_summary(record: Record, *, lock: Path) -> str:
    stats = record.stats
    line = (
        f"fetchproxy: recorded {_plural(stats.recorded, 'fetch')} "
        f"({human_bytes(stats.bytes)}) into {lock}"
    )
    extras = []
    if stats.passed:
        extras.append(f"{stats.passed} passed through unlocked (5xx or websocket)")
    if stats.failed:
        extras.append(f"{stats.failed} failed")
    return line + (f"; {', '.join(extras)}" if extras else "")


def replay_summary(replay: Replay, *, lock: Path) -> str:
    stats = replay.stats
    lines = [
        f"fetchproxy: served {_plural(stats.served, 'fetch')} ({human_bytes(stats.bytes)}) "
        f"from {lock}; refused {stats.refused}"
    ]
    lines.extend(
        f"fetchproxy:   refused {k.method} {k.url}" for k in replay.refused[:_SHOWN_REFUSALS]
    )
    hidden = len(replay.refused) - _SHOWN_REFUSALS
    if hidden > 0:
        lines.append(f"fetchproxy:   ... and {hidden} more (see the event log)")
    unused = replay.unused()
    if unused:
        lines.append(f"fetchproxy: {len(unused)} of {len(replay.lock)} lock entries went unused")
    return "\n".join(lines)

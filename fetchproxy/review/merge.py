"""Merging two locks that both changed since a common base: ``fetchproxy lock merge``.

Pure: :func:`merge_locks` is a three-way merge by key, over whole entries (a key and its
answer are one unit; there is no merging inside an entry):

- an entry both sides agree on (the same answer, or both removed it) is taken;
- an entry one side changed, added or removed while the other kept the base's is that side's
  (so the union of both sides' additions, and what one side removed and the other left
  unchanged is removed);
- an entry both sides changed differently — two answers to one request, or one side's answer
  against the other's removal — is a :class:`Conflict`.

:func:`render_merge` writes the result as the canonical lock, each conflict in its key's place
between git's markers with one side's ``[[fetch]]`` table on each side (a comment where a side
removed it). That text is not TOML, so every command that reads the lock refuses it, and the
loader names the conflict's line, request and both digests: nothing (``lock fmt`` included)
can pick one side silently. docs/reviewing-locks.md shows one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fetchproxy.keys.request import SortKey
from fetchproxy.lock.file import HEADER, render_fetch
from fetchproxy.lock.model import VERSION, Fetch, Lock

MARKER_SIZE: Final = 7
"""git's default conflict-marker size."""
OURS: Final = "ours"
THEIRS: Final = "theirs"


@dataclass(frozen=True, kw_only=True, slots=True)
class Conflict:
    """One request both sides changed, differently (None: removed, or never there)."""

    base: Fetch | None
    ours: Fetch | None
    theirs: Fetch | None

    @property
    def entry(self) -> Fetch:
        """An entry of this request (for its key)."""
        entry = self.ours or self.theirs or self.base
        assert entry is not None
        return entry

    def sort_key(self) -> SortKey:
        return self.entry.sort_key()


@dataclass(frozen=True, kw_only=True, slots=True)
class LockMerge:
    """The merged entries, the conflicts, and where the merged entries came from."""

    lock: Lock
    """Every entry merged cleanly (the conflicts' requests are not in it)."""
    conflicts: tuple[Conflict, ...]
    from_ours: int
    """Entries ours added or changed that theirs did not touch (and those both added alike)."""
    from_theirs: int
    """Entries theirs added or changed that ours did not touch."""
    removed: int
    """Base entries one side removed and the other kept unchanged (or both removed)."""

    @property
    def clean(self) -> bool:
        return not self.conflicts


def merge_locks(base: Lock, ours: Lock, theirs: Lock) -> LockMerge:
    """The three-way merge of ``ours`` and ``theirs`` since ``base``."""
    sides: dict[SortKey, list[Fetch | None]] = {}
    for index, lock in enumerate((base, ours, theirs)):
        for entry in lock.fetches:
            sides.setdefault(entry.sort_key(), [None, None, None])[index] = entry
    merged: list[Fetch] = []
    conflicts: list[Conflict] = []
    from_ours = from_theirs = removed = 0
    for key in sorted(sides):
        was, mine, other = sides[key]
        if mine == other:
            chosen = mine
            from_ours += mine is not None and mine != was
        elif mine == was:
            chosen = other
            from_theirs += other is not None
        elif other == was:
            chosen = mine
            from_ours += mine is not None
        else:
            conflicts.append(Conflict(base=was, ours=mine, theirs=other))
            continue
        if chosen is None:
            removed += 1
        else:
            merged.append(chosen)
    return LockMerge(
        lock=Lock.from_sorted(merged),
        conflicts=tuple(conflicts),
        from_ours=from_ours,
        from_theirs=from_theirs,
        removed=removed,
    )


def render_merge(merge: LockMerge) -> str:
    """The merged lock's text: canonical, with each conflict between git's markers."""
    items: list[Fetch | Conflict] = [*merge.lock.fetches, *merge.conflicts]
    items.sort(key=lambda item: item.sort_key())
    parts = [HEADER, f"version = {VERSION}\n"]
    for item in items:
        parts.append("\n")
        if isinstance(item, Fetch):
            parts.append(render_fetch(item))
            continue
        parts.append(f"{'<' * MARKER_SIZE} {OURS}\n")
        parts.append(_side(item.ours, OURS))
        parts.append(f"{'=' * MARKER_SIZE}\n")
        parts.append(_side(item.theirs, THEIRS))
        parts.append(f"{'>' * MARKER_SIZE} {THEIRS}\n")
    return "".join(parts)


def _side(entry: Fetch | None, label: str) -> str:
    if entry is None:
        return f"# {label}: this request's entry is removed\n"
    return render_fetch(entry)

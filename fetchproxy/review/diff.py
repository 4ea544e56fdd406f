"""The reviewer's view of a lock change: what was added, removed and changed, host by host.

Pure: :func:`diff_locks` compares two :class:`~fetchproxy.lock.Lock` values and returns a
:class:`LockDiff`; :func:`render_text` and :func:`render_json` turn it into what ``fetchproxy lock
diff`` prints; :func:`render_listing` is the one-line-per-entry form ``fetchproxy lock show``
prints for git's ``textconv``. No files, no clock. docs/reviewing-locks.md shows the output.

Two signals get their own words. **Content drift**: the same request (same key) got a
successful (2xx) answer before and gets one now, with other bytes (a new digest) — a re-tagged
release, a mirror serving something else, or an attack. (A changed error page or redirect body
is a plain change.) **New hosts**: hosts the new lock fetches from that the old lock never
contacted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from fetchproxy.digest import PREFIX, Digest, hex_of
from fetchproxy.lock.model import FIELDS, Fetch, Lock, LockValue
from fetchproxy.text import counted, human_bytes, printable

JSON_FORMAT: Final = "fetchproxy-lock-diff"
JSON_VERSION: Final = 1
SHORT_HEX: Final = 12
"""Hex digits of a digest shown in text output (JSON always has the full digest)."""

_AUTHORITY_RE: Final = re.compile(r"[^:/?#]+://([^/?#]*)")
_CONTENT_FIELDS: Final = frozenset({"digest", "size"})
_LISTING_SKIPS: Final = frozenset(
    {"method", "url", "accept", "git-protocol", "body-digest", "status", "digest", "size"}
)


def host_of(entry: Fetch) -> str:
    """``entry.key.host`` (``host[:port]``) without building the key, which big diffs feel."""
    match = _AUTHORITY_RE.match(entry.key.url)
    return match.group(1) if match else entry.key.host


def _successful(entry: Fetch) -> bool:
    return 200 <= entry.status < 300


@dataclass(frozen=True, kw_only=True, slots=True)
class EntryChange:
    """One key whose entry was added (``old`` is None), removed (``new`` is None) or changed."""

    old: Fetch | None
    new: Fetch | None

    def __post_init__(self) -> None:
        if self.old is None and self.new is None:
            raise ValueError("EntryChange: old and new cannot both be None")

    @property
    def entry(self) -> Fetch:
        """The entry on the new side, else the old one (for its key)."""
        entry = self.new if self.new is not None else self.old
        assert entry is not None
        return entry

    @property
    def kind(self) -> str:
        """``added``, ``removed`` or ``changed``."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "changed"

    @property
    def host(self) -> str:
        return host_of(self.entry)

    @property
    def content_drift(self) -> bool:
        """Whether the same request got a successful (2xx) answer before and now, with other bytes.

        A changed error page or redirect body is a plain change: what a build consumes is the
        body of a successful answer.
        """
        return (
            self.old is not None
            and self.new is not None
            and self.old.digest != self.new.digest
            and _successful(self.old)
            and _successful(self.new)
        )

    @property
    def changed_fields(self) -> tuple[str, ...]:
        """Names (as in the lock) of the fields that differ, in lock order; () unless changed."""
        if self.old is None or self.new is None:
            return ()
        return tuple(f.name for f in FIELDS if f.value(self.old) != f.value(self.new))


@dataclass(frozen=True, kw_only=True, slots=True)
class HostChanges:
    """The changes to one host's entries, in the lock's key order."""

    host: str
    new_host: bool
    """Whether the old lock never contacted this host."""
    entries: tuple[EntryChange, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class LockDiff:
    """The difference between two locks, grouped by host (hosts sorted by name)."""

    hosts: tuple[HostChanges, ...]
    old_fetches: int
    new_fetches: int
    new_hosts: tuple[str, ...]
    bytes_added: int
    """Bytes of the blobs the new lock refers to and the old one does not (each counted once)."""
    bytes_removed: int
    """Bytes of the blobs the old lock refers to and the new one does not (each counted once)."""

    @property
    def identical(self) -> bool:
        """Whether both locks hold the same entries (their text may still differ in form)."""
        return not self.hosts

    @property
    def entries(self) -> tuple[EntryChange, ...]:
        """Every change, host by host, each host's in key order."""
        return tuple(change for host in self.hosts for change in host.entries)

    @property
    def added(self) -> tuple[EntryChange, ...]:
        return tuple(c for c in self.entries if c.kind == "added")

    @property
    def removed(self) -> tuple[EntryChange, ...]:
        return tuple(c for c in self.entries if c.kind == "removed")

    @property
    def changed(self) -> tuple[EntryChange, ...]:
        return tuple(c for c in self.entries if c.kind == "changed")

    @property
    def content_drift(self) -> tuple[EntryChange, ...]:
        return tuple(c for c in self.entries if c.content_drift)


def diff_locks(old: Lock, new: Lock) -> LockDiff:
    """What changed from ``old`` to ``new`` (one merge walk: both are sorted by key)."""
    changes: list[EntryChange] = []
    olds, news = old.fetches, new.fetches
    i = j = 0
    while i < len(olds) and j < len(news):
        before, after = olds[i], news[j]
        if before == after:
            i, j = i + 1, j + 1
            continue
        old_key, new_key = before.sort_key(), after.sort_key()
        if old_key == new_key:
            changes.append(EntryChange(old=before, new=after))
            i, j = i + 1, j + 1
        elif old_key < new_key:
            changes.append(EntryChange(old=before, new=None))
            i += 1
        else:
            changes.append(EntryChange(old=None, new=after))
            j += 1
    changes.extend(EntryChange(old=before, new=None) for before in olds[i:])
    changes.extend(EntryChange(old=None, new=after) for after in news[j:])
    by_host: dict[str, list[EntryChange]] = {}
    for change in changes:
        by_host.setdefault(change.host, []).append(change)
    old_hosts = {host_of(f) for f in old.fetches}
    new_hosts = sorted({host_of(f) for f in new.fetches} - old_hosts)
    old_sizes = {f.digest: f.size for f in old.fetches}
    new_sizes = {f.digest: f.size for f in new.fetches}
    return LockDiff(
        hosts=tuple(
            HostChanges(host=host, new_host=host not in old_hosts, entries=tuple(by_host[host]))
            for host in sorted(by_host)
        ),
        old_fetches=len(old),
        new_fetches=len(new),
        new_hosts=tuple(new_hosts),
        bytes_added=sum(size for d, size in new_sizes.items() if d not in old_sizes),
        bytes_removed=sum(size for d, size in old_sizes.items() if d not in new_sizes),
    )


# ------------------------------------------------------------------------------------------ text


def short_digest(digest: Digest) -> str:
    """``blake3:8e4c7c1b99db…``: enough to recognise, too short to trust (JSON has it all)."""
    return f"{PREFIX}{hex_of(digest)[:SHORT_HEX]}…"


def request_text(entry: Fetch) -> str:
    """``GET https://host/path``, with ``[accept: …]``, ``[git-protocol: …]`` and
    ``[body: blake3:…]`` when in the key."""
    parts = [entry.key.method, entry.key.url]
    if entry.key.accept is not None:
        parts.append(f"[accept: {entry.key.accept}]")
    if entry.key.git_protocol is not None:
        parts.append(f"[git-protocol: {entry.key.git_protocol}]")
    if entry.key.body_digest is not None:
        parts.append(f"[body: {short_digest(entry.key.body_digest)}]")
    return " ".join(parts)


def sizes_text(old: int, new: int) -> tuple[str, str]:
    """Human sizes, exact when rounding would make two different sizes look the same."""
    old_text, new_text = human_bytes(old), human_bytes(new)
    if old != new and old_text == new_text:
        return f"{old} B", f"{new} B"
    return old_text, new_text


def _value_text(value: LockValue | None) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _body_change(old: Fetch, new: Fetch) -> str:
    old_size, new_size = sizes_text(old.size, new.size)
    return f"{short_digest(old.digest)} ({old_size}) → {short_digest(new.digest)} ({new_size})"


def _field_changes(change: EntryChange, *, drift: bool) -> str:
    """``status: 200 → 404; body: blake3:… (1 B) → blake3:… (2 B)``; the body left to drift."""
    old, new = change.old, change.new
    assert old is not None
    assert new is not None
    old_table, new_table = old.to_dict(), new.to_dict()
    parts = []
    for name in change.changed_fields:
        if name in _CONTENT_FIELDS:
            if name == "digest" and not drift:
                parts.append(f"body: {_body_change(old, new)}")
            elif name == "size" and old.digest == new.digest:  # only by hand: a blob has one size
                parts.append(f"size: {old.size} → {new.size}")
            continue
        parts.append(
            f"{name}: {_value_text(old_table.get(name))} → {_value_text(new_table.get(name))}"
        )
    return "; ".join(parts)


def change_line(change: EntryChange) -> str:
    """One change as the report shows it: ``  + REQUEST  (size, digest)``, ``  - …``, ``  ~ …``
    or ``  ! …  CONTENT DRIFT: …``."""
    entry = change.entry
    request = request_text(entry)
    if change.old is None:
        return f"  + {request}  ({human_bytes(entry.size)}, {short_digest(entry.digest)})"
    if change.new is None:
        return f"  - {request}  ({human_bytes(entry.size)})"
    if not change.content_drift:
        return f"  ~ {request}  {_field_changes(change, drift=False)}"
    line = f"  ! {request}  CONTENT DRIFT: {_body_change(change.old, change.new)}"
    others = _field_changes(change, drift=True)
    return f"{line}; {others}" if others else line


def summary_line(diff: LockDiff) -> str:
    """``summary: 1 added, 1 removed, 2 changed (1 content drift), 1 new host; +… -…``."""
    if diff.identical:
        return f"summary: no changes ({counted(diff.new_fetches, 'fetch', 'fetches')})"
    counts = f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed"
    drift = len(diff.content_drift)
    if drift:
        counts += f" ({drift} content drift)"
    if diff.new_hosts:
        counts += f", {counted(len(diff.new_hosts), 'new host', 'new hosts')}"
    return f"summary: {counts}; +{human_bytes(diff.bytes_added)} -{human_bytes(diff.bytes_removed)}"


def render_text(diff: LockDiff, *, old_label: str, new_label: str) -> str:
    """The plain-text report (ends with a newline); see docs/reviewing-locks.md.

    One line per changed entry under its host: ``+`` added, ``-`` removed, ``~`` changed,
    ``!`` content drift; then the new hosts and a one-line summary.
    """
    lines = [f"fetchproxy lock diff: {old_label} → {new_label}"]
    for host in diff.hosts:
        lines.append(f"{host.host}  (new host)" if host.new_host else host.host)
        lines.extend(change_line(change) for change in host.entries)
    if diff.new_hosts:
        lines.append(f"new hosts: {', '.join(diff.new_hosts)}")
    lines.append(summary_line(diff))
    return "".join(printable(line, lines=False) + "\n" for line in lines)


# ------------------------------------------------------------------------------------------ JSON


def _change_json(change: EntryChange) -> dict[str, object]:
    return {
        "host": change.host,
        "change": change.kind,
        "content_drift": change.content_drift,
        "fields": list(change.changed_fields),
        "old": None if change.old is None else change.old.to_dict(),
        "new": None if change.new is None else change.new.to_dict(),
    }


def render_json(diff: LockDiff, *, old_label: str, new_label: str) -> str:
    """The machine-readable report (one JSON document, ends with a newline).

    Schema (``"format": "fetchproxy-lock-diff", "version": 1``), documented in
    docs/reviewing-locks.md: ``old``, ``new`` (the labels), ``identical``, ``summary`` (counts
    and bytes), ``new_hosts`` and ``entries`` — one object per changed key, in text order, with
    ``host``, ``change`` (added/removed/changed), ``content_drift``, ``fields`` and the ``old``
    and ``new`` entries as lock tables (or null).
    """
    return render_document(json_document(diff, old_label=old_label, new_label=new_label))


def render_document(document: dict[str, object]) -> str:
    """A JSON report as it is printed: indented, ending with a newline; ASCII only, so JSON
    escapes every character a terminal could act on (C1 controls, bidi overrides)."""
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"


def json_document(diff: LockDiff, *, old_label: str, new_label: str) -> dict[str, object]:
    """The document :func:`render_json` prints (the package view adds to it)."""
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "old": old_label,
        "new": new_label,
        "identical": diff.identical,
        "summary": {
            "added": len(diff.added),
            "removed": len(diff.removed),
            "changed": len(diff.changed),
            "content_drift": len(diff.content_drift),
            "new_hosts": len(diff.new_hosts),
            "bytes_added": diff.bytes_added,
            "bytes_removed": diff.bytes_removed,
            "old_fetches": diff.old_fetches,
            "new_fetches": diff.new_fetches,
        },
        "new_hosts": list(diff.new_hosts),
        "entries": [_change_json(change) for change in diff.entries],
    }


# --------------------------------------------------------------------------------------- listing


def _listing_line(entry: Fetch) -> str:
    details = [str(entry.status), f"{entry.size} B", entry.digest]
    details.extend(
        f"{name} {_value_text(value)}"
        for name, value in entry.to_dict().items()
        if name not in _LISTING_SKIPS
    )
    return f"{request_text(entry)}  →  {', '.join(details)}"


def render_listing(lock: Lock) -> str:
    """One line per entry, for git's ``textconv``: a line diff of two listings reads well.

    A header line counts fetches, hosts and bytes; each entry is ``REQUEST  →  status, size,
    digest (in full), headers``; a blank line and the host's name start each host's entries.
    """
    hosts = sorted({host_of(f) for f in lock.fetches})
    lines = [
        f"# fetchproxy lock: {counted(len(lock), 'fetch', 'fetches')} from "
        f"{counted(len(hosts), 'host', 'hosts')}, {human_bytes(lock.total_size())} of bodies"
    ]
    by_host: dict[str, list[Fetch]] = {}
    for entry in lock.fetches:
        by_host.setdefault(host_of(entry), []).append(entry)
    for host in hosts:
        lines.extend(("", f"{host}:"))
        lines.extend(f"  {_listing_line(entry)}" for entry in by_host[host])
    return "".join(printable(line, lines=False) + "\n" for line in lines)

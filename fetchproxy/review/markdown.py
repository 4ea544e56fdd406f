"""``fetchproxy lock diff --format markdown``: the lock change as a pull-request comment.

Pure. The reviewer reads it top down, so the order is what matters most first: the summary,
the new hosts, the content drift, then the package changes, then every other entry change
(folded). GitHub shows a lock change as raw TOML otherwise.

Everything that came from a lock (hosts, URLs, package names and versions, file names, header
values) is untrusted: it is written only inside code spans, whose fences are longer than any
run of backticks in it and whose control characters are escaped
(:func:`~fetchproxy.text.printable`), so it renders as the text it is — never as a link, an
image, HTML, a mention, or the end of the list it is in. Long lists are cut at
:data:`MAX_ITEMS`, saying how many more there are, to stay well under GitHub's comment size.
"""

from __future__ import annotations

import re
from typing import Final

from fetchproxy.lock.model import Fetch
from fetchproxy.review.diff import EntryChange, LockDiff, request_text, short_digest
from fetchproxy.review.packages import FileChange, PackageChange, PackageDiff, packages_summary
from fetchproxy.text import counted, human_bytes, printable

MAX_ITEMS: Final = 100
"""Items shown per list; the rest are counted (``lock diff`` has them all)."""
_BACKTICKS_RE: Final = re.compile(r"`+")


def code(text: str) -> str:
    """``text`` as a Markdown code span that shows exactly it."""
    shown = printable(text, lines=False)
    longest = max((len(run) for run in _BACKTICKS_RE.findall(shown)), default=0)
    fence = "`" * (longest + 1)
    if shown.startswith(("`", " ")) or shown.endswith(("`", " ")) or not shown:
        shown = f" {shown} "
    return f"{fence}{shown}{fence}"


def _capped(items: list[str]) -> list[str]:
    if len(items) <= MAX_ITEMS:
        return items
    rest = len(items) - MAX_ITEMS
    return [*items[:MAX_ITEMS], f"- … and {rest} more (`fetchproxy lock diff` lists them all)"]


def _body(fetch: Fetch) -> str:
    return f"{code(short_digest(fetch.digest))} ({human_bytes(fetch.size)})"


def _from(change: FileChange) -> str:
    old, new = {f.key.url for f in change.old}, {f.key.url for f in change.new}
    return "" if old == new else f", now from {code(' + '.join(sorted(new)))}"


def _entry_item(change: EntryChange, *, metadata: bool = False) -> str:
    request = code(request_text(change.entry))
    old, new = change.old, change.new
    if old is None:
        assert new is not None
        return f"- added {request} {_body(new)}"
    if new is None:
        return f"- removed {request}"
    if change.content_drift:
        if metadata:
            return f"- updated {request}: {_body(old)} → {_body(new)}"
        return f"- **CONTENT DRIFT** {request}: {_body(old)} → {_body(new)}"
    fields = ", ".join(code(name) for name in change.changed_fields)
    return f"- changed {request}: {fields}"


def _package_item(change: PackageChange) -> str | None:
    name = code(f"{change.ecosystem} {change.name}")
    old = code(", ".join(change.old_versions)) if change.old_versions else ""
    new = code(", ".join(change.new_versions)) if change.new_versions else ""
    kind = change.kind
    if kind == "drift":
        return None  # said among the drift
    if kind == "added":
        line = f"- {name} {new} (new)"
    elif kind == "removed":
        line = f"- {name} {old} (removed)"
    elif kind == "changed":
        line = f"- {name} {old} → {new}"
    else:
        line = f"- {name} {old}"
    files = [f"+ {code(f.file)}" for f in change.files_added]
    files += [f"- {code(f.file)}" for f in change.files_removed]
    files += [
        f"{code(m.file)} moved to {code(' + '.join(sorted({f.key.url for f in m.new})))}"
        for m in change.moved
    ]
    return f"{line}; files: {', '.join(files)}" if files else line


def render_markdown(
    diff: LockDiff, packages: PackageDiff, *, old_label: str, new_label: str
) -> str:
    """The comment (ends with a newline)."""
    lines = [f"### fetchproxy lock diff: {code(old_label)} → {code(new_label)}", ""]
    if diff.identical:
        lines.append(f"**No changes** ({counted(diff.new_fetches, 'fetch', 'fetches')}).")
        return "\n".join(lines) + "\n"
    drift_items = [
        f"- **CONTENT DRIFT** {code(f'{p.ecosystem} {p.name} {d.version}')}: {code(d.file)} "
        + " + ".join(_body(f) for f in d.old)
        + " → "
        + " + ".join(_body(f) for f in d.new)
        + _from(d)
        for p in packages.drifted
        for d in p.drift
    ]
    in_packages = {f.key for p in packages.drifted for d in p.drift for f in (*d.old, *d.new)}
    drift_items += [
        _entry_item(c) for c in packages.other if c.content_drift and c.entry.key not in in_packages
    ]
    counts = [f"{len(diff.added)} added", f"{len(diff.removed)} removed"]
    counts.append(f"{len(diff.changed)} changed entries")
    alarms = []
    if drift_items:
        alarms.append(f"**{len(drift_items)} content drift**")
    if diff.new_hosts:
        alarms.append(f"**{counted(len(diff.new_hosts), 'new host', 'new hosts')}**")
    lines.append(
        f"**Summary:** {', '.join([*alarms, *counts])}; "
        f"+{human_bytes(diff.bytes_added)} -{human_bytes(diff.bytes_removed)} of bodies; "
        f"{packages_summary(packages)}."
    )
    if diff.new_hosts:
        lines += [
            "",
            "**New hosts**: the build now fetches from hosts the old lock never contacted",
        ]
        lines += _capped([f"- {code(host)}" for host in diff.new_hosts])
    if drift_items:
        lines += ["", "**Content drift**: the same request or package file, other bytes"]
        lines += _capped(drift_items)
    versioned = [item for p in packages.packages if (item := _package_item(p)) is not None]
    if versioned:
        lines += ["", "**Packages**"]
        lines += _capped(versioned)
    others = [_entry_item(c) for c in packages.other if not c.content_drift]
    metadata = [_entry_item(c, metadata=True) for c in packages.metadata]
    for title, items in (("Other entries", others), ("Metadata (indexes, packuments)", metadata)):
        if items:
            lines += [
                "",
                f"<details><summary>{title} ({len(items)})</summary>",
                "",
                *_capped(items),
                "",
                "</details>",
            ]
    return "\n".join(lines) + "\n"

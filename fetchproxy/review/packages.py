"""The diff of two locks in package words: ``fetchproxy lock diff --packages``.

Pure. A lock entry is a **package file** when the SBOM's rules (:mod:`fetchproxy.provenance.sbom`:
a file, from a registry layout that names a package and its version) say what it is.
:func:`package_diff` compares the two locks' package files by what they are — the package, the
version and the file's name — not by URL, so a package whose version stayed the same but whose
bytes changed is **content drift** even when it now comes from another URL (a mirror), which the
entry diff can only show as one removal and one addition; and a file that kept its bytes but
moved to another URL is said to have moved.

The view hides nothing. An entry change the package lines do not say everything about stays
an entry change: a metadata entry's (an index, a packument: new bytes are what those get with
every release, so they are not called drift here) in :attr:`PackageDiff.metadata`, any other
(a new ``content-type``, a changed redirect, a file of no registry) in
:attr:`PackageDiff.other`, in the entry diff's own words. Every value from a lock is shown
through :func:`~fetchproxy.text.printable`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.provenance.entry import entry_from_fetch
from fetchproxy.provenance.fetchset import key_line
from fetchproxy.provenance.purl import PackageURL, Role, identify
from fetchproxy.provenance.sbom import components
from fetchproxy.review.diff import (
    EntryChange,
    LockDiff,
    change_line,
    request_text,
    short_digest,
    sizes_text,
    summary_line,
)
from fetchproxy.text import printable

_BODY_FIELDS: Final = frozenset({"digest", "size"})
_VERSION_PART_RE: Final = re.compile(r"(\d+)|(\D+)")


@dataclass(frozen=True, kw_only=True, slots=True)
class PackageFile:
    """One lock entry that is a file of a package version."""

    ecosystem: str
    """The purl type: ``pypi``, ``npm``, ``cargo``, ``maven``, ``golang``, ``deb``, ``github``."""
    name: str
    """As the ecosystem writes it: ``@types/node``, ``org.slf4j:slf4j-api``, ``idna``."""
    purl: str
    """The package's purl, without version or qualifiers."""
    version: str
    file: str
    """The file's name (the last segment of the URL that named it)."""
    fetch: Fetch


@dataclass(frozen=True, kw_only=True, slots=True)
class FileChange:
    """One file of one version on both sides, with other bytes (drift) or other URLs (moved)."""

    version: str
    file: str
    old: tuple[Fetch, ...]
    new: tuple[Fetch, ...]

    @property
    def drift(self) -> bool:
        return {f.digest for f in self.old} != {f.digest for f in self.new}


@dataclass(frozen=True, kw_only=True, slots=True)
class PackageChange:
    """What changed about one package: its versions, the files of versions both sides have."""

    ecosystem: str
    name: str
    purl: str
    old_versions: tuple[str, ...]
    new_versions: tuple[str, ...]
    drift: tuple[FileChange, ...]
    """Files whose bytes changed: the supply-chain signal."""
    moved: tuple[FileChange, ...]
    """Files with the same bytes from other URLs."""
    files_added: tuple[PackageFile, ...]
    """Files of versions both locks have, that only the new lock has."""
    files_removed: tuple[PackageFile, ...]

    @property
    def kind(self) -> str:
        """``added``, ``removed``, ``changed`` (its versions), ``drift`` (only bytes changed)
        or ``files`` (the same versions, with files added, removed or moved)."""
        if not self.old_versions:
            return "added"
        if not self.new_versions:
            return "removed"
        if self.old_versions != self.new_versions:
            return "changed"
        return "files" if self.files_added or self.files_removed or self.moved else "drift"

    @property
    def title(self) -> str:
        """``npm acc-right``."""
        return printable(f"{self.ecosystem} {self.name}", lines=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class PackageDiff:
    """The package changes, and the entry changes they do not account for."""

    packages: tuple[PackageChange, ...]
    metadata: tuple[EntryChange, ...]
    other: tuple[EntryChange, ...]

    @property
    def drifted(self) -> tuple[PackageChange, ...]:
        return tuple(p for p in self.packages if p.drift)

    def count(self, kind: str) -> int:
        return sum(p.kind == kind for p in self.packages)


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """Numbers as numbers: ``3.9`` before ``3.10``."""
    return tuple(
        (0, int(number)) if number else (1, text)
        for number, text in _VERSION_PART_RE.findall(version)
    )


def package_files(lock: Lock) -> list[PackageFile]:
    """The entries of ``lock`` that are files of a package version, in fetch-set order."""
    by_key = {key_line(entry_from_fetch(f)): f for f in lock.fetches}
    found = []
    for component in components(entry_from_fetch(f) for f in lock.fetches):
        purl = component.purl
        if component.role is not Role.ARTIFACT or component.registry is None:
            continue
        if purl is None or not purl.version:
            continue
        url = component.redirected_from or component.entry.url
        segments = [s for s in url.split("?")[0].split("/")[3:] if s]
        found.append(
            PackageFile(
                ecosystem=purl.type,
                name=_display_name(purl),
                purl=str(PackageURL(type=purl.type, namespace=purl.namespace, name=purl.name)),
                version=purl.version,
                file=segments[-1] if segments else purl.name,
                fetch=by_key[key_line(component.entry)],
            )
        )
    return found


def _display_name(purl: PackageURL) -> str:
    if purl.type == "maven" and purl.namespace:
        return f"{'.'.join(purl.namespace)}:{purl.name}"
    return "/".join((*purl.namespace, purl.name))


def package_diff(diff: LockDiff, old: Lock, new: Lock) -> PackageDiff:
    """The package view of ``diff``, which is ``diff_locks(old, new)``."""
    before, after = package_files(old), package_files(new)
    packages: dict[tuple[str, str], tuple[list[PackageFile], list[PackageFile]]] = {}
    for side, files in ((0, before), (1, after)):
        for file in files:
            packages.setdefault((file.ecosystem, file.name), ([], []))[side].append(file)
    changes = [
        change
        for (ecosystem, name), (olds, news) in sorted(packages.items())
        if (change := _package_change(ecosystem, name, olds, news)) is not None
    ]
    in_packages = {f.fetch.key for f in (*before, *after)}
    rest = [c for c in diff.entries if not _explained(c, in_packages)]
    return PackageDiff(
        packages=tuple(changes),
        metadata=tuple(c for c in rest if _is_metadata(c)),
        other=tuple(c for c in rest if not _is_metadata(c)),
    )


def _package_change(
    ecosystem: str, name: str, olds: Sequence[PackageFile], news: Sequence[PackageFile]
) -> PackageChange | None:
    old_versions = tuple(sorted({f.version for f in olds}, key=version_order))
    new_versions = tuple(sorted({f.version for f in news}, key=version_order))
    old_files, new_files = _by_file(olds), _by_file(news)
    both = []
    for version, file in sorted(old_files.keys() & new_files.keys()):
        was, now = old_files[version, file], new_files[version, file]
        if was != now:
            both.append(FileChange(version=version, file=file, old=was, new=now))
    drift = tuple(c for c in both if c.drift)
    moved = tuple(c for c in both if not c.drift and _urls(c.old) != _urls(c.new))
    kept = set(old_versions) & set(new_versions)
    added = tuple(f for f in news if f.version in kept and (f.version, f.file) not in old_files)
    removed = tuple(f for f in olds if f.version in kept and (f.version, f.file) not in new_files)
    if old_versions == new_versions and not (drift or moved or added or removed):
        return None
    return PackageChange(
        ecosystem=ecosystem,
        name=name,
        purl=(news or olds)[0].purl,
        old_versions=old_versions,
        new_versions=new_versions,
        drift=drift,
        moved=moved,
        files_added=added,
        files_removed=removed,
    )


def _by_file(files: Iterable[PackageFile]) -> dict[tuple[str, str], tuple[Fetch, ...]]:
    found: dict[tuple[str, str], list[Fetch]] = {}
    for file in files:
        found.setdefault((file.version, file.file), []).append(file.fetch)
    return {where: tuple(fetches) for where, fetches in found.items()}


def _urls(fetches: Iterable[Fetch]) -> set[str]:
    return {f.key.url for f in fetches}


def _explained(change: EntryChange, in_packages: set[RequestKey]) -> bool:
    """Whether the package lines say all there is to say about ``change``: a package file
    added or removed, or one whose bytes (and nothing else) changed."""
    if change.entry.key not in in_packages:
        return False
    if change.kind != "changed":
        return True
    return change.content_drift and set(change.changed_fields) <= _BODY_FIELDS


def _is_metadata(change: EntryChange) -> bool:
    return any(
        identify(f.key.method, f.key.url, status=f.status, accept=f.key.accept).role
        is Role.METADATA
        for f in (change.old, change.new)
        if f is not None
    )


# ------------------------------------------------------------------------------------------ text


def versions_text(versions: tuple[str, ...]) -> str:
    return printable(", ".join(versions), lines=False)


def package_line(change: PackageChange) -> str | None:
    """``~ npm acc-right 1.0.0 → 1.1.0``, ``+ pypi idna 3.10 (new)``, ``- … (removed)`` or
    ``~ pypi bar 2.0  files: + …, - …``; None for a package whose only change is drift, which
    :func:`drift_lines` says."""
    kind = change.kind
    if kind == "drift":
        return None
    if kind == "added":
        return f"  + {change.title} {versions_text(change.new_versions)} (new)"
    if kind == "removed":
        return f"  - {change.title} {versions_text(change.old_versions)} (removed)"
    line = f"  ~ {change.title} {versions_text(change.old_versions)}"
    if kind == "changed":
        line += f" → {versions_text(change.new_versions)}"
    files = [f"+ {printable(f.file, lines=False)}" for f in change.files_added]
    files += [f"- {printable(f.file, lines=False)}" for f in change.files_removed]
    files += [
        f"{printable(m.file, lines=False)} moved to {printable(_url_text(m.new), lines=False)}"
        for m in change.moved
    ]
    return f"{line}  files: {', '.join(files)}" if files else line


def _url_text(fetches: tuple[Fetch, ...]) -> str:
    return " + ".join(sorted(_urls(fetches)))


def bodies_text(side: tuple[Fetch, ...], other: tuple[Fetch, ...]) -> str:
    """``blake3:1ffc… (10 B)`` for each body on one side (sizes exact where the other side's
    would round the same)."""
    return " + ".join(
        f"{short_digest(f.digest)} ({sizes_text(f.size, other[0].size)[0]})" for f in side
    )


def drift_lines(change: PackageChange) -> list[str]:
    """``! pypi foo 1.0  CONTENT DRIFT: foo-1.0.tar.gz blake3:… (…) → blake3:… (…)``, one per
    file, with the new URL when it moved too."""
    lines = []
    for drift in change.drift:
        line = (
            f"  ! {change.title} {printable(drift.version, lines=False)}  CONTENT DRIFT: "
            f"{printable(drift.file, lines=False)} {bodies_text(drift.old, drift.new)} → "
            f"{bodies_text(drift.new, drift.old)}"
        )
        if _urls(drift.old) != _urls(drift.new):
            line += f", now from {printable(_url_text(drift.new), lines=False)}"
        lines.append(line)
    return lines


def metadata_line(change: EntryChange) -> str:
    """An index's or packument's change: ``~ REQUEST  body: … → …`` (``lock diff`` without
    ``--packages`` calls new bytes of one drift, like any 2xx answer's)."""
    if change.old is None or change.new is None or change.old.digest == change.new.digest:
        return change_line(change)
    others = [f for f in change.changed_fields if f not in _BODY_FIELDS]
    line = (
        f"  ~ {request_text(change.entry)}  body: "
        f"{bodies_text((change.old,), (change.new,))} → {bodies_text((change.new,), (change.old,))}"
    )
    return line + (f"; also {', '.join(others)}" if others else "")


def packages_summary(packages: PackageDiff) -> str:
    """``packages: 1 changed, 1 new (1 content drift)``; the counts that are not 0."""
    if not packages.packages:
        return "packages: no changes"
    words = {
        "changed": "changed",
        "added": "new",
        "removed": "removed",
        "files": "with other files",
    }
    parts = [
        f"{packages.count(kind)} {word}" for kind, word in words.items() if packages.count(kind)
    ]
    drift = sum(len(p.drift) for p in packages.packages)
    if drift:
        parts.append(f"{drift} content drift")
    return "packages: " + ", ".join(parts)


def render_packages_text(
    diff: LockDiff, packages: PackageDiff, *, old_label: str, new_label: str
) -> str:
    """``lock diff --packages``: the drift, each package, then the other entry changes and the
    metadata changes under their hosts, the new hosts and both summaries (ends with a newline)."""
    lines = [f"fetchproxy lock diff: {old_label} → {new_label}"]
    if packages.packages:
        lines.append("packages:")
        for drifted in packages.drifted:
            lines.extend(drift_lines(drifted))
        lines.extend(line for c in packages.packages if (line := package_line(c)) is not None)
    new_hosts = set(diff.new_hosts)
    for title, changes, render in (
        ("other entries:", packages.other, change_line),
        ("metadata:", packages.metadata, metadata_line),
    ):
        if not changes:
            continue
        lines.append(title)
        hosts: dict[str, list[EntryChange]] = {}
        for change in changes:
            hosts.setdefault(change.host, []).append(change)
        for host in sorted(hosts):
            lines.append(f"{host}  (new host)" if host in new_hosts else host)
            lines.extend(render(c) for c in hosts[host])
    if diff.new_hosts:
        lines.append(f"new hosts: {', '.join(diff.new_hosts)}")
    lines.append(packages_summary(packages))
    lines.append(summary_line(diff))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ JSON


def _fetches_json(fetches: Iterable[Fetch]) -> list[dict[str, object]]:
    return [{"url": f.key.url, "digest": f.digest, "size": f.size} for f in fetches]


def _files_json(files: Iterable[PackageFile]) -> list[dict[str, object]]:
    return [{"version": f.version, "file": f.file, **_fetches_json([f.fetch])[0]} for f in files]


def _changes_json(changes: Iterable[FileChange]) -> list[dict[str, object]]:
    return [
        {
            "version": c.version,
            "file": c.file,
            "old": _fetches_json(c.old),
            "new": _fetches_json(c.new),
        }
        for c in changes
    ]


def packages_json(packages: PackageDiff) -> list[dict[str, object]]:
    """The ``packages`` member of ``lock diff --packages --format json`` (schema in
    docs/reviewing-locks.md)."""
    return [
        {
            "ecosystem": p.ecosystem,
            "name": p.name,
            "purl": p.purl,
            "change": p.kind,
            "old_versions": list(p.old_versions),
            "new_versions": list(p.new_versions),
            "content_drift": bool(p.drift),
            "drift": _changes_json(p.drift),
            "moved": _changes_json(p.moved),
            "files_added": _files_json(p.files_added),
            "files_removed": _files_json(p.files_removed),
        }
        for p in packages.packages
    ]

"""The package view of a lock diff: versions, drift by package file (whatever its URL), files
that moved, metadata that is not called drift, and nothing of the entry diff left unsaid."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchproxy.digest import digest_bytes
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.review.diff import diff_locks, short_digest
from fetchproxy.review.packages import (
    PackageDiff,
    package_diff,
    package_files,
    packages_json,
    render_packages_text,
    version_order,
)
from tests.review.example_locks import (
    ACC_1,
    ACC_2,
    BAR,
    BAR_312,
    BAR_MOVED,
    FOO,
    FOO_MIRROR,
    IDNA_39,
    IDNA_310,
    IDNA_INDEX,
    NEW,
    NPM_ACCEPT,
    OLD,
    PACKUMENT_1,
    SIX,
    TOOL,
    file,
)
from tests.support.cli import run_command


def view(old: Lock = OLD, new: Lock = NEW) -> PackageDiff:
    return package_diff(diff_locks(old, new), old, new)


def test_package_files_are_named_by_package_version_and_file() -> None:
    found = {(f.ecosystem, f.name, f.version, f.file) for f in package_files(NEW)}
    assert found == {
        ("npm", "acc-right", "1.1.0", "acc-right-1.1.0.tgz"),
        ("pypi", "idna", "3.10", "idna-3.10-py3-none-any.whl"),
        ("pypi", "six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl"),
        ("pypi", "foo", "1.0", "foo-1.0-py3-none-any.whl"),
        ("pypi", "bar", "2.0", "bar-2.0-py3-none-any.whl"),
        ("pypi", "bar", "2.0", "bar-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"),
    }  # the packument, the index and the shell script are not package files


def test_the_package_view() -> None:
    packages = view()
    kinds = {(p.ecosystem, p.name): p.kind for p in packages.packages}
    assert kinds == {
        ("npm", "acc-right"): "changed",
        ("pypi", "idna"): "changed",
        ("pypi", "six"): "added",
        ("pypi", "foo"): "drift",
        ("pypi", "bar"): "files",
    }
    foo = next(p for p in packages.packages if p.name == "foo")
    assert [(d.version, d.file, d.old, d.new) for d in foo.drift] == [
        ("1.0", "foo-1.0-py3-none-any.whl", (FOO,), (FOO_MIRROR,))
    ]  # another URL, the same package file: drift, not one removal and one addition
    bar = next(p for p in packages.packages if p.name == "bar")
    assert [(m.file, m.new) for m in bar.moved] == [("bar-2.0-py3-none-any.whl", (BAR_MOVED,))]
    assert [f.fetch for f in bar.files_added] == [BAR_312]
    assert not bar.drift
    # what the package lines do not say stays an entry change: the index and the packument
    # (metadata), the script whose content-type changed (not a package file)
    assert {c.entry.key.url for c in packages.metadata} == {
        IDNA_INDEX.key.url,
        PACKUMENT_1.key.url,
    }
    assert [c.entry.key.url for c in packages.other] == [TOOL.key.url]


def short(fetch: Fetch) -> str:
    return short_digest(fetch.digest)


def index(lock: Lock, like: Fetch) -> int:
    return next(i for i, f in enumerate(lock.fetches) if f.key == like.key)


def test_the_text_says_drift_first_and_names_every_change() -> None:
    text = render_packages_text(diff_locks(OLD, NEW), view(), old_label="old", new_label="new")
    assert text.splitlines() == [
        "fetchproxy lock diff: old → new",
        "packages:",
        f"  ! pypi foo 1.0  CONTENT DRIFT: foo-1.0-py3-none-any.whl {short(FOO)} (7 B) → "
        f"{short(FOO_MIRROR)} (18 B), now from https://mirror.example.net/pypi/foo-1.0-py3-none-"
        "any.whl",
        "  ~ npm acc-right 1.0.0 → 1.1.0",
        "  ~ pypi bar 2.0  files: + bar-2.0-cp312-cp312-manylinux_2_17_x86_64.whl, "
        "bar-2.0-py3-none-any.whl moved to https://mirror.example.net/pypi/bar-2.0-py3-none-any.whl",
        "  ~ pypi idna 3.9 → 3.10",
        "  + pypi six 1.16.0 (new)",
        "other entries:",
        "example.org",
        '  ~ GET https://example.org/tools/install.sh  content-type: (none) → "text/x-sh"',
        "metadata:",
        "pypi.org",
        f"  ~ GET https://pypi.org/simple/idna/  body: {short(IDNA_INDEX)} (10 B) → "
        f"{short(NEW.fetches[index(NEW, IDNA_INDEX)])} (11 B)",
        "registry.npmjs.org",
        f"  ~ GET https://registry.npmjs.org/acc-right [accept: {NPM_ACCEPT}]  body: "
        f"{short(PACKUMENT_1)} (4 B) → {short(NEW.fetches[index(NEW, PACKUMENT_1)])} (8 B)",
        "new hosts: mirror.example.net",
        "packages: 2 changed, 1 new, 1 with other files, 1 content drift",
        "summary: 6 added, 4 removed, 3 changed (2 content drift), 1 new host; +71 B -38 B",
    ]


def test_versions_sort_as_numbers() -> None:
    assert sorted(["3.10", "3.9", "3.10.1", "10.0", "3.9rc1"], key=version_order) == [
        "3.9",
        "3.9rc1",
        "3.10",
        "3.10.1",
        "10.0",
    ]
    removed = view(Lock.from_fetches([IDNA_39, IDNA_310]), Lock())
    assert removed.packages[0].old_versions == ("3.9", "3.10")


def test_a_version_cannot_rewrite_the_terminal() -> None:
    # a GitHub release tag is whatever its author typed: here, an escape sequence
    hostile = file("https://github.com/o/r/releases/download/v1%1B%5B2J/tool.tgz", b"tool")
    new = Lock.from_fetches([hostile])
    text = render_packages_text(
        diff_locks(Lock(), new), view(Lock(), new), old_label="a", new_label="b"
    )
    assert "\x1b" not in text
    assert "  + github o/r v1\\x1b[2J (new)" in text.splitlines()


def test_the_json_form() -> None:
    document = packages_json(view())
    foo = next(p for p in document if p["name"] == "foo")
    assert foo == {
        "ecosystem": "pypi",
        "name": "foo",
        "purl": "pkg:pypi/foo",
        "change": "drift",
        "old_versions": ["1.0"],
        "new_versions": ["1.0"],
        "content_drift": True,
        "drift": [
            {
                "version": "1.0",
                "file": "foo-1.0-py3-none-any.whl",
                "old": [{"url": FOO.key.url, "digest": FOO.digest, "size": 7}],
                "new": [{"url": FOO_MIRROR.key.url, "digest": FOO_MIRROR.digest, "size": 18}],
            }
        ],
        "moved": [],
        "files_added": [],
        "files_removed": [],
    }
    json.dumps(document)  # plain JSON values


_ALL = [PACKUMENT_1, ACC_1, ACC_2, IDNA_INDEX, IDNA_39, IDNA_310, SIX, FOO, BAR, BAR_312, TOOL]
_VARIANTS = st.sampled_from(
    [
        lambda f: f,
        lambda f: dataclasses.replace(f, digest=digest_bytes(f.digest.encode()), size=f.size + 1),
        lambda f: dataclasses.replace(f, content_type="application/x-other"),
        lambda f: dataclasses.replace(f, status=404),
    ]
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_ALL), _VARIANTS), unique_by=lambda t: t[0].key.url),
    st.lists(st.tuples(st.sampled_from(_ALL), _VARIANTS), unique_by=lambda t: t[0].key.url),
)
def test_every_entry_change_is_said_somewhere(
    old_entries: list[tuple[Fetch, object]], new_entries: list[tuple[Fetch, object]]
) -> None:
    old = Lock.from_fetches(variant(f) for f, variant in old_entries)  # type: ignore[operator]
    new = Lock.from_fetches(variant(f) for f, variant in new_entries)  # type: ignore[operator]
    diff = diff_locks(old, new)
    packages = package_diff(diff, old, new)
    said = {
        f.key for p in packages.packages for c in (*p.drift, *p.moved) for f in (*c.old, *c.new)
    }
    said |= {f.fetch.key for p in packages.packages for f in (*p.files_added, *p.files_removed)}
    versions = {
        (p.ecosystem, p.name): (set(p.old_versions), set(p.new_versions)) for p in packages.packages
    }
    files = {f.fetch.key: f for f in package_files(old) + package_files(new)}
    for change in diff.entries:
        if change in packages.metadata or change in packages.other:
            continue
        # an entry change the package lines account for: its file is named, or its version is
        key = change.entry.key
        file_of = files.get(key)
        assert file_of is not None, change
        if key in said:
            continue
        old_versions, new_versions = versions[file_of.ecosystem, file_of.name]
        assert old_versions != new_versions, change
        assert change.kind in ("added", "removed"), change


def test_cli_lock_diff_packages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.lock.toml", tmp_path / "new.lock.toml"
    write_lock(old, OLD)
    write_lock(new, NEW)
    assert run_command("lock", "diff", "--packages", str(old), str(new)) == 1
    assert "  ~ npm acc-right 1.0.0 → 1.1.0\n" in capsys.readouterr().out
    assert run_command("lock", "diff", "--packages", "--format", "json", str(old), str(new)) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "fetchproxy-lock-diff"
    assert [p["name"] for p in document["packages"]] == ["acc-right", "bar", "foo", "idna", "six"]
    assert len(document["entries"]) == len(diff_locks(OLD, NEW).entries)  # still every entry
    assert run_command("lock", "diff", "--packages", str(old), str(old)) == 0
    assert capsys.readouterr().out.endswith(
        "packages: no changes\nsummary: no changes (7 fetches)\n"
    )

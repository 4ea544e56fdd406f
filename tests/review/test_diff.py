"""`lock diff` and `lock show`: the diff of two locks and the exact text reviewers see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fetchproxy.cli.options import UsageError
from fetchproxy.digest import digest_bytes
from fetchproxy.lock.file import LockFileError, render_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.review.diff import (
    EntryChange,
    diff_locks,
    host_of,
    render_json,
    render_listing,
    render_text,
    summary_line,
)
from tests.support.cli import run_command
from tests.support.locks import make_fetch

MiB = 1 << 20
FOO = "https://files.example.org/pkg/foo-1.0.tar.gz"
BAR1 = "https://files.example.org/pkg/bar-1.0.tar.gz"
BAR2 = "https://files.example.org/pkg/bar-2.0.tar.gz"
OPTIONAL = "https://files.example.org/pkg/optional.txt"
PAYLOAD = "https://evil.example.net/payload.sh"


def fetch(url: str, body: bytes, size: int, **fields: object) -> Fetch:
    values: dict[str, object] = {"method": "GET", "url": url, "status": 200}
    values.update(fields)
    return make_fetch(digest=digest_bytes(body), size=size, **values)


OLD = Lock.from_fetches(
    [
        fetch(FOO, b"foo 1.0", 10 * MiB, content_type="application/gzip"),
        fetch(BAR1, b"bar 1.0", 1153434),
        fetch(OPTIONAL, b"not found", 335, status=404),
    ]
)
NEW = Lock.from_fetches(
    [
        fetch(FOO, b"foo 1.0, re-tagged", 10590617, content_type="application/gzip"),
        fetch(BAR2, b"bar 2.0", 1258291),
        fetch(OPTIONAL, b"not found", 335, status=410, content_type="text/plain"),
        fetch(PAYLOAD, b"payload", 512),
    ]
)

EXPECTED_TEXT = """\
fetchproxy lock diff: old.lock.toml → new.lock.toml
evil.example.net  (new host)
  + GET https://evil.example.net/payload.sh  (512 B, blake3:ec90915fa26a…)
files.example.org
  - GET https://files.example.org/pkg/bar-1.0.tar.gz  (1.1 MiB)
  + GET https://files.example.org/pkg/bar-2.0.tar.gz  (1.2 MiB, blake3:e2e4d9b763a5…)
  ! GET https://files.example.org/pkg/foo-1.0.tar.gz  CONTENT DRIFT: blake3:401eb897b5a0… \
(10.0 MiB) → blake3:2447d3731a1a… (10.1 MiB)
  ~ GET https://files.example.org/pkg/optional.txt  status: 404 → 410; \
content-type: (none) → "text/plain"
new hosts: evil.example.net
summary: 2 added, 1 removed, 2 changed (1 content drift), 1 new host; +11.3 MiB -11.1 MiB
"""


def test_text_groups_changes_by_host_and_calls_out_drift_and_new_hosts() -> None:
    diff = diff_locks(OLD, NEW)
    assert render_text(diff, old_label="old.lock.toml", new_label="new.lock.toml") == (
        EXPECTED_TEXT
    )


def test_the_diff_value() -> None:
    diff = diff_locks(OLD, NEW)
    assert not diff.identical
    assert [h.host for h in diff.hosts] == ["evil.example.net", "files.example.org"]
    assert [h.new_host for h in diff.hosts] == [True, False]
    assert [(c.kind, c.entry.key.url) for c in diff.entries] == [
        ("added", PAYLOAD),
        ("removed", BAR1),
        ("added", BAR2),
        ("changed", FOO),
        ("changed", OPTIONAL),
    ]
    assert [c.entry.key.url for c in diff.content_drift] == [FOO]
    assert diff.changed[0].changed_fields == ("digest", "size")
    assert diff.changed[1].changed_fields == ("status", "content-type")
    assert diff.new_hosts == ("evil.example.net",)
    assert (diff.old_fetches, diff.new_fetches) == (3, 4)
    # bytes are those of blobs only one side refers to: the drifted body counts on both sides
    assert diff.bytes_added == 512 + 1258291 + 10590617
    assert diff.bytes_removed == 1153434 + 10 * MiB


def test_identical_locks() -> None:
    diff = diff_locks(OLD, Lock.from_fetches(reversed(OLD.fetches)))
    assert diff.identical
    assert diff.entries == ()
    assert render_text(diff, old_label="a", new_label="b") == (
        "fetchproxy lock diff: a → b\nsummary: no changes (3 fetches)\n"
    )
    one = Lock.from_fetches(OLD.fetches[:1])
    assert summary_line(diff_locks(one, one)) == "summary: no changes (1 fetch)"


def test_a_lock_from_nothing_makes_every_host_new() -> None:
    diff = diff_locks(Lock(), OLD)
    assert render_text(diff, old_label="/dev/null", new_label="new") == (
        "fetchproxy lock diff: /dev/null → new\n"
        "files.example.org  (new host)\n"
        "  + GET https://files.example.org/pkg/bar-1.0.tar.gz  (1.1 MiB, blake3:0aa9dfd37af5…)\n"
        "  + GET https://files.example.org/pkg/foo-1.0.tar.gz  (10.0 MiB, blake3:401eb897b5a0…)\n"
        "  + GET https://files.example.org/pkg/optional.txt  (335 B, blake3:915806aadfcd…)\n"
        "new hosts: files.example.org\n"
        "summary: 3 added, 0 removed, 0 changed, 1 new host; +11.1 MiB -0 B\n"
    )


def test_a_host_no_longer_contacted_is_not_new_and_a_port_makes_another_host() -> None:
    old = Lock.from_fetches([fetch("http://127.0.0.1:8001/a", b"a", 1)])
    new = Lock.from_fetches([fetch("http://127.0.0.1:8002/a", b"a", 1)])
    assert render_text(diff_locks(old, new), old_label="a", new_label="b") == (
        "fetchproxy lock diff: a → b\n"
        "127.0.0.1:8001\n"
        "  - GET http://127.0.0.1:8001/a  (1 B)\n"
        "127.0.0.1:8002  (new host)\n"
        "  + GET http://127.0.0.1:8002/a  (1 B, blake3:17762fddd969…)\n"
        "new hosts: 127.0.0.1:8002\n"
        "summary: 1 added, 1 removed, 0 changed, 1 new host; +0 B -0 B\n"
    )


def test_http_and_https_of_one_host_are_one_host() -> None:
    old = Lock.from_fetches([fetch("https://example.org/a", b"a", 1)])
    new = Lock.from_fetches([*old.fetches, fetch("http://example.org/b", b"b", 1)])
    diff = diff_locks(old, new)
    assert diff.new_hosts == ()
    assert summary_line(diff) == "summary: 1 added, 0 removed, 0 changed; +1 B -0 B"


def test_drift_to_the_same_rounded_size_shows_exact_sizes_and_other_field_changes() -> None:
    old = Lock.from_fetches([fetch(FOO, b"foo 1.0", 10 * MiB)])
    new = Lock.from_fetches([fetch(FOO, b"foo 1.0, re-tagged", 10 * MiB + 1, status=203)])
    old_same = Lock.from_fetches([fetch(FOO, b"foo 1.0", 7)])
    new_same = Lock.from_fetches([fetch(FOO, b"foo 1.0, re-tagged", 7)])
    lines = render_text(diff_locks(old, new), old_label="a", new_label="b").splitlines()
    assert lines[2] == (
        "  ! GET https://files.example.org/pkg/foo-1.0.tar.gz  CONTENT DRIFT: "
        "blake3:401eb897b5a0… (10485760 B) → blake3:2447d3731a1a… (10485761 B); status: 200 → 203"
    )
    lines = render_text(diff_locks(old_same, new_same), old_label="a", new_label="b").splitlines()
    assert lines[2] == (
        "  ! GET https://files.example.org/pkg/foo-1.0.tar.gz  CONTENT DRIFT: "
        "blake3:401eb897b5a0… (7 B) → blake3:2447d3731a1a… (7 B)"
    )
    assert lines[3] == "summary: 0 added, 0 removed, 1 changed (1 content drift); +7 B -7 B"


def test_drift_is_for_successful_answers_other_body_changes_are_plain_changes() -> None:
    gone = "https://files.example.org/gone.txt"
    back = "https://files.example.org/back.txt"
    edited = "https://files.example.org/edited.txt"
    old = Lock.from_fetches(
        [
            fetch(gone, b"not found", 23, status=404),
            fetch(back, b"not found", 23, status=404),
            fetch(FOO, b"foo 1.0", 7),
            fetch(edited, b"bar 1.0", 7),
        ]
    )
    new = Lock.from_fetches(
        [
            fetch(gone, b"payload", 18, status=410),
            fetch(back, b"bar 2.0", 5000),
            fetch(FOO, b"foo 1.0, re-tagged", 7, status=203),
            fetch(edited, b"bar 1.0", 8),  # by hand: a blob has one size
        ]
    )
    diff = diff_locks(old, new)
    assert [c.content_drift for c in diff.entries] == [False, False, False, True]
    assert render_text(diff, old_label="a", new_label="b") == (
        "fetchproxy lock diff: a → b\n"
        "files.example.org\n"
        "  ~ GET https://files.example.org/back.txt  status: 404 → 200; "
        "body: blake3:915806aadfcd… (23 B) → blake3:e2e4d9b763a5… (4.9 KiB)\n"
        "  ~ GET https://files.example.org/edited.txt  size: 7 → 8\n"
        "  ~ GET https://files.example.org/gone.txt  status: 404 → 410; "
        "body: blake3:915806aadfcd… (23 B) → blake3:ec90915fa26a… (18 B)\n"
        "  ! GET https://files.example.org/pkg/foo-1.0.tar.gz  CONTENT DRIFT: "
        "blake3:401eb897b5a0… (7 B) → blake3:2447d3731a1a… (7 B); status: 200 → 203\n"
        "summary: 0 added, 0 removed, 4 changed (1 content drift); +4.9 KiB -30 B\n"
    )


def test_keys_with_accept_and_request_body_and_head_lengths() -> None:
    want = digest_bytes(b"want")
    pack = "https://git.example.org/repo.git/git-upload-pack"
    api = "https://api.example.org/v1/pkg"
    old = Lock.from_fetches(
        [
            fetch(pack, b"pack", 98304, method="POST", body_digest=want),
            fetch(api, b"refs", 10, accept="application/json"),
            fetch(FOO, b"", 0, method="HEAD", content_length=10 * MiB),
        ]
    )
    new = Lock.from_fetches(
        [
            fetch(pack, b"pack", 98304, method="POST", body_digest=want, location="/x"),
            fetch(api, b"refs", 10, accept="application/vnd.api+json"),
            fetch(FOO, b"", 0, method="HEAD", content_length=10 * MiB + 1),
        ]
    )
    assert render_text(diff_locks(old, new), old_label="a", new_label="b") == (
        "fetchproxy lock diff: a → b\n"
        "api.example.org\n"
        "  - GET https://api.example.org/v1/pkg [accept: application/json]  (10 B)\n"
        "  + GET https://api.example.org/v1/pkg [accept: application/vnd.api+json]  "
        "(10 B, blake3:ca4b5ebe9744…)\n"
        "files.example.org\n"
        "  ~ HEAD https://files.example.org/pkg/foo-1.0.tar.gz  "
        "content-length: 10485760 → 10485761\n"
        "git.example.org\n"
        "  ~ POST https://git.example.org/repo.git/git-upload-pack [body: blake3:952b919ab9a4…]  "
        'location: (none) → "/x"\n'
        "summary: 1 added, 1 removed, 2 changed; +0 B -0 B\n"
    )


def test_a_blob_shared_by_entries_counts_once() -> None:
    old = Lock.from_fetches([fetch("https://a.example/1", b"x", 100)])
    new = Lock.from_fetches(
        [fetch("https://a.example/2", b"y", 100), fetch("https://a.example/3", b"y", 100)]
    )
    diff = diff_locks(old, new)
    assert (diff.bytes_added, diff.bytes_removed) == (100, 100)


def test_json_schema() -> None:
    old = Lock.from_fetches([fetch(FOO, b"foo 1.0", 7), fetch(BAR1, b"bar 1.0", 3)])
    new = Lock.from_fetches([fetch(FOO, b"foo 1.0, re-tagged", 8), fetch(PAYLOAD, b"payload", 5)])
    text = render_json(diff_locks(old, new), old_label="old.lock.toml", new_label="new.lock.toml")
    foo_old = "blake3:401eb897b5a00277d3772c0d468d2033e253da460fd26b2dcaa14d68e4300434"
    foo_new = "blake3:2447d3731a1a3df1ff85468be201999c5c2c7a9fa400d7278dd764befd1c5f63"
    bar = "blake3:0aa9dfd37af5435397c767f6ad635d6784554162d404df56a99bc272de218c7d"
    payload = "blake3:ec90915fa26ab012a89a88ecc8b47e4dd76c4adfd6abd1fc10e321b0fca18d1d"
    assert json.loads(text) == {
        "format": "fetchproxy-lock-diff",
        "version": 1,
        "old": "old.lock.toml",
        "new": "new.lock.toml",
        "identical": False,
        "summary": {
            "added": 1,
            "removed": 1,
            "changed": 1,
            "content_drift": 1,
            "new_hosts": 1,
            "bytes_added": 13,
            "bytes_removed": 10,
            "old_fetches": 2,
            "new_fetches": 2,
        },
        "new_hosts": ["evil.example.net"],
        "entries": [
            {
                "host": "evil.example.net",
                "change": "added",
                "content_drift": False,
                "fields": [],
                "old": None,
                "new": {
                    "method": "GET",
                    "url": PAYLOAD,
                    "status": 200,
                    "digest": payload,
                    "size": 5,
                },
            },
            {
                "host": "files.example.org",
                "change": "removed",
                "content_drift": False,
                "fields": [],
                "old": {"method": "GET", "url": BAR1, "status": 200, "digest": bar, "size": 3},
                "new": None,
            },
            {
                "host": "files.example.org",
                "change": "changed",
                "content_drift": True,
                "fields": ["digest", "size"],
                "old": {"method": "GET", "url": FOO, "status": 200, "digest": foo_old, "size": 7},
                "new": {"method": "GET", "url": FOO, "status": 200, "digest": foo_new, "size": 8},
            },
        ],
    }
    assert text.startswith('{\n  "format": "fetchproxy-lock-diff",\n  "version": 1,\n')
    assert text.endswith("\n  ]\n}\n")


POOL_URLS = [
    "http://[::1]:8080/a",
    "https://example.org?q=1",
    "https://example.org/a",
    "https://example.org:8443/a#f",
    "https://other.example/a",
]
pool_entries = st.builds(
    lambda url, method, body, status: fetch(url, body, len(body), method=method, status=status),
    st.sampled_from(POOL_URLS),
    st.sampled_from(["GET", "HEAD"]),
    st.sampled_from([b"one", b"two"]),
    st.sampled_from([200, 404]),
)
pool_locks = st.lists(pool_entries, max_size=8, unique_by=lambda f: f.sort_key()).map(
    Lock.from_fetches
)


@given(pool_locks, pool_locks)
def test_the_diff_agrees_with_a_naive_one_and_turns_old_into_new(old: Lock, new: Lock) -> None:
    diff = diff_locks(old, new)
    before = {f.sort_key(): f for f in old.fetches}
    after = {f.sort_key(): f for f in new.fetches}
    naive = {
        key: (before.get(key), after.get(key))
        for key in before.keys() | after.keys()
        if before.get(key) != after.get(key)
    }
    assert {c.entry.sort_key(): (c.old, c.new) for c in diff.entries} == naive
    assert diff.identical == (old == new)
    assert [h.host for h in diff.hosts] == sorted({h.host for h in diff.hosts})
    for host in diff.hosts:
        keys = [c.entry.sort_key() for c in host.entries]
        assert keys == sorted(keys)
    applied = dict(before)
    for change in diff.entries:
        if change.new is None:
            del applied[change.entry.sort_key()]
        else:
            applied[change.entry.sort_key()] = change.new
    assert Lock.from_fetches(applied.values()) == new


def test_host_of_is_the_keys_host() -> None:
    assert [host_of(fetch(url, b"", 0)) for url in POOL_URLS] == [
        "[::1]:8080",
        "example.org",
        "example.org",
        "example.org:8443",
        "other.example",
    ]
    assert [host_of(fetch(url, b"", 0)) for url in POOL_URLS] == [
        fetch(url, b"", 0).key.host for url in POOL_URLS
    ]


def test_entry_change_needs_a_side() -> None:
    with pytest.raises(ValueError, match="old and new cannot both be None"):
        EntryChange(old=None, new=None)


def test_listing_for_textconv() -> None:
    assert render_listing(NEW) == (
        "# fetchproxy lock: 4 fetches from 2 hosts, 11.3 MiB of bodies\n"
        "\n"
        "evil.example.net:\n"
        "  GET https://evil.example.net/payload.sh  →  200, 512 B, "
        "blake3:ec90915fa26ab012a89a88ecc8b47e4dd76c4adfd6abd1fc10e321b0fca18d1d\n"
        "\n"
        "files.example.org:\n"
        "  GET https://files.example.org/pkg/bar-2.0.tar.gz  →  200, 1258291 B, "
        "blake3:e2e4d9b763a50bdb87b30071a87c0ac564b73a6f05cdfc998f0e03b0b8127f6e\n"
        "  GET https://files.example.org/pkg/foo-1.0.tar.gz  →  200, 10590617 B, "
        "blake3:2447d3731a1a3df1ff85468be201999c5c2c7a9fa400d7278dd764befd1c5f63, "
        'content-type "application/gzip"\n'
        "  GET https://files.example.org/pkg/optional.txt  →  410, 335 B, "
        "blake3:915806aadfcd2172aee3987725510dde30e45906cd57411dc423b541032e5743, "
        'content-type "text/plain"\n'
    )
    assert render_listing(Lock()) == "# fetchproxy lock: 0 fetches from 0 hosts, 0 B of bodies\n"


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def locks(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old.lock.toml", tmp_path / "new.lock.toml"
    old.write_text(render_lock(OLD))
    new.write_text(render_lock(NEW))
    return old, new


def test_cli_exit_status_is_1_when_different_0_when_identical(
    locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _new = locks
    monkeypatch.chdir(old.parent)
    assert run_command("lock", "diff", "old.lock.toml", "new.lock.toml") == 1
    assert capsys.readouterr().out == EXPECTED_TEXT
    assert run_command("lock", "diff", "old.lock.toml", "old.lock.toml") == 0
    assert capsys.readouterr().out == (
        "fetchproxy lock diff: old.lock.toml → old.lock.toml\nsummary: no changes (3 fetches)\n"
    )


def test_cli_json(locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    old, new = locks
    assert run_command("lock", "diff", "--format", "json", str(old), str(new)) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["summary"]["content_drift"] == 1
    assert document["old"] == str(old)


def test_cli_a_reformatted_lock_is_identical(
    locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = locks
    new.write_text(old.read_text().replace("\n\n[[fetch]]", "\n[[fetch]]").replace(" = ", "="))
    assert run_command("lock", "diff", str(old), str(new)) == 0
    assert capsys.readouterr().out == (
        f"fetchproxy lock diff: {old} → {new}\n"
        "summary: no changes (3 fetches)\n"
        "note: the files hold the same entries but differ in layout; `fetchproxy lock fmt` "
        "rewrites a lock in canonical form\n"
    )
    assert run_command("lock", "diff", "--format", "json", str(old), str(new)) == 0
    assert json.loads(capsys.readouterr().out)["identical"] is True


def test_cli_bad_input_names_file_and_line(locks: tuple[Path, Path]) -> None:
    old, new = locks
    new.write_text(new.read_text().replace("version = 1", "version = 2"))
    with pytest.raises(LockFileError) as caught:
        run_command("lock", "diff", str(old), str(new))
    assert str(caught.value) == (
        f"{new}:2: version: unknown lock version 2 — this lock was written by a newer "
        "fetchproxy; upgrade fetchproxy to read it"
    )
    assert caught.value.exit_status == 2
    old.write_text("not a lock\n")
    with pytest.raises(LockFileError) as caught:
        run_command("lock", "diff", str(old), str(new))
    assert str(caught.value) == (
        f"{old}:1: not valid TOML (Expected '=' after a key in a key/value pair) — restore the "
        "file from version control, or re-record it with `fetchproxy record`"
    )
    with pytest.raises(LockFileError, match=r"missing\.lock\.toml: no such lock"):
        run_command("lock", "diff", str(old.parent / "missing.lock.toml"), str(new))


def test_cli_more_than_two_files_is_a_usage_error(locks: tuple[Path, Path]) -> None:
    old, new = locks
    with pytest.raises(UsageError) as caught:
        run_command("lock", "diff", str(old), str(new), str(new))
    assert str(caught.value) == (
        "`fetchproxy lock diff` compares two locks, got 3 arguments: fetchproxy lock diff OLD NEW"
    )
    assert caught.value.exit_status == 2


def test_cli_as_git_external_diff(
    locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = locks
    git_args = ["fetchproxy.lock.toml", str(old), "a" * 40, "100644", str(new), "b" * 40, "100644"]
    assert run_command("lock", "diff", "--git-external-diff", *git_args) == 0
    expected = EXPECTED_TEXT.replace(
        "old.lock.toml → new.lock.toml",
        "fetchproxy.lock.toml@aaaaaaa → fetchproxy.lock.toml@bbbbbbb",
    )
    assert capsys.readouterr().out == expected
    deleted = [*git_args[:4], "/dev/null", ".", "."]
    assert run_command("lock", "diff", "--git-external-diff", *deleted) == 0
    out = capsys.readouterr().out
    assert out.startswith("fetchproxy lock diff: fetchproxy.lock.toml@aaaaaaa → /dev/null\n")
    assert out.endswith("summary: 0 added, 3 removed, 0 changed; +0 B -11.1 MiB\n")
    worktree = [*git_args[:5], "0" * 40, "100644"]
    assert run_command("lock", "diff", "--git-external-diff", *worktree) == 0
    assert capsys.readouterr().out.startswith(
        "fetchproxy lock diff: fetchproxy.lock.toml@aaaaaaa → fetchproxy.lock.toml (working tree)\n"
    )
    renamed = [*git_args, "renamed.lock.toml", "similarity index 90%\n"]
    assert run_command("lock", "diff", "--git-external-diff", *renamed) == 0
    assert capsys.readouterr().out.startswith(
        "fetchproxy lock diff: fetchproxy.lock.toml@aaaaaaa → renamed.lock.toml@bbbbbbb\n"
    )
    with pytest.raises(UsageError, match="takes git's 7 \\(or 9\\) arguments, got 2"):
        run_command("lock", "diff", "--git-external-diff", str(old), str(new))


def test_cli_git_external_diff_of_an_invalid_lock_falls_back_to_a_text_diff(
    locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = locks
    new.write_text(new.read_text() + "<<<<<<< HEAD\n")
    lines = new.read_text().count("\n")
    git_args = ["x.lock.toml", str(old), "a" * 40, "100644", str(new), "b" * 40, "100644"]
    assert run_command("lock", "diff", "--git-external-diff", *git_args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == [
        "fetchproxy lock diff: x.lock.toml@aaaaaaa → x.lock.toml@bbbbbbb",
        f"fetchproxy lock diff: not a valid lock: x.lock.toml@bbbbbbb:{lines}: a merge conflict "
        "marker: resolve the conflict, then run `fetchproxy lock fmt`",
        "fetchproxy lock diff: showing the text diff instead",
        "--- x.lock.toml@aaaaaaa",
        "+++ x.lock.toml@bbbbbbb",
    ]
    assert out[-1] == "+<<<<<<< HEAD"


def test_cli_show(locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _old, new = locks
    assert run_command("lock", "show", str(new)) == 0
    assert capsys.readouterr().out == render_listing(NEW)
    new.write_bytes(b"\xff")
    with pytest.raises(LockFileError, match=":1: not UTF-8 text"):
        run_command("lock", "show", str(new))
    new.write_text("version = 1\nfoo = 2\n")
    assert run_command("lock", "show", "--git-textconv", str(new)) == 0
    assert capsys.readouterr().out == (
        f"# fetchproxy: not a valid lock: {new}:2: foo: unknown top-level key — a lock holds "
        "`version`, `revision` and [[fetch]] tables only\nversion = 1\nfoo = 2\n"
    )


def test_cli_show_defaults_to_the_lock_variable(
    locks: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _new = locks
    monkeypatch.setenv("FETCHPROXY_LOCK", str(old))
    assert run_command("lock", "show") == 0
    assert capsys.readouterr().out == render_listing(OLD)

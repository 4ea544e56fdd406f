"""``fetchproxy store gc``: what goes, what stays, and staying safe beside a live record."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.cli.options import NoStoreError
from fetchproxy.digest import Digest, digest_bytes, hex_of
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import LockFileError, write_lock
from fetchproxy.lock.journal import Journal, journal_path
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.review.gc import (
    DEFAULT_GRACE,
    GcReport,
    KeepLockError,
    collect_garbage,
    duration_text,
    referenced_digests,
    render_gc,
)
from fetchproxy.store import DiskStore, StoreError, TempFile
from tests.support.cli import parse_cli, run_command

HOUR = 3600.0
KEPT = b"a body the lock uses"
UNUSED = b"a body no lock uses any more" * 100  # 2,800 bytes
LATER = 10 * HOUR  # gc's clock this far ahead: everything on disk is old


def entry(url: str, digest: Digest, size: int) -> Fetch:
    return Fetch(key=RequestKey(method="GET", url=url), status=200, digest=digest, size=size)


@pytest.fixture
def store(tmp_path: Path) -> DiskStore:
    return DiskStore(tmp_path / "store")


@pytest.fixture
def lock(tmp_path: Path, store: DiskStore) -> Path:
    path = tmp_path / "app.lock.toml"
    digest = store.put(KEPT)
    write_lock(path, Lock.from_fetches([entry("https://example.org/kept", digest, len(KEPT))]))
    return path


def later() -> float:
    return time.time() + LATER


def age(path: Path, seconds: float) -> None:
    """Make ``path`` look last written ``seconds`` ago (its mtime)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_removes_unused_old_blobs_and_keeps_the_locks_blobs(store: DiskStore, lock: Path) -> None:
    unused = store.put(UNUSED)
    report = collect_garbage(store, referenced_digests([lock]), locks=1, now=later())
    assert [(b.digest, b.size) for b in report.removed_blobs] == [(unused, len(UNUSED))]
    assert (report.kept_referenced, report.kept_recent) == (1, 0)
    assert report.bytes_freed == len(UNUSED)
    assert list(store.digests()) == [digest_bytes(KEPT)]
    # the shard directory stays: a writer may be about to link into it
    assert store.blob_path(unused).parent.is_dir()
    assert list(store.temp_dir.iterdir()) == []


def test_keeps_blobs_written_within_the_grace_period(store: DiskStore, lock: Path) -> None:
    unused = store.put(UNUSED)
    report = collect_garbage(store, referenced_digests([lock]), locks=1)
    assert report.removed_blobs == ()
    assert (report.kept_referenced, report.kept_recent) == (1, 1)
    assert store.contains(unused)
    # the rule is mtime *and* ctime: an old mtime (a copy from a cache, say) is not enough
    age(store.blob_path(unused), 2 * HOUR)
    assert collect_garbage(store, set()).removed_blobs == ()


def test_a_record_journal_beside_a_kept_lock_keeps_its_blobs(store: DiskStore, lock: Path) -> None:
    recording = store.put(UNUSED)
    journal = Journal(journal_path(lock))
    journal.append(entry("https://example.org/new", recording, len(UNUSED)))
    assert referenced_digests([lock]) == {digest_bytes(KEPT), recording}
    report = collect_garbage(store, referenced_digests([lock]), now=later())
    assert report.removed_blobs == ()
    assert report.kept_referenced == 2
    journal.close(remove=True)
    report = collect_garbage(store, referenced_digests([lock]), now=later())
    assert [b.digest for b in report.removed_blobs] == [recording]


def test_dry_run_removes_nothing_and_reports_the_same(store: DiskStore, lock: Path) -> None:
    unused = store.put(UNUSED)
    with store.writer() as crashed:
        crashed.update(b"partial")
        crashed_path = crashed.temp_path
        age(crashed_path, 2 * HOUR)
        dry = collect_garbage(store, referenced_digests([lock]), dry_run=True, grace=HOUR)
        assert store.contains(unused)
        assert crashed_path.exists()
        assert [b.digest for b in dry.removed_blobs] == []  # written just now
        dry = collect_garbage(store, referenced_digests([lock]), dry_run=True, now=later())
        assert store.contains(unused)
        assert crashed_path.exists()
        real = collect_garbage(store, referenced_digests([lock]), now=later())
        assert (dry.removed_blobs, dry.removed_temp_files) == (
            real.removed_blobs,
            real.removed_temp_files,
        )
        assert not store.contains(unused)
        assert not crashed_path.exists()


def test_temp_files_go_only_after_the_grace_period(store: DiskStore) -> None:
    with store.writer() as live, store.writer() as stale:
        live.update(b"still streaming")
        stale.update(b"left by a crash")
        age(stale.temp_path, HOUR + 60)
        report = collect_garbage(store, set(), grace=HOUR)
        assert [t.path for t in report.removed_temp_files] == [stale.temp_path]
        assert report.kept_recent_temp_files == 1
        assert live.temp_path.exists()
        assert not stale.temp_path.exists()
        # the live writer goes on and commits what it streamed
        live.update(b", and done")
        assert store.open(live.commit()).read_all() == b"still streaming, and done"


def test_a_writer_stalled_beyond_the_grace_period_fails_loudly_never_wrongly(
    store: DiskStore,
) -> None:
    with store.writer() as stalled:
        stalled.update(b"slow")
        age(stalled.temp_path, 2 * HOUR)
        collect_garbage(store, set(), grace=HOUR)
        with pytest.raises(OSError, match="cannot store blob"):
            stalled.commit()
    assert list(store.digests()) == []


def test_a_blob_touched_between_the_decision_and_the_rename_is_put_back(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live record dedups the blob (the writer touches it) just as gc moves it aside."""
    unused = store.put(UNUSED)
    blob = store.blob_path(unused)
    rename = os.rename

    def touched_first(src: str, dst: str, **dir_fds: int) -> None:
        if src == blob.name:
            os.utime(blob, (later(), later()))  # the writer's touch wins the race
        rename(src, dst, **dir_fds)

    monkeypatch.setattr(os, "rename", touched_first)
    report = collect_garbage(store, set(), now=later() - 60)
    assert report.removed_blobs == ()
    assert report.kept_recent == 1
    assert store.open(unused).read_all() == UNUSED
    assert list(store.temp_dir.iterdir()) == []


def test_a_blob_published_again_after_the_rename_stays(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live record stores the same bytes after gc moved the old copy away: its copy stays."""
    unused = store.put(UNUSED)
    blob = store.blob_path(unused)
    rename = os.rename

    def then_published(src: str, dst: str, **dir_fds: int) -> None:
        rename(src, dst, **dir_fds)
        if src == blob.name:
            assert store.put(UNUSED) == unused

    monkeypatch.setattr(os, "rename", then_published)
    report = collect_garbage(store, set(), now=later())
    assert [b.digest for b in report.removed_blobs] == [unused]  # the old copy went
    assert store.open(unused).read_all() == UNUSED  # the new one is there


def test_a_record_storing_an_existing_old_blob_again_keeps_it(store: DiskStore) -> None:
    """The writer touches a blob it finds already stored, and gc honours the touch."""
    unused = store.put(UNUSED)
    time.sleep(0.05)
    decided = time.time()
    time.sleep(0.05)
    assert store.put(UNUSED) == unused  # a live record fetched the same bytes again
    assert collect_garbage(store, set(), grace=0, now=decided).removed_blobs == ()
    assert store.contains(unused)
    assert [b.digest for b in collect_garbage(store, set(), grace=0).removed_blobs] == [unused]


def test_blobs_a_killed_gc_left_aside_are_put_back_first(store: DiskStore) -> None:
    unused = store.put(UNUSED)
    aside = store.temp_dir / f"blob-99999-gc-{hex_of(unused)}.tmp"
    store.blob_path(unused).rename(aside)
    age(aside, 2 * HOUR)
    report = collect_garbage(store, set())
    assert report.removed_temp_files == ()
    assert report.kept_recent == 1  # back under its name, and judged again next time
    assert not aside.exists()
    assert store.open(unused).read_all() == UNUSED
    # a dry run neither puts back nor reports it
    store.blob_path(unused).rename(aside)
    dry = collect_garbage(store, set(), dry_run=True, now=later())
    assert (dry.removed_blobs, dry.removed_temp_files) == ((), ())
    assert aside.exists()


def test_gc_beside_a_busy_writer_removes_none_of_its_blobs(store: DiskStore, lock: Path) -> None:
    """Many gcs while a writer streams and commits blobs no lock names yet: all of them stay."""
    stop = threading.Event()
    written: list[Digest] = []

    def record() -> None:
        n = 0
        while not stop.is_set():
            with store.writer() as writer:
                for _ in range(3):
                    writer.update(b"chunk %d " % n)
                written.append(writer.commit())
            store.put(UNUSED)  # the same old body fetched again and again
            n += 1

    thread = threading.Thread(target=record)
    thread.start()
    try:
        removed: list[Digest] = []
        for _ in range(30):
            report = collect_garbage(store, referenced_digests([lock]))
            removed.extend(b.digest for b in report.removed_blobs)
            assert report.removed_temp_files == ()
    finally:
        stop.set()
        thread.join()
    assert removed == []
    assert len(written) > 0
    for digest in [*written, digest_bytes(UNUSED), digest_bytes(KEPT)]:
        store.verify(digest)


def test_keep_lock_problems_stop_gc_before_it_removes_anything(
    store: DiskStore, lock: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "typo.lock.toml"
    with pytest.raises(KeepLockError) as caught:
        referenced_digests([lock, missing])
    assert str(caught.value) == (
        f"{missing}: no such lock (--keep-lock) — nothing was removed; check the path: "
        "gc keeps only the blobs of locks it can read"
    )
    assert caught.value.exit_status == 2
    broken = tmp_path / "broken.lock.toml"
    broken.write_text("version = 1\n[[fetch]]\nmethod = 1\n")
    with pytest.raises(LockFileError, match=r"broken\.lock\.toml:3: fetch\[0\]\.method"):
        referenced_digests([broken])


def test_a_negative_grace_is_refused(store: DiskStore) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        collect_garbage(store, set(), grace=-1)


def test_durations() -> None:
    assert [duration_text(s) for s in (20, 90, DEFAULT_GRACE, 5400, 7200.003, 7 * 86400)] == [
        "20 s",
        "1.5 min",
        "1 h",
        "1.5 h",
        "2 h",
        "7 d",
    ]


def test_report_text() -> None:
    report = GcReport(
        store=Path("/store"),
        dry_run=False,
        grace=HOUR,
        locks=2,
        removed_blobs=(),
        removed_temp_files=(),
        kept_referenced=1,
        kept_recent=0,
        kept_recent_temp_files=0,
    )
    assert render_gc(report) == (
        "fetchproxy store gc: /store\n"
        "summary: removed 0 blobs and 0 temp files, freed 0 B; kept 1 blob used by 2 locks\n"
    )
    temp = TempFile(path=Path("/store/tmp/blob-7-x.tmp"), mtime=1000.0, size=5)
    report = GcReport(
        store=Path("/store"),
        dry_run=True,
        grace=5400,
        locks=1,
        removed_blobs=(),
        removed_temp_files=(temp,),
        kept_referenced=3,
        kept_recent=1,
        kept_recent_temp_files=2,
    )
    assert render_gc(report, now=1000.0 + 7200) == (
        "fetchproxy store gc: /store (dry run: nothing removed)\n"
        "would remove temp file /store/tmp/blob-7-x.tmp (5 B, last written 2 h ago)\n"
        "summary: would remove 0 blobs and 1 temp file, would free 5 B; kept 3 blobs used by "
        "1 lock, and 1 blob and 2 temp files newer than the grace period (1.5 h)\n"
    )


# ------------------------------------------------------------------------------ links and odd files


def lage(path: Path, seconds: float) -> None:
    """``age`` for a symbolic link itself, not what it points to."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_nothing_is_removed_through_a_temp_dir_that_is_a_link(
    store: DiskStore, tmp_path: Path
) -> None:
    store.put(UNUSED)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "blob-1-precious.tmp"
    victim.write_bytes(b"not the store's")
    age(victim, 2 * HOUR)
    store.temp_dir.rmdir()
    store.temp_dir.symlink_to(outside)
    with pytest.raises(StoreError) as caught:
        collect_garbage(store, set(), now=later())
    assert str(caught.value) == (
        f"cannot collect garbage in {store.root}: a symbolic link, not a directory of the "
        f"store ({store.temp_dir}) — gc needs write access to the store"
    )
    assert victim.read_bytes() == b"not the store's"
    assert store.contains(digest_bytes(UNUSED))


def test_a_temp_file_that_is_a_link_is_judged_and_removed_itself_never_its_target(
    store: DiskStore, tmp_path: Path
) -> None:
    target = tmp_path / "outside"
    target.write_bytes(b"written just now, and not the store's")
    store.temp_dir.mkdir(parents=True)
    link = store.temp_dir / "blob-1-link.tmp"
    link.symlink_to(target)
    lage(link, 2 * HOUR)
    report = collect_garbage(store, set(), grace=HOUR)
    assert [t.path for t in report.removed_temp_files] == [link]
    assert not os.path.lexists(link)
    assert target.read_bytes() == b"written just now, and not the store's"


def test_a_directory_named_like_a_temp_file_is_left_alone(store: DiskStore) -> None:
    odd = store.temp_dir / "blob-1-dir.tmp"
    odd.mkdir(parents=True)
    age(odd, 2 * HOUR)
    report = collect_garbage(store, set(), grace=HOUR)
    assert (report.removed_temp_files, report.kept_recent_temp_files) == ((), 0)
    assert odd.is_dir()


def test_a_shard_that_is_a_link_is_not_the_store_s_and_nothing_in_it_is_removed(
    store: DiskStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / ("0" * 62)
    victim.write_bytes(b"named like a blob, not the store's")
    age(victim, 2 * HOUR)
    shard = store.root / "blake3" / "00"
    shard.parent.mkdir(parents=True)
    shard.symlink_to(outside)
    assert list(store.digests()) == []
    report = collect_garbage(store, set(), now=later())
    assert report.removed_blobs == ()
    assert victim.read_bytes() == b"named like a blob, not the store's"


def test_a_blob_that_is_a_link_is_judged_and_removed_itself_never_its_target(
    store: DiskStore, tmp_path: Path
) -> None:
    target = tmp_path / "outside"
    target.write_bytes(UNUSED)  # written just now
    digest = digest_bytes(UNUSED)
    link = store.blob_path(digest)
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    report = collect_garbage(store, set(), now=later())
    # what it freed is the link's own size, not its target's
    assert [(b.digest, b.size) for b in report.removed_blobs] == [(digest, len(str(target)))]
    assert not os.path.lexists(link)
    assert target.read_bytes() == UNUSED


def test_a_directory_under_a_blob_s_name_is_left_to_store_verify_repair(store: DiskStore) -> None:
    digest = digest_bytes(UNUSED)
    odd = store.blob_path(digest)
    odd.mkdir(parents=True)
    age(odd, 2 * HOUR)
    assert list(store.digests()) == [digest]  # a corrupt blob: not a regular file
    report = collect_garbage(store, set(), now=later())
    assert (report.removed_blobs, report.kept_recent) == ((), 1)
    assert odd.is_dir()


def test_a_blob_that_is_a_link_touched_during_removal_is_put_back_as_the_link(
    store: DiskStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "outside"
    target.write_bytes(UNUSED)
    digest = digest_bytes(UNUSED)
    link = store.blob_path(digest)
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    rename = os.rename

    def touched_first(src: str, dst: str, **dir_fds: int) -> None:
        if src == link.name:
            os.utime(link, (later(), later()), follow_symlinks=False)  # a writer's touch wins
        rename(src, dst, **dir_fds)

    monkeypatch.setattr(os, "rename", touched_first)
    report = collect_garbage(store, set(), now=later() - 60)
    assert (report.removed_blobs, report.kept_recent) == ((), 1)
    assert link.is_symlink()  # the link itself, not a hard link to what it points to
    assert link.readlink() == target
    assert target.stat().st_nlink == 1


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def stale_store(store: DiskStore) -> Iterator[DiskStore]:
    """An unused blob and a crashed write, both two hours old (the blob by its clock)."""
    store.put(UNUSED)
    with store.writer() as crashed:
        crashed.update(b"partial body")
        age(crashed.temp_path, 2 * HOUR)
        yield store


def test_cli_gc(stale_store: DiskStore, lock: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = stale_store
    (temp,) = store.temp_files()
    root = store.root
    args = parse_cli("store", "gc", "--keep-lock", str(lock), "--store", str(root), "--dry-run")
    assert args.grace is None
    assert (
        run_command("store", "gc", "--keep-lock", str(lock), "--store", str(root), "--dry-run") == 0
    )
    assert capsys.readouterr().out == (
        f"fetchproxy store gc: {root} (dry run: nothing removed)\n"
        f"would remove temp file {temp.path} (12 B, last written 2 h ago)\n"
        "summary: would remove 0 blobs and 1 temp file, would free 12 B; kept 1 blob used by "
        "1 lock, and 1 blob and 0 temp files newer than the grace period (1 h)\n"
    )
    assert (
        run_command("store", "gc", "--keep-lock", str(lock), "--store", str(root), "--grace", "0")
        == 0
    )
    unused = digest_bytes(UNUSED)
    assert capsys.readouterr().out == (
        f"fetchproxy store gc: {root}\n"
        f"removed temp file {temp.path} (12 B, last written 2 h ago)\n"
        f"removed blob {unused} (2.7 KiB)\n"
        "summary: removed 1 blob and 1 temp file, freed 2.7 KiB; kept 1 blob used by 1 lock\n"
    )


def test_cli_gc_keep_lock_takes_several_and_is_required(lock: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.lock.toml"
    args = parse_cli("store", "gc", "--keep-lock", str(lock), str(other), "--keep-lock", "x")
    assert args.keep_lock == [lock, other, Path("x")]
    with pytest.raises(SystemExit):
        parse_cli("store", "gc")


def test_cli_gc_without_a_store_is_an_error_that_names_it(lock: Path, tmp_path: Path) -> None:
    """A mistyped --store must not look like an empty store: the same error as store verify."""
    nowhere = tmp_path / "nowhere"
    with pytest.raises(NoStoreError) as caught:
        run_command("store", "gc", "--keep-lock", str(lock), "--store", str(nowhere))
    assert str(caught.value).startswith(f"{nowhere}: no store here — point --store")


def test_cli_gc_store_defaults_to_the_environment(
    stale_store: DiskStore,
    lock: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FETCHPROXY_STORE", str(stale_store.root))
    assert run_command("store", "gc", "--keep-lock", str(lock), "--grace", "2h") == 0
    assert capsys.readouterr().out.startswith(f"fetchproxy store gc: {stale_store.root}\n")


def test_cli_grace_units(lock: Path) -> None:
    grace = [
        parse_cli("store", "gc", "--keep-lock", str(lock), "--grace", text).grace
        for text in ("90", "90s", "30m", "1.5h", "7d")
    ]
    assert grace == [90, 90, 1800, 5400, 7 * 86400]


def test_cli_bad_grace(lock: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_cli("store", "gc", "--keep-lock", str(lock), "--grace", "soon")
    assert capsys.readouterr().err.endswith(
        "argument --grace: 'soon' is not a duration: give seconds (3600) or a number with "
        "s, m, h or d (2h)\n"
    )


def test_a_store_gc_cannot_change_is_an_error_naming_why(store: DiskStore, lock: Path) -> None:
    store.put(UNUSED)
    store.temp_dir.rmdir()
    store.temp_dir.write_text("a file where gc moves blobs before removing them\n")
    with pytest.raises(StoreError) as caught:
        collect_garbage(store, referenced_digests([lock]), now=later())
    assert str(caught.value) == (
        f"cannot collect garbage in {store.root}: File exists ({store.temp_dir}) — "
        "gc needs write access to the store"
    )
    assert store.contains(digest_bytes(UNUSED))

"""``fetchproxy store verify [--repair]``: every blob rehashed, bad ones named and moved aside."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fetchproxy.cli.options import NoStoreError
from fetchproxy.digest import Digest, digest_bytes, hex_of
from fetchproxy.review.storeverify import verify_store
from fetchproxy.store import DiskStore, MissingBlobError, StoreError
from tests.support.badblobs import KINDS, SUBPROCESS_DEADLINE, make_not_regular
from tests.support.cli import run_command, run_fetchproxy

GOOD = b"a good body"
BAD = b"a body the disk will damage" * 40  # 1,080 bytes


def damage(store: DiskStore, digest: Digest) -> None:
    """Flip the first bit of a stored blob, as a failing disk would."""
    path = store.blob_path(digest)
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    path.chmod(0o444)


@pytest.fixture
def store(tmp_path: Path) -> DiskStore:
    store = DiskStore(tmp_path / "store")
    store.put(GOOD)
    store.put(BAD)
    return store


def verify(store: DiskStore, *options: str) -> int:
    return run_command("store", "verify", "--store", str(store.root), *options)


def test_a_clean_store(store: DiskStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify(store) == 0
    assert capsys.readouterr().out == (
        f"fetchproxy store verify: {store.root}\nsummary: 2 blobs checked (1.1 KiB), all intact\n"
    )


def test_a_corrupt_blob_is_named_and_left_in_place_without_repair(
    store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = digest_bytes(BAD)
    damage(store, bad)
    actual = digest_bytes(bytes([BAD[0] ^ 1]) + BAD[1:])
    assert verify(store) == 1
    assert capsys.readouterr().out == (
        f"fetchproxy store verify: {store.root}\n"
        f"corrupt blob {bad} at {store.blob_path(bad)}: its bytes hash to {actual}\n"
        "summary: 2 blobs checked (1.1 KiB), 1 corrupt — move it aside with "
        "`fetchproxy store verify --repair`, then record again\n"
    )
    assert store.blob_path(bad).exists()


def test_repair_moves_corrupt_blobs_aside(
    store: DiskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = digest_bytes(BAD)
    damage(store, bad)
    damaged = store.blob_path(bad).read_bytes()
    assert verify(store, "--repair") == 1
    aside = store.root / "corrupt" / f"blake3-{hex_of(bad)}"
    assert capsys.readouterr().out == (
        f"fetchproxy store verify: {store.root}\n"
        f"corrupt blob {bad} at {store.blob_path(bad)}: its bytes hash to "
        f"{digest_bytes(damaged)}\n"
        f"  moved to {aside}\n"
        f"summary: 2 blobs checked (1.1 KiB), 1 corrupt — moved aside to {store.root}/corrupt; "
        "record again to fetch its body\n"
    )
    assert aside.read_bytes() == damaged
    assert not store.contains(bad)
    assert sorted(p.name for p in aside.parent.iterdir()) == [aside.name]
    assert verify(store) == 0
    capsys.readouterr()
    # recorded again, damaged again, repaired again: the first copy is kept
    assert store.put(BAD) == bad
    damage(store, bad)
    report = verify_store(store, repair=True)
    assert [b.moved_to for b in report.bad] == [aside.parent / f"{aside.name}-2"]
    assert aside.read_bytes() == damaged


def test_several_corrupt_blobs(store: DiskStore, capsys: pytest.CaptureFixture[str]) -> None:
    for body in (GOOD, BAD):
        damage(store, digest_bytes(body))
    assert verify(store, "--repair") == 1
    assert capsys.readouterr().out.endswith(
        f"summary: 2 blobs checked (1.1 KiB), 2 corrupt — moved aside to {store.root}/corrupt; "
        "record again to fetch their bodies\n"
    )
    assert list(store.digests()) == []


def test_an_unreadable_blob_counts_as_corrupt(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = digest_bytes(BAD)
    verify_blob = DiskStore.verify

    def failing_disk(self: DiskStore, digest: Digest) -> None:
        if digest == bad:
            error = OSError(errno.EIO, os.strerror(errno.EIO))
            raise StoreError(f"cannot read blob {digest}") from error
        verify_blob(self, digest)

    monkeypatch.setattr(DiskStore, "verify", failing_disk)
    assert verify(store) == 1
    assert capsys.readouterr().out.splitlines()[1] == (
        f"corrupt blob {bad} at {store.blob_path(bad)}: unreadable: Input/output error"
    )


def test_a_blob_removed_during_the_scan_is_skipped(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = digest_bytes(BAD)
    verify_blob = DiskStore.verify

    def removed_by_gc(self: DiskStore, digest: Digest) -> None:
        if digest == gone:
            raise MissingBlobError(digest, self.blob_path(digest))
        verify_blob(self, digest)

    monkeypatch.setattr(DiskStore, "verify", removed_by_gc)
    report = verify_store(store)
    assert (report.checked, report.bytes_checked, report.clean) == (1, len(GOOD), True)


def test_a_good_copy_published_before_the_move_is_put_back(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the check and the move, gc removed the bad blob and a record stored it anew."""
    bad = digest_bytes(BAD)
    damage(store, bad)
    blob = store.blob_path(bad)
    rename = os.rename

    def republished_first(src: str, dst: str, **dir_fds: int) -> None:
        if src == blob.name:
            blob.unlink()
            assert store.put(BAD) == bad
        rename(src, dst, **dir_fds)

    monkeypatch.setattr(os, "rename", republished_first)
    report = verify_store(store, repair=True)
    assert report.clean
    assert store.open(bad).read_all() == BAD
    assert list((store.root / "corrupt").iterdir()) == []


def test_no_store(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    with pytest.raises(NoStoreError) as caught:
        run_command("store", "verify", "--store", str(nowhere))
    assert str(caught.value) == (
        f"{nowhere}: no store here — point --store or FETCHPROXY_STORE at the store to verify "
        "(a store is created by the first `fetchproxy record`)"
    )
    assert caught.value.exit_status == 2


def test_an_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert run_command("store", "verify", "--store", str(tmp_path / "empty")) == 0
    assert capsys.readouterr().out.endswith("summary: 0 blobs checked (0 B), all intact\n")


def test_a_repair_the_store_refuses_is_an_error_naming_why(store: DiskStore) -> None:
    bad = digest_bytes(BAD)
    damage(store, bad)
    (store.root / "corrupt").write_text("a file where --repair puts corrupt blobs\n")
    with pytest.raises(StoreError) as caught:
        verify(store, "--repair")
    assert str(caught.value) == (
        f"cannot move {store.blob_path(bad)} aside into {store.root}/corrupt: File exists "
        f"({store.root}/corrupt) — --repair needs write access to the store"
    )
    assert store.blob_path(bad).exists()  # left where it was


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_blob_that_is_not_a_regular_file_is_reported_and_moved_aside(
    store: DiskStore, tmp_path: Path, kind: str
) -> None:
    """As users run it (a process of its own: a regression hangs only that, until the timeout)."""
    digest = digest_bytes(b"a body whose name holds no regular file")
    path = store.blob_path(digest)
    make_not_regular(path, kind, body=b"", elsewhere=tmp_path / "elsewhere")
    before = os.lstat(path)
    checked = run_fetchproxy(
        "store", "verify", "--store", str(store.root), timeout=SUBPROCESS_DEADLINE
    )
    assert (checked.returncode, checked.stderr) == (1, "")
    assert checked.stdout == (
        f"fetchproxy store verify: {store.root}\n"
        f"corrupt blob {digest} at {path}: not a regular file ({KINDS[kind]})\n"
        "summary: 3 blobs checked (1.1 KiB), 1 corrupt — move it aside with "
        "`fetchproxy store verify --repair`, then record again\n"
    )
    repaired = run_fetchproxy(
        "store", "verify", "--repair", "--store", str(store.root), timeout=SUBPROCESS_DEADLINE
    )
    aside = store.root / "corrupt" / f"blake3-{hex_of(digest)}"
    assert (repaired.returncode, repaired.stderr) == (1, "")
    assert f"\n  moved to {aside}\n" in repaired.stdout
    moved = os.lstat(aside)
    assert (moved.st_ino, moved.st_mode) == (before.st_ino, before.st_mode)  # the entry itself
    assert not os.path.lexists(path)
    assert store.open(digest_bytes(GOOD)).read_all() == GOOD
    again = run_fetchproxy(
        "store", "verify", "--store", str(store.root), timeout=SUBPROCESS_DEADLINE
    )
    assert (again.returncode, again.stdout.splitlines()[-1]) == (
        0,
        "summary: 2 blobs checked (1.1 KiB), all intact",
    )

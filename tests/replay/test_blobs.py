"""``VerifiedBlobs``: replay serves a blob, whole or in part, only from the file it verified."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.replay import blobs
from fetchproxy.replay.blobs import SMALL_BODY, VerifiedBlob, VerifiedBlobs, WrongSizeError
from fetchproxy.store import (
    BlobReader,
    ChangedBlobError,
    CorruptBlobError,
    DiskStore,
    MemoryStore,
    Store,
)

LARGE = bytes(range(256)) * 4096  # 1 MiB: more than a small body
SMALL = b"a small body\n" * 100
CHUNK = 64 * 1024
T = TypeVar("T")


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust identities at once, as for blobs not written in the last seconds."""
    monkeypatch.setattr(blobs, "RACY_NS", 0)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Digest]:
    """Every full rehash of an opened blob (``BlobReader.check``), in order."""
    seen: list[Digest] = []
    check = BlobReader.check

    def counted(self: BlobReader) -> None:
        seen.append(self.digest)
        check(self)

    monkeypatch.setattr(BlobReader, "check", counted)
    return seen


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def read(blob: VerifiedBlob) -> bytes:
    with blob:
        return b"".join(blob)


def change_in_place(path: Path, data: bytes, *, keep_mtime: bool = True) -> None:
    """Rewrite the blob file's bytes (same inode), putting its old mtime back if asked."""
    before = path.stat()
    path.chmod(0o644)
    path.write_bytes(data)
    path.chmod(0o444)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def other_bytes(data: bytes) -> bytes:
    return bytes(255 - b for b in data)


@pytest.fixture
def store(tmp_path: Path) -> DiskStore:
    return DiskStore(tmp_path / "store")


def test_a_part_of_a_blob_changed_in_place_after_its_verification_is_never_served(
    store: DiskStore, trusted: None
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    assert read(run(verified.open_verified(digest, len(LARGE), 10, 20))) == LARGE[10:20]
    change_in_place(store.blob_path(digest), other_bytes(LARGE))  # even with the old mtime
    with pytest.raises(CorruptBlobError, match=r"^corrupt blob in "):
        run(verified.open_verified(digest, len(LARGE), 10, 20))
    # and so on, whole or part, while the file stays as it is
    with pytest.raises(CorruptBlobError):
        run(verified.open_verified(digest, len(LARGE), 10, 20))
    with pytest.raises(CorruptBlobError):
        read(run(verified.open_verified(digest, len(LARGE))))


def test_a_trusted_part_costs_no_rehash_and_a_changed_file_one(
    store: DiskStore, trusted: None, checks: list[Digest]
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    for start in (0, 1000, len(LARGE) - 5):
        part = run(verified.open_verified(digest, len(LARGE), start, start + 5))
        assert read(part) == LARGE[start : start + 5]
    assert checks == [digest]  # verify() only: the file is the one verified, parts read as is
    path = store.blob_path(digest)
    os.utime(path)  # touched (a record found the same bytes again): not the same state
    assert read(run(verified.open_verified(digest, len(LARGE), 7, 9))) == LARGE[7:9]
    assert checks == [digest, digest]  # rehashed once, then trusted again
    assert read(run(verified.open_verified(digest, len(LARGE), 7, 9))) == LARGE[7:9]
    assert checks == [digest, digest]


def test_a_blob_published_anew_by_another_file_is_verified_again_and_served(
    store: DiskStore, trusted: None, checks: list[Digest]
) -> None:
    """gc removed the blob and a record stored the same bytes again: another inode, good."""
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    inode = store.blob_path(digest).stat().st_ino
    store.remove(digest)
    keep_inode_busy = store.writer()  # so the new file cannot get the same inode number
    keep_inode_busy.update(b"x")
    assert store.put(LARGE) == digest
    assert store.blob_path(digest).stat().st_ino != inode
    assert read(run(verified.open_verified(digest, len(LARGE), 100, 200))) == LARGE[100:200]
    assert checks == [digest, digest]  # verify(), then the new file
    keep_inode_busy.abort()


def test_a_part_is_cut_off_when_the_file_changes_while_it_streams(
    store: DiskStore, trusted: None
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    part = run(verified.open_verified(digest, len(LARGE), 0, 3 * CHUNK, chunk_size=CHUNK))
    pieces = iter(part)
    assert bytes(next(pieces)) == LARGE[:CHUNK]
    change_in_place(store.blob_path(digest), other_bytes(LARGE))
    handed_out: list[bytes] = []
    with pytest.raises(ChangedBlobError) as caught:
        handed_out.extend(bytes(piece) for piece in pieces)
    assert handed_out == [LARGE[CHUNK : 2 * CHUNK]]  # read before the change; the third is not
    assert str(caught.value) == (
        f"blob {digest} in {store.blob_path(digest)} changed while a part of it was served "
        "(it was changed); the rest will not be served — `fetchproxy lock verify` lists "
        "every missing or damaged blob"
    )
    part.close()


def test_a_part_is_cut_off_when_the_file_is_truncated_while_it_streams(
    store: DiskStore, trusted: None
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    part = run(verified.open_verified(digest, len(LARGE), 0, 3 * CHUNK, chunk_size=CHUNK))
    pieces = iter(part)
    next(pieces)
    path = store.blob_path(digest)
    path.chmod(0o644)
    os.truncate(path, CHUNK + 10)
    with pytest.raises(ChangedBlobError, match=rf"\(it ends at byte {2 * CHUNK}\)"):
        list(pieces)  # the second piece was read before the truncation: held back
    part.close()


def test_a_blob_written_within_the_racy_window_is_not_trusted_for_parts(
    store: DiskStore, checks: list[Digest]
) -> None:
    """Its ctime is too recent: a second change in the same timestamp tick would not show."""
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    for _ in range(2):
        assert read(run(verified.open_verified(digest, len(LARGE), 5, 10))) == LARGE[5:10]
    assert checks == [digest, digest, digest]


def test_a_whole_blob_streams_rehashed_and_its_file_is_trusted_for_parts_after(
    store: DiskStore, trusted: None, checks: list[Digest]
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    assert read(run(verified.open_verified(digest, len(LARGE)))) == LARGE  # first use: whole
    assert checks == []  # the stream itself was the check
    assert read(run(verified.open_verified(digest, len(LARGE), 1, 2))) == LARGE[1:2]
    assert checks == []  # and the file it read is trusted since
    change_in_place(store.blob_path(digest), other_bytes(LARGE))
    whole = run(verified.open_verified(digest, len(LARGE)))
    with pytest.raises(CorruptBlobError):
        read(whole)  # cut off before its last chunk, as ever
    with pytest.raises(CorruptBlobError):
        run(verified.open_verified(digest, len(LARGE), 1, 2))


def test_a_truncated_blob_is_corrupt_not_a_lock_with_the_wrong_size(
    store: DiskStore, trusted: None
) -> None:
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(LARGE)))
    path = store.blob_path(digest)
    path.chmod(0o644)
    os.truncate(path, 1000)
    with pytest.raises(CorruptBlobError):
        run(verified.open_verified(digest, len(LARGE)))
    store.put(SMALL)
    with pytest.raises(WrongSizeError, match="the lock says size = 5"):
        run(verified.open_verified(digest_bytes(SMALL), 5))


@pytest.mark.parametrize(("start", "end"), [(-1, 5), (5, 4), (0, len(LARGE) + 1)])
def test_a_span_outside_the_blob_is_refused(store: DiskStore, start: int, end: int) -> None:
    digest = store.put(LARGE)
    with pytest.raises(ValueError, match="are not within the"):
        run(VerifiedBlobs(store).open_verified(digest, len(LARGE), start, end))


class CountingStore(DiskStore):
    """A disk store that counts how often each blob is opened."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.opened: list[Digest] = []

    def open(self, digest: Digest, *, chunk_size: int = 1 << 20) -> BlobReader:
        self.opened.append(digest)
        return super().open(digest, chunk_size=chunk_size)


def test_small_bodies_are_read_once_and_then_answered_from_memory(tmp_path: Path) -> None:
    """The cache holds bytes that hashed right: the file changing later does not change them."""
    store = CountingStore(tmp_path / "store")
    digest = store.put(SMALL)
    verified = VerifiedBlobs(store)
    run(verified.verify(digest, len(SMALL)))  # verified by reading it into the cache
    assert run(verified.small_body(digest, len(SMALL))) == SMALL
    assert store.opened == [digest]
    change_in_place(store.blob_path(digest), other_bytes(SMALL))
    assert verified.cached(digest) == SMALL  # the verified bytes, never the changed file's
    assert run(verified.small_body(digest, len(SMALL))) == SMALL
    with pytest.raises(WrongSizeError):
        run(verified.small_body(digest, len(SMALL) - 1))
    assert store.opened == [digest]
    assert len(SMALL) <= SMALL_BODY


@pytest.fixture(params=["disk", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return DiskStore(tmp_path / "store") if request.param == "disk" else MemoryStore()


def test_both_stores_refuse_a_part_of_a_blob_damaged_since(any_store: Store, trusted: None) -> None:
    digest = any_store.put(LARGE)
    verified = VerifiedBlobs(any_store)
    run(verified.verify(digest, len(LARGE)))
    if isinstance(any_store, MemoryStore):
        any_store.corrupt(digest)
    else:
        path = any_store.blob_path(digest)
        assert path is not None
        change_in_place(path, other_bytes(LARGE))
    with pytest.raises(CorruptBlobError):
        run(verified.open_verified(digest, len(LARGE), 0, 10))


def test_a_lock_giving_a_large_blob_a_small_size_does_not_fill_the_cache(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-edited ``size = 5`` for a large blob: refused, and never read into memory."""
    digest = store.put(LARGE)
    verified = VerifiedBlobs(store)
    whole_reads: list[int] = []
    read_all = BlobReader.read_all

    def counted(self: BlobReader) -> bytes:
        whole_reads.append(self.size)
        return read_all(self)

    monkeypatch.setattr(BlobReader, "read_all", counted)
    with pytest.raises(WrongSizeError, match=f"the store holds {len(LARGE)} bytes"):
        run(verified.verify(digest, 5))
    assert verified.cached(digest) is None
    with pytest.raises(WrongSizeError):
        run(verified.small_body(digest, 5))
    assert verified.cached(digest) is None
    assert whole_reads == []  # hashed as it streamed, never joined into one bytes object

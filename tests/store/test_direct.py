"""The disk writer's direct path: past its first MiB a blob is hashed and written with
``O_DIRECT`` by a thread of its writer, in page-aligned batches, and the partial last batch
through the page cache; file systems that refuse ``O_DIRECT`` get the buffered path."""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.store import CorruptBlobError, DiskStore, StoreError
from fetchproxy.store.direct import DIRECT_BATCH, DIRECT_BUFFERS
from fetchproxy.store.layout import blob_relpath

MiB = 1 << 20
CHUNK = 64 << 10
FIX = "free space or fix permissions there, or pick another store with --store or FETCHPROXY_STORE"


def body(size: int) -> bytes:
    """Bytes that differ from block to block, so a misplaced block changes the digest."""
    return (bytes(range(251)) * (size // 251 + 1))[:size]


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def write_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fetchproxy-store-write"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DiskStore]:
    yield DiskStore(tmp_path / "store")
    assert write_threads() == []


class PwriteLog:
    """Every ``os.pwrite``: whether the file was ``O_DIRECT``, the offset and the length."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[bool, int, int]] = []
        self._real = os.pwrite
        monkeypatch.setattr(os, "pwrite", self)

    def __call__(self, fd: int, data: Any, offset: int) -> int:
        direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
        self.calls.append((direct, offset, len(data)))
        return self._real(fd, data, offset)


def test_direct_batches_are_sizes_the_disk_takes() -> None:
    assert DIRECT_BATCH % 4096 == 0
    assert DIRECT_BUFFERS >= 2


@pytest.mark.parametrize(
    "size",
    [
        0,
        1,
        4095,
        4096,
        4097,
        MiB - 1,
        MiB,
        MiB + 1,
        2 * MiB - 1,
        2 * MiB,
        2 * MiB + 1,
        5 * MiB + 4097,
    ],
)
@pytest.mark.parametrize("chunk", [CHUNK, 10_000])
def test_every_size_reads_back_exactly(store: DiskStore, size: int, chunk: int) -> None:
    data = body(size)
    with store.writer() as writer:
        for piece in chunked(data, chunk):
            writer.update(piece)
        went_direct = writer.direct
        assert writer.commit() == digest_bytes(data)
    # direct once a write starts past the first batch
    assert went_direct == (size > -(-DIRECT_BATCH // chunk) * chunk)
    path = store.blob_path(digest_bytes(data))
    assert path.stat().st_size == size  # no padding left behind
    assert store.open(digest_bytes(data)).read_all() == data
    assert store.temp_files() == []


def test_large_blob_is_written_direct_in_aligned_batches(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PwriteLog(monkeypatch)
    data = body(DIRECT_BATCH * 4 + 12_345)
    with store.writer() as writer:
        for piece in chunked(data, 10_000):
            writer.update(piece)
        digest = writer.commit()
    assert digest == digest_bytes(data)
    buffered = -(-DIRECT_BATCH // 10_000) * 10_000  # written before the first direct batch
    start = buffered - buffered % 4096  # whose last partial block the batch writes again
    full, tail = divmod(len(data) - start, DIRECT_BATCH)
    assert full >= 3
    assert tail > 0
    assert log.calls == [
        *((True, start + i * DIRECT_BATCH, DIRECT_BATCH) for i in range(full)),
        (False, start + full * DIRECT_BATCH, tail),
    ]
    store.verify(digest)


def test_a_file_system_without_o_direct_gets_the_buffered_path(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fcntl = fcntl.fcntl
    flushes: list[int] = []
    real_fdatasync = os.fdatasync

    def no_direct(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))  # tmpfs before Linux 6.6
        return real_fcntl(fd, cmd, arg)

    def fdatasync(fd: int) -> None:
        flushes.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(fcntl, "fcntl", no_direct)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    log = PwriteLog(monkeypatch)
    store = DiskStore(store.root, flush_every=MiB)
    data = body(4 * MiB + 1)
    with store.writer() as writer:
        for piece in chunked(data, CHUNK):
            writer.update(piece)
        assert not writer.direct
        assert writer.commit() == digest_bytes(data)
    assert log.calls == []
    assert flushes  # flushed in the background as before
    store.verify(digest_bytes(data))


def test_direct_off_keeps_the_page_cache_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PwriteLog(monkeypatch)
    store = DiskStore(tmp_path / "store", direct=False)
    data = body(3 * MiB)
    with store.writer() as writer:
        for piece in chunked(data, CHUNK):
            writer.update(piece)
        assert not writer.direct
        writer.commit()
    assert log.calls == []
    store.verify(digest_bytes(data))


def test_a_direct_write_the_file_system_refuses_is_written_through_the_cache(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    refused: list[int] = []

    def picky(fd: int, data: Any, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)  # wants another alignment than the writer's
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", picky)
    data = body(3 * MiB + 5)
    with store.writer() as writer:
        for piece in chunked(data, CHUNK):
            writer.update(piece)
        assert writer.commit() == digest_bytes(data)
    assert len(refused) == 1
    store.verify(digest_bytes(data))


def test_fsync_comes_after_every_direct_write_and_before_the_link(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = body(3 * MiB + 7)
    digest = digest_bytes(data)
    calls: list[tuple[str, Any]] = []
    real_pwrite, real_fsync, real_link = os.pwrite, os.fsync, os.link

    def pwrite(fd: int, view: Any, offset: int) -> int:
        calls.append(("pwrite", offset + len(view)))
        return real_pwrite(fd, view, offset)

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            calls.append(("fsync", os.fstat(fd).st_size))
        real_fsync(fd)

    def link(src: Path, dst: Path) -> None:
        calls.append(("link", Path(dst).relative_to(store.root).as_posix()))
        real_link(src, dst)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    with store.writer() as writer:
        for piece in chunked(data, CHUNK):
            writer.update(piece)
        assert writer.commit() == digest
    *writes, synced, linked = calls
    assert {name for name, _ in writes} == {"pwrite"}
    assert max(end for _, end in writes) == len(data)
    assert synced == ("fsync", len(data))
    assert linked == ("link", blob_relpath(digest).as_posix())


@pytest.mark.parametrize("when", ["mid-stream", "before-commit"])
def test_abort_stops_the_thread_and_removes_the_temp_file(store: DiskStore, when: str) -> None:
    writer = store.writer()
    for piece in chunked(body(5 * MiB), CHUNK):
        writer.update(piece)
    assert writer.direct
    assert len(write_threads()) == 1
    if when == "mid-stream":
        writer.abort()
    else:
        with pytest.raises(CorruptBlobError):
            writer.commit(digest_bytes(b"something else"))
    assert write_threads() == []
    assert store.temp_files() == []
    assert list(store.digests()) == []


def test_a_writer_dropped_without_commit_stops_its_thread(store: DiskStore) -> None:
    writer = store.writer()
    for piece in chunked(body(3 * MiB), CHUNK):
        writer.update(piece)
    (thread,) = write_threads()
    temp = writer.temp_path
    del writer
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
    temp.unlink()  # a leftover for garbage collection, like a crash's


def test_a_failed_direct_write_fails_the_next_update(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite

    def full_disk(fd: int, data: Any, offset: int) -> int:
        if offset >= 2 * MiB:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full_disk)
    writer = store.writer()
    with pytest.raises(StoreError) as caught:  # noqa: PT012 -- the error shows up a few chunks late
        for piece in chunked(body(64 * MiB), CHUNK):
            writer.update(piece)
    assert str(caught.value) == (
        f"cannot write to {writer.temp_path}: No space left on device — {FIX}"
    )
    assert write_threads() == []
    assert store.temp_files() == []
    with pytest.raises(ValueError, match="already aborted"):
        writer.commit()


def test_a_failed_last_write_fails_the_commit(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = body(2 * MiB + 100)
    writer = store.writer()
    for piece in chunked(data, CHUNK):
        writer.update(piece)

    def io_error(fd: int, data: Any, offset: int) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pwrite", io_error)
    with pytest.raises(StoreError) as caught:
        writer.commit()
    assert str(caught.value) == f"cannot write to {writer.temp_path}: Input/output error — {FIX}"
    assert write_threads() == []
    assert store.temp_files() == []
    assert list(store.digests()) == []


def test_a_temp_file_that_gives_back_less_than_was_written_is_an_error(
    store: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = store.writer()
    writer.update(body(MiB + 10))
    monkeypatch.setattr(os, "pread", lambda fd, size, offset: b"")
    with pytest.raises(StoreError) as caught:
        writer.update(b"more")
    assert str(caught.value) == (
        f"cannot write to {writer.temp_path}: the temp file gave back 0 of its last 10 bytes"
        f" — {FIX}"
    )
    assert store.temp_files() == []


def test_a_large_direct_blob_that_is_damaged_is_refused(store: DiskStore) -> None:
    data = body(3 * MiB + 3)
    with store.writer() as writer:
        for piece in chunked(data, CHUNK):
            writer.update(piece)
        digest = writer.commit()
    path = store.blob_path(digest)
    path.chmod(0o644)
    with path.open("r+b") as blob:
        blob.seek(2 * MiB)
        blob.write(b"X")
    path.chmod(0o444)
    with pytest.raises(CorruptBlobError, match="corrupt blob in"):
        store.verify(digest)

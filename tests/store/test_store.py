"""The content-addressed store: one conformance suite for both implementations,
then what only the disk store does (layout, crash leftovers, processes, errors)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from fetchproxy.digest import EMPTY, Digest, digest_bytes, hex_of
from fetchproxy.errors import FetchproxyError
from fetchproxy.store import (
    CorruptBlobError,
    DiskStore,
    MemoryStore,
    MissingBlobError,
    NotRegularBlobError,
    Store,
    StoreError,
    default_store_path,
)
from fetchproxy.store.layout import blob_relpath, digest_of_entry, is_temp_name
from tests.support import REPO
from tests.support.badblobs import KINDS, make_not_regular, within_deadline

BODY = bytes(range(256)) * 1000  # 256,000 bytes
BODY_DIGEST = digest_bytes(BODY)
OTHER = b"another body"
HINT = "`fetchproxy lock verify` lists every missing or damaged blob"
NOT_A_DIGEST = [
    "",
    "blake3:",
    "sha256:" + "0" * 64,
    "blake3:" + "A" * 64,
    "blake3:../../etc/passwd",
]


@contextlib.contextmanager
def raises(kind: type[Exception], message: str) -> Iterator[None]:
    """Like ``pytest.raises``, asserting the whole message the user sees."""
    with pytest.raises(kind) as caught:
        yield
    assert str(caught.value) == message


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def where(store: Store, digest: Digest) -> str:
    path = store.blob_path(digest)
    return str(path) if path is not None else "the in-memory store"


def corrupt(store: Store, digest: Digest, data: bytes | None = None) -> None:
    """Damage a stored blob the way a failing disk would (first bit flipped by default)."""
    if isinstance(store, MemoryStore):
        store.corrupt(digest, data)
        return
    path = store.blob_path(digest)
    assert path is not None
    old = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data if data is not None else bytes([old[0] ^ 1]) + old[1:])
    path.chmod(0o444)


@pytest.fixture(params=["disk", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "disk":
        return DiskStore(tmp_path / "store")
    return MemoryStore()


class TestStoreConformance:
    """What every ``Store`` promises; runs against ``DiskStore`` and ``MemoryStore``."""

    def test_streamed_blob_reads_back_under_its_digest(self, store: Store) -> None:
        with store.writer() as writer:
            for chunk in chunked(BODY, 65536):
                writer.update(chunk)
            assert writer.size == len(BODY)
            assert writer.commit() == BODY_DIGEST
        assert store.contains(BODY_DIGEST)
        assert store.size_of(BODY_DIGEST) == len(BODY)
        with store.open(BODY_DIGEST, chunk_size=100_000) as reader:
            assert reader.size == len(BODY)
            assert reader.digest == BODY_DIGEST
            assert reader.path == store.blob_path(BODY_DIGEST)
            assert [len(chunk) for chunk in reader] == [100_000, 100_000, 56_000]
        with store.open(BODY_DIGEST) as reader:
            assert reader.read_all() == BODY

    def test_put_is_writer_in_one_call(self, store: Store) -> None:
        assert store.put(BODY) == BODY_DIGEST
        assert store.put(OTHER) == digest_bytes(OTHER)
        assert list(store.digests()) == sorted([BODY_DIGEST, digest_bytes(OTHER)])

    def test_empty_blob(self, store: Store) -> None:
        with store.writer() as writer:
            writer.update(b"")
            assert writer.commit() == EMPTY
        assert store.size_of(EMPTY) == 0
        with store.open(EMPTY) as reader:
            assert list(reader) == []
        store.verify(EMPTY)

    def test_storing_again_keeps_one_blob(self, store: Store) -> None:
        assert store.put(BODY) == store.put(BODY) == BODY_DIGEST
        assert list(store.digests()) == [BODY_DIGEST]

    def test_missing_blob_names_digest_and_where(self, store: Store) -> None:
        missing = digest_bytes(b"never stored")
        path = store.blob_path(missing)
        detail = f"no file {path}" if path is not None else "not in the in-memory store"
        message = (
            f"blob {missing} is missing from the store ({detail}); "
            f"record again to fetch it — {HINT}"
        )
        for action in (store.open, store.size_of, store.verify, store.remove):
            with pytest.raises(MissingBlobError) as caught:
                action(missing)
            assert str(caught.value) == message
            assert caught.value.digest == missing
            assert caught.value.path == path
        assert not store.contains(missing)

    def test_missing_blob_error_is_a_file_not_found_and_a_fetchproxy_error(self) -> None:
        assert issubclass(MissingBlobError, FileNotFoundError)
        assert issubclass(MissingBlobError, FetchproxyError)
        assert issubclass(CorruptBlobError, StoreError)
        assert issubclass(StoreError, OSError)

    def test_corrupt_blob_is_never_handed_out_whole(self, store: Store) -> None:
        digest = store.put(BODY)
        corrupt(store, digest)
        damaged = bytes([BODY[0] ^ 1]) + BODY[1:]
        handed_out: list[bytes] = []
        with pytest.raises(CorruptBlobError) as caught, store.open(digest, chunk_size=100_000) as r:
            handed_out.extend(r)
        assert handed_out == chunked(damaged, 100_000)[:2]
        actual = digest_bytes(damaged)
        assert str(caught.value) == (
            f"corrupt blob in {where(store, digest)}: expected {digest}, got {actual}; "
            "it will not be served. `fetchproxy store verify --repair` moves it aside, then "
            f"record again — {HINT}"
        )
        assert (caught.value.expected, caught.value.actual) == (digest, actual)
        assert caught.value.path == store.blob_path(digest)

    @pytest.mark.parametrize(
        "damaged",
        [b"", BODY[:-1], BODY + b"!", b"short"],
        ids=["empty", "truncated", "longer", "other"],
    )
    def test_corruption_of_any_kind_is_detected(self, store: Store, damaged: bytes) -> None:
        digest = store.put(BODY)
        corrupt(store, digest, damaged)
        with pytest.raises(CorruptBlobError, match=r"^corrupt blob in "), store.open(digest) as r:
            r.read_all()
        with pytest.raises(CorruptBlobError) as caught:
            store.verify(digest)
        assert caught.value.actual == digest_bytes(damaged)

    def test_single_chunk_corrupt_blob_hands_out_nothing(self, store: Store) -> None:
        digest = store.put(OTHER)
        corrupt(store, digest)
        handed_out: list[bytes] = []
        with pytest.raises(CorruptBlobError), store.open(digest) as reader:
            handed_out.extend(reader)
        assert handed_out == []

    def test_verify_passes_on_a_good_blob(self, store: Store) -> None:
        store.verify(store.put(BODY))

    def test_commit_with_expected_digest(self, store: Store) -> None:
        with store.writer() as writer:
            writer.update(BODY)
            assert writer.commit(expected=BODY_DIGEST) == BODY_DIGEST
        assert store.contains(BODY_DIGEST)

    def test_commit_refuses_bytes_that_do_not_match_the_expected_digest(self, store: Store) -> None:
        expected = digest_bytes(b"what the lock says")
        writer = store.writer()
        writer.update(BODY)
        with pytest.raises(CorruptBlobError) as caught:
            writer.commit(expected=expected)
        assert str(caught.value) == (
            f"refused to store a blob: expected {expected}, got {BODY_DIGEST}; "
            f"nothing was written to {where(store, expected)}"
        )
        assert (caught.value.expected, caught.value.actual) == (expected, BODY_DIGEST)
        assert list(store.digests()) == []
        with raises(ValueError, "cannot update: this blob writer is already aborted"):
            writer.update(b"more")

    def test_abort_discards_and_is_idempotent(self, store: Store) -> None:
        writer = store.writer()
        writer.update(BODY)
        writer.abort()
        writer.abort()
        assert list(store.digests()) == []
        with raises(ValueError, "cannot commit: this blob writer is already aborted"):
            writer.commit()

    def test_leaving_with_block_without_commit_aborts(self, store: Store) -> None:
        with store.writer() as writer:
            writer.update(BODY)
        assert list(store.digests()) == []
        with pytest.raises(ValueError, match="already aborted"):
            writer.commit()

    def test_exception_in_with_block_aborts(self, store: Store) -> None:
        def record_until_reset() -> None:
            with store.writer() as writer:
                writer.update(BODY)
                raise RuntimeError("upstream reset")

        with pytest.raises(RuntimeError, match="upstream reset"):
            record_until_reset()
        assert list(store.digests()) == []

    def test_committed_writer_refuses_more_and_abort_is_a_no_op(self, store: Store) -> None:
        with store.writer() as writer:
            writer.update(BODY)
            writer.commit()
            writer.abort()
        with raises(ValueError, "cannot update: this blob writer is already committed"):
            writer.update(b"x")
        assert store.contains(BODY_DIGEST)

    def test_commit_async(self, store: Store) -> None:
        writer = store.writer()
        writer.update(BODY)
        assert asyncio.run(writer.commit_async()) == BODY_DIGEST
        assert store.contains(BODY_DIGEST)

    def test_reader_is_read_once(self, store: Store) -> None:
        with store.open(store.put(BODY)) as reader:
            assert reader.read_all() == BODY
            with raises(ValueError, f"blob {BODY_DIGEST} was already read; open it again"):
                iter(reader)

    def test_chunk_size_must_be_positive(self, store: Store) -> None:
        digest = store.put(BODY)
        with raises(ValueError, "chunk_size must be positive, got 0"):
            store.open(digest, chunk_size=0)

    def test_remove(self, store: Store) -> None:
        digest = store.put(BODY)
        store.put(OTHER)
        store.remove(digest)
        assert not store.contains(digest)
        assert list(store.digests()) == [digest_bytes(OTHER)]

    def test_a_reader_knows_which_file_it_has_open(self, store: Store) -> None:
        digest = store.put(BODY)
        with store.open(digest) as first, store.open(digest) as second:
            assert first.identity is not None
            assert first.identity == second.identity == first.current_identity()
            assert first.identity.size == len(BODY)
        corrupt(store, digest)
        with store.open(digest) as damaged:
            assert damaged.identity != first.identity

    def test_check_rehashes_and_leaves_the_reader_to_be_read(self, store: Store) -> None:
        digest = store.put(BODY)
        with store.open(digest, chunk_size=100_000) as reader:
            reader.check()
            assert reader.read_all() == BODY
        corrupt(store, digest)
        with pytest.raises(CorruptBlobError, match=r"^corrupt blob in "), store.open(digest) as r:
            r.check()

    def test_a_part_is_read_from_its_offset(self, store: Store) -> None:
        digest = store.put(BODY)
        with store.open(digest, chunk_size=100_000) as reader:
            parts = [bytes(piece) for piece in reader.part(50_000, 250_001)]
        assert parts == [BODY[50_000:150_000], BODY[150_000:250_000], BODY[250_000:250_001]]
        with store.open(digest) as reader:
            assert list(reader.part(7, 7)) == []
            with raises(ValueError, f"blob {digest} was already read; open it again"):
                iter(reader)
        with store.open(digest) as reader, pytest.raises(ValueError, match="not within"):
            reader.part(0, len(BODY) + 1)

    def test_prune_removes_only_blobs_unused_since_the_cutoff(self, store: Store) -> None:
        digest = store.put(BODY)
        store.put(OTHER)
        assert store.prune(digest, older_than=time.time() - 3600) is None  # written just now
        assert store.prune(digest, older_than=time.time() + 60, dry_run=True) == len(BODY)
        assert store.contains(digest)
        assert store.prune(digest, older_than=time.time() + 60) == len(BODY)
        assert not store.contains(digest)
        assert list(store.digests()) == [digest_bytes(OTHER)]
        assert store.prune(digest, older_than=time.time() + 60) is None  # gone: nothing freed
        assert store.restore_pruned() == 0
        if isinstance(store, DiskStore):
            assert list(store.temp_dir.iterdir()) == []

    def test_a_blob_stored_again_counts_as_used(self, store: Store) -> None:
        digest = store.put(BODY)
        time.sleep(0.05)
        decided = time.time()
        time.sleep(0.05)
        assert store.put(BODY) == digest  # a record fetched the same bytes again
        assert store.prune(digest, older_than=decided) is None
        assert store.open(digest).read_all() == BODY

    def test_quarantine_moves_a_corrupt_blob_out_of_the_way_and_keeps_its_bytes(
        self, store: Store
    ) -> None:
        digest = store.put(BODY)
        store.put(OTHER)
        assert store.quarantine(digest) is None  # intact: stays
        assert store.open(digest).read_all() == BODY
        assert store.quarantine(digest_bytes(b"never stored")) is None
        damaged = bytes([BODY[0] ^ 1]) + BODY[1:]
        names = []
        for _round in range(2):  # damaged, repaired, recorded again, damaged again
            corrupt(store, digest)
            moved = store.quarantine(digest)
            assert moved is not None
            assert moved.digest == digest
            names.append(moved.name)
            assert not store.contains(digest)
            assert list(store.digests()) == [digest_bytes(OTHER)]
            if isinstance(store, DiskStore):
                assert moved.path == store.quarantine_dir / moved.name
                assert moved.path.read_bytes() == damaged
            else:
                assert isinstance(store, MemoryStore)
                assert moved.path is None
                assert store.quarantined[moved.name] == damaged
            assert store.put(BODY) == digest
        assert names == [f"blake3-{hex_of(digest)}", f"blake3-{hex_of(digest)}-2"]

    @pytest.mark.parametrize("bad", NOT_A_DIGEST)
    def test_malformed_digests_are_refused_before_any_lookup(self, store: Store, bad: str) -> None:
        name = Digest(bad)
        actions: list[Callable[[Digest], object]] = [
            store.open,
            store.contains,
            store.size_of,
            store.remove,
            store.verify,
            store.blob_path,
            store.quarantine,
            lambda digest: store.prune(digest, older_than=0),
        ]
        for action in actions:
            with pytest.raises(ValueError, match="is not a digest"):
                action(name)
        writer = store.writer()
        writer.update(BODY)
        with pytest.raises(ValueError, match="is not a digest"):
            writer.commit(expected=name)
        writer.abort()

    def test_concurrent_writers_of_the_same_content(self, store: Store) -> None:
        threads = 8
        barrier = threading.Barrier(threads)
        results: list[Digest] = []

        def write() -> None:
            with store.writer() as writer:
                writer.update(BODY[:1000])
                barrier.wait(timeout=30)  # every writer holds a pending blob at once
                writer.update(BODY[1000:])
                results.append(writer.commit())

        workers = [threading.Thread(target=write) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert results == [BODY_DIGEST] * threads
        assert list(store.digests()) == [BODY_DIGEST]
        store.verify(BODY_DIGEST)
        if isinstance(store, DiskStore):
            assert store.temp_files() == []
            assert store.blob_path(BODY_DIGEST).stat().st_nlink == 1


# --- the disk store -----------------------------------------------------------------------


def test_layout_and_modes(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        store = DiskStore(tmp_path / "store")
        digest = store.put(BODY)
    finally:
        os.umask(old_umask)
    hex_digest = hex_of(digest)
    path = tmp_path / "store" / "blake3" / hex_digest[:2] / hex_digest[2:]
    assert store.blob_path(digest) == path
    assert path.read_bytes() == BODY
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    for directory in (tmp_path / "store", path.parent.parent, path.parent, store.temp_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["blake3", "tmp"]
    assert list(store.temp_dir.iterdir()) == []


def test_reading_creates_nothing(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    assert list(store.digests()) == []
    assert store.temp_files() == []
    assert not store.contains(BODY_DIGEST)
    with pytest.raises(MissingBlobError):
        store.open(BODY_DIGEST)
    assert not (tmp_path / "store").exists()


def test_write_protocol_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync the bytes, make them read-only, link into place, then fsync the directory."""
    store = DiskStore(tmp_path / "store")
    store.blob_path(BODY_DIGEST).parent.mkdir(parents=True)
    store.temp_dir.mkdir()
    calls: list[tuple[str, Any]] = []
    real_fsync, real_fchmod, real_link = os.fsync, os.fchmod, os.link

    def fsync(fd: int) -> None:
        calls.append(("fsync", "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        real_fsync(fd)

    def fchmod(fd: int, mode: int) -> None:
        calls.append(("fchmod", oct(mode)))
        real_fchmod(fd, mode)

    def link(src: Path, dst: Path) -> None:
        calls.append(("link", Path(dst).relative_to(store.root).as_posix()))
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fchmod", fchmod)
    monkeypatch.setattr(os, "link", link)
    store.put(BODY)
    assert calls == [
        ("fsync", "file"),
        ("fchmod", "0o444"),
        ("link", blob_relpath(BODY_DIGEST).as_posix()),
        ("fsync", "dir"),
    ]


def test_existing_blob_is_kept_and_touched_not_rewritten(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    path = store.blob_path(store.put(BODY))
    os.utime(path, (1_000_000, 1_000_000))  # last used long ago
    inode = path.stat().st_ino
    with store.writer() as writer:
        writer.update(BODY)
        temp = writer.temp_path
        assert temp.exists()
        writer.commit()
    after = path.stat()
    assert (after.st_ino, after.st_nlink, stat.S_IMODE(after.st_mode)) == (inode, 1, 0o444)
    assert abs(after.st_mtime - time.time()) < 60  # garbage collection sees it in use
    assert path.read_bytes() == BODY
    assert not temp.exists()


def test_blob_removed_between_link_and_touch_is_published_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "store")
    path = store.blob_path(store.put(BODY))
    old_inode = path.stat().st_ino
    real_utime = os.utime

    def gc_strikes_first(target: Path, *args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(os, "utime", real_utime)
        Path(target).unlink()  # a gc takes the blob away right after our link failed
        real_utime(target, *args, **kwargs)

    monkeypatch.setattr(os, "utime", gc_strikes_first)
    assert store.put(BODY) == BODY_DIGEST
    assert path.stat().st_ino != old_inode  # this writer's copy
    store.verify(BODY_DIGEST)
    assert store.temp_files() == []


def test_existing_blob_of_another_owner_is_kept_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "store")
    path = store.blob_path(store.put(BODY))

    def not_yours(target: Path, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", str(target))

    monkeypatch.setattr(os, "utime", not_yours)
    inode = path.stat().st_ino
    assert store.put(BODY) == BODY_DIGEST
    assert path.stat().st_ino == inode
    assert store.temp_files() == []


def test_temp_files_live_apart_and_are_listed_for_gc(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    writer = store.writer()
    writer.update(BODY)
    assert writer.temp_path.parent == store.temp_dir
    assert is_temp_name(writer.temp_path.name)
    assert writer.temp_path.name.startswith(f"blob-{os.getpid()}-")
    (leftover,) = store.temp_files()
    assert leftover.path == writer.temp_path
    assert leftover.size == len(BODY)
    assert abs(leftover.mtime - time.time()) < 60
    assert list(store.digests()) == []
    assert not store.contains(BODY_DIGEST)
    writer.abort()
    assert store.temp_files() == []


CHILD_PRELUDE = """
import sys
from pathlib import Path
from fetchproxy.store import DiskStore
from tests.support import REPO
store = DiskStore(Path(sys.argv[1]))
data = bytes(range(256)) * 4096
"""


def run_child(script: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    code = textwrap.dedent(CHILD_PRELUDE) + textwrap.dedent(script)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_temp_file_left_by_a_crash_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "store"
    crashed = run_child(
        """
        import os
        writer = store.writer()
        writer.update(data[:100000])
        os._exit(9)  # dies mid-write: no commit, no abort, no cleanup
        """,
        str(root),
    )
    assert crashed.wait(timeout=60) == 9
    assert crashed.stdout is not None
    crashed.stdout.close()
    store = DiskStore(root)
    (leftover,) = store.temp_files()
    assert leftover.size == 100000
    assert leftover.path.name.startswith(f"blob-{crashed.pid}-")
    data = bytes(range(256)) * 4096
    digest = digest_bytes(data)
    assert list(store.digests()) == []
    assert not store.contains(digest)
    with pytest.raises(MissingBlobError):
        store.open(digest)
    assert store.put(data) == digest
    assert list(store.digests()) == [digest]
    assert store.temp_files() == [leftover]


def test_listing_skips_junk(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    digest = store.put(BODY)
    shard = store.blob_path(digest).parent
    rest = "0" * 62
    junk = [
        shard / "README",
        shard / (rest + ".tmp"),
        shard / rest[:-1],
        shard.parent / "AB" / rest,
        shard.parent / "zz" / rest,
        shard.parent / "abc" / rest,
        shard.parent / "notes.txt",
        store.root / "blake3-old" / "00" / rest,
    ]
    for path in junk:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"junk")
    (store.temp_dir / "unrelated").write_bytes(b"junk")
    assert list(store.digests()) == [digest]
    assert store.temp_files() == []


def test_concurrent_writer_processes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    script = """
        writer = store.writer()
        writer.update(data[:500000])
        print("ready", flush=True)
        sys.stdin.readline()
        writer.update(data[500000:])
        print(writer.commit(), flush=True)
        """
    children = [run_child(script, str(root), stdin=subprocess.PIPE) for _ in range(4)]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        assert len(DiskStore(root).temp_files()) == 4  # all pending at the same time
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * 4
    digest = digest_bytes(bytes(range(256)) * 4096)
    assert outputs == [f"{digest}\n"] * 4
    store = DiskStore(root)
    assert list(store.digests()) == [digest]
    assert store.temp_files() == []
    store.verify(digest)


def test_large_blob_is_flushed_and_dropped_from_the_cache_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, int]] = []
    real_fdatasync, real_fadvise = os.fdatasync, os.posix_fadvise

    def fdatasync(fd: int) -> None:
        events.append(("fdatasync", os.fstat(fd).st_size))
        real_fdatasync(fd)

    def posix_fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, advice) == (0, os.POSIX_FADV_DONTNEED)
        events.append(("drop", length))
        real_fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "posix_fadvise", posix_fadvise)
    store = DiskStore(tmp_path / "store", flush_every=50_000)
    with store.writer() as writer:
        for chunk in chunked(BODY, 10_000):
            writer.update(chunk)
        assert writer.commit() == BODY_DIGEST
    store.verify(BODY_DIGEST)
    assert events
    for (sync, synced), (drop, dropped) in zip(events[::2], events[1::2], strict=True):
        # each flush covers at least flush_every new bytes, and drops only what it synced
        assert (sync, drop) == ("fdatasync", "drop")
        assert 50_000 <= dropped <= synced
        assert dropped % 10_000 == 0

    events.clear()
    DiskStore(tmp_path / "cached", flush_every=50_000, drop_flushed=False).put(BODY)
    assert {name for name, _ in events} == {"fdatasync"}
    events.clear()
    DiskStore(tmp_path / "late", flush_every=None).put(BODY)
    assert events == []


def test_background_flush_failure_fails_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    store = DiskStore(tmp_path / "store", flush_every=1)
    writer = store.writer()
    writer.update(BODY)
    with pytest.raises(StoreError) as caught:
        writer.commit()
    assert str(caught.value) == (
        f"cannot store blob {BODY_DIGEST} at {store.blob_path(BODY_DIGEST)}: Input/output error"
        " — free space or fix permissions there, or pick another store with --store or"
        " FETCHPROXY_STORE"
    )
    assert list(store.digests()) == []
    assert store.temp_files() == []


def test_write_failure_aborts_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "store")
    writer = store.writer()
    writer.update(b"first")

    def full_disk(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patched:
        patched.setattr(os, "write", full_disk)
        with pytest.raises(StoreError) as caught:
            writer.update(b"second")
    assert str(caught.value) == (
        f"cannot write to {writer.temp_path}: No space left on device — free space or fix"
        " permissions there, or pick another store with --store or FETCHPROXY_STORE"
    )
    assert store.temp_files() == []
    with pytest.raises(ValueError, match="already aborted"):
        writer.commit()


def test_store_root_that_is_a_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.write_bytes(b"not a directory")
    with pytest.raises(StoreError) as caught:
        DiskStore(root).writer()
    assert str(caught.value) == (
        f"cannot create a temp file in {root / 'tmp'}: File exists ({root}) — free space or fix"
        " permissions there, or pick another store with --store or FETCHPROXY_STORE"
    )


def test_file_systems_without_hard_links_fall_back_to_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src: Path, dst: Path) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    store = DiskStore(tmp_path / "store")
    path = store.blob_path(store.put(BODY))
    inode = path.stat().st_ino
    assert store.put(BODY) == BODY_DIGEST
    assert path.stat().st_ino == inode
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert store.temp_files() == []
    store.verify(BODY_DIGEST)


def test_disk_error_other_than_missing_on_open(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    path = store.blob_path(BODY_DIGEST)
    path.parent.parent.mkdir(parents=True)
    path.parent.write_bytes(b"")  # a file where the shard directory should be
    with raises(
        StoreError,
        f"cannot open blob {BODY_DIGEST}: Not a directory ({path}) — check the store's files and"
        " permissions, or pick another store with --store or FETCHPROXY_STORE",
    ):
        store.open(BODY_DIGEST)
    assert not store.contains(BODY_DIGEST)


def test_repr(tmp_path: Path) -> None:
    assert repr(DiskStore(tmp_path)) == f"DiskStore({str(tmp_path)!r})"
    memory = MemoryStore()
    memory.put(BODY)
    assert repr(memory) == "MemoryStore(<1 blobs>)"


# --- layout (pure) ------------------------------------------------------------------------


def test_blob_relpath() -> None:
    digest = Digest("blake3:" + "ab" + "c" * 62)
    assert blob_relpath(digest) == PurePosixPath("blake3", "ab", "c" * 62)


def test_digest_of_entry() -> None:
    rest = "c" * 62
    assert digest_of_entry("ab", rest) == "blake3:ab" + rest
    for shard, name in [("AB", rest), ("a", rest), ("ab", rest.upper()), ("ab", rest + ".tmp")]:
        assert digest_of_entry(shard, name) is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"FETCHPROXY_STORE": "/srv/cas", "XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/srv/cas"),
        ({"FETCHPROXY_STORE": "rel/cas"}, "rel/cas"),
        ({"FETCHPROXY_STORE": "", "XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/c/fetchproxy/store"),
        ({"XDG_CACHE_HOME": "relative", "HOME": "/h"}, "/h/.cache/fetchproxy/store"),
        ({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/fetchproxy/store"),
        ({"HOME": "/h"}, "/h/.cache/fetchproxy/store"),
    ],
)
def test_default_store_path(environ: dict[str, str], expected: str) -> None:
    assert default_store_path(environ) == Path(expected)


def test_default_store_path_without_home_uses_the_password_database() -> None:
    assert default_store_path({}) == Path.home() / ".cache" / "fetchproxy" / "store"


# --- only regular files are blobs -----------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_blob_that_is_not_a_regular_file_is_a_corrupt_blob(tmp_path: Path, kind: str) -> None:
    """A FIFO would hang a reader, a link to /dev/zero never end: both are refused at once."""
    store = DiskStore(tmp_path / "store")
    store.put(OTHER)
    path = store.blob_path(BODY_DIGEST)
    make_not_regular(path, kind, body=BODY, elsewhere=tmp_path / "elsewhere")
    message = (
        f"corrupt blob in {path}: not a regular file ({KINDS[kind]}); it will not be served. "
        "`fetchproxy store verify --repair` moves it aside, then record again — "
        f"{HINT}"
    )
    fifos = (path, tmp_path / "elsewhere" / "fifo")
    assert store.contains(BODY_DIGEST)  # the name is taken, by a corrupt blob
    assert list(store.digests()) == sorted([BODY_DIGEST, digest_bytes(OTHER)])
    for action in (store.open, store.size_of, store.verify):
        with pytest.raises(CorruptBlobError) as caught:
            within_deadline(lambda action=action: action(BODY_DIGEST), fifos=fifos)  # type: ignore[misc]
        assert str(caught.value) == message
        assert isinstance(caught.value, NotRegularBlobError)
        assert (caught.value.expected, caught.value.actual) == (BODY_DIGEST, None)
        assert (caught.value.path, caught.value.kind) == (path, KINDS[kind])
        assert caught.value.problem == f"not a regular file ({KINDS[kind]})"
    if kind == "link-to-dev-zero":
        assert stat.S_ISCHR(Path("/dev/zero").stat().st_mode)  # the target is left alone

"""Measure the store: a big body through the writer, many small blobs, the reader.

    python bench/store_bench.py [--size 1GiB] [--small 10000] [--repeat 3] [--all] [--dir DIR]

(a) stores one ``--size`` body through ``DiskStore.writer()`` in 64 KiB chunks
    and compares it, in the same run, with BLAKE3 alone and with a plain
    write + fsync of the same bytes;
(b) stores ``--small`` small blobs from an asyncio event loop: the blocking
    writer on the loop, ``run_in_executor`` and aiofiles, reporting files/s and
    the worst stall the loop saw;
(c) reads the big blob back through the verifying reader, cold and warm.

``--all`` adds the rows behind the design's choices (about 40 s more): the
writer without dropping flushed pages and without early flushing, plain files,
and one-blob-at-a-time runs.

Rates are decimal (1 GB = 10**9 bytes). Rows of (a) and (c) run ``--repeat``
times, interleaved, and report best and median: this machine is a VM whose
page-cache writes vary a lot from one run to the next.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import aiofiles
import aiofiles.os
import blake3

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.store import DiskStore

CHUNK = 64 << 10
POOL = [os.urandom(CHUNK) for _ in range(16)]  # 1 MiB of distinct chunks, cycled
UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
UNITS |= {"g": 1 << 30, "gib": 1 << 30}
IN_FLIGHT = 16


def parse_size(text: str) -> int:
    """``1GiB``, ``256MiB``, ``4096`` → bytes (binary units)."""
    match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    if not match or match[2].lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1GiB, 256MiB or 4096")
    return int(match[1]) * UNITS[match[2].lower()]


def body(size: int) -> Iterator[bytes]:
    for index in range(size // CHUNK):
        yield POOL[index % len(POOL)]
    if size % CHUNK:
        yield POOL[0][: size % CHUNK]


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def table(title: str, rows: dict[str, list[float]], extra: dict[str, str]) -> None:
    print(f"\n{title}")
    print(f"  {'what':<42}{'best':>7}{'median':>8}  {extra.get('', '')}".rstrip())
    for name, rates in rows.items():
        line = f"  {name:<42}{max(rates):>7.2f}{statistics.median(rates):>8.2f}"
        print(f"{line}  {extra[name]}" if name in extra else line)


# --- (a) a big body -----------------------------------------------------------------------


def hash_only(size: int, threads: int) -> None:
    hasher = blake3.blake3(max_threads=threads)
    for chunk in body(size):
        hasher.update(chunk)
    hasher.hexdigest()


def write_fsync(size: int, path: Path) -> None:
    path.unlink(missing_ok=True)  # like the writer rows: free the last run's file first
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in body(size):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class WriterRuns:
    """One store's passes through the writer: the last digest and what calls cost."""

    store: DiskStore
    digest: Digest | None = None
    worst_update: float = 0.0
    commits: list[float] = field(default_factory=list)

    def once(self, size: int) -> None:
        if self.digest is not None:
            self.store.remove(self.digest)
        with self.store.writer() as writer:
            for chunk in body(size):
                start = time.perf_counter()
                writer.update(chunk)
                self.worst_update = max(self.worst_update, time.perf_counter() - start)
            start = time.perf_counter()
            self.digest = writer.commit()
            self.commits.append(time.perf_counter() - start)


def big_body(size: int, repeat: int, work: Path, *, everything: bool) -> WriterRuns:
    writers = {
        "DiskStore writer (update + commit)": WriterRuns(DiskStore(work / "big")),
        "  same, through the page cache (direct=False)": WriterRuns(
            DiskStore(work / "big-buffered", direct=False)
        ),
    }
    if everything:  # the alternatives the defaults were chosen against
        writers["  page cache, flushed pages kept in cache"] = WriterRuns(
            DiskStore(work / "big-cached", direct=False, drop_flushed=False)
        )
        writers["  page cache, no early background flush"] = WriterRuns(
            DiskStore(work / "big-late", direct=False, flush_every=None)
        )
    for runs in writers.values():  # create the directories outside the timing
        runs.store.remove(runs.store.put(b"warm-up"))

    def writing(runs: WriterRuns) -> Callable[[], None]:
        return lambda: runs.once(size)

    hashing, plain = "BLAKE3 alone, 1 thread", "plain os.write + fsync, no hash"
    cases: list[tuple[str, Callable[[], object]]] = [
        (hashing, lambda: hash_only(size, 1)),
        ("BLAKE3 alone, max_threads=AUTO", lambda: hash_only(size, blake3.blake3.AUTO)),
        (plain, lambda: write_fsync(size, work / "plain.bin")),
        *((name, writing(runs)) for name, runs in writers.items()),
    ]
    rows: dict[str, list[float]] = {}
    for _ in range(repeat):
        for name, action in cases:
            rows.setdefault(name, []).append(size / timed(action) / 1e9)
    (work / "plain.bin").unlink()

    extra = {"": "worst update()  median commit()"}
    for name, runs in writers.items():
        commit = statistics.median(runs.commits)
        extra[name] = f"{runs.worst_update * 1000:>9.1f} ms {commit * 1000:>11.0f} ms"
    gib = size / (1 << 30)
    table(f"(a) one {gib:.2f} GiB body in 64 KiB chunks, GB/s, {repeat} runs", rows, extra)
    writer = statistics.median(rows[cases[3][0]])
    print(
        f"  writer / BLAKE3 alone: {writer / statistics.median(rows[hashing]):.2f}; "
        f"writer / plain write + fsync: {writer / statistics.median(rows[plain]):.2f} (medians)"
    )
    main_runs = next(iter(writers.values()))
    for runs in list(writers.values())[1:]:
        if runs.digest is not None:
            runs.store.remove(runs.digest)
    return main_runs


# --- (b) many small blobs -----------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def aiofiles_put(store: DiskStore, data: bytes) -> Digest:
    """The writer's protocol with every file operation through aiofiles."""
    digest = digest_bytes(data)
    target = store.blob_path(digest)
    if await aiofiles.os.path.exists(target):
        return digest
    temp = store.temp_dir / f"blob-{os.getpid()}-{secrets.token_hex(8)}.tmp"
    async with aiofiles.open(temp, "xb") as file:
        await file.write(data)
        await file.flush()
        await aiofiles.os.wrap(os.fsync)(file.fileno())
    await aiofiles.os.wrap(os.chmod)(temp, 0o444)
    await aiofiles.os.makedirs(target.parent, exist_ok=True)
    try:
        await aiofiles.os.link(temp, target)
    except FileExistsError:
        pass
    else:
        await aiofiles.os.wrap(fsync_dir)(target.parent)
    await aiofiles.os.unlink(temp)
    return digest


def plain_file(directory: Path, index: int, data: bytes) -> None:
    fd = os.open(directory / f"{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


async def with_ticker(job: Awaitable[None]) -> float:
    """Run ``job`` while a 1 ms ticker measures the loop's worst stall (seconds)."""
    loop = asyncio.get_running_loop()
    done = False
    worst = 0.0

    async def tick() -> None:
        nonlocal worst
        while not done:
            start = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - start - 0.001)

    ticker = asyncio.create_task(tick())
    try:
        await job
    finally:
        done = True
        await ticker
    return worst


async def bounded(put: Callable[[bytes], Awaitable[object]], blobs: list[bytes]) -> None:
    """``put`` every blob, at most ``IN_FLIGHT`` at a time."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(data: bytes) -> None:
        async with gate:
            await put(data)

    await asyncio.gather(*(one(data) for data in blobs))


async def small_blobs(count: int, size: int, work: Path, *, everything: bool) -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor())  # min(32, CPUs + 4) workers
    blobs = [os.urandom(size) for _ in range(count)]

    async def blocking(store: DiskStore) -> None:
        for data in blobs:
            store.put(data)
            await asyncio.sleep(0)  # each blob its own loop callback, as in the proxy

    async def plain(store: DiskStore) -> None:
        for index, data in enumerate(blobs):
            plain_file(store.root, index, data)
            await asyncio.sleep(0)

    async def executor(store: DiskStore) -> None:
        await bounded(lambda data: loop.run_in_executor(None, store.put, data), blobs)

    async def executor_serial(store: DiskStore) -> None:
        for data in blobs:
            await loop.run_in_executor(None, store.put, data)

    async def with_aiofiles(store: DiskStore) -> None:
        await bounded(lambda data: aiofiles_put(store, data), blobs)

    async def aiofiles_serial(store: DiskStore) -> None:
        for data in blobs:
            await aiofiles_put(store, data)

    cases: list[tuple[str, Callable[[DiskStore], Awaitable[None]]]] = [
        ("DiskStore.put, blocking on the loop", blocking),
        (f"run_in_executor(put), {IN_FLIGHT} in flight", executor),
        (f"aiofiles, {IN_FLIGHT} in flight", with_aiofiles),
    ]
    if everything:
        cases += [
            ("plain open+write+fsync, no store, blocking", plain),
            ("run_in_executor(put), one at a time", executor_serial),
            ("aiofiles, one at a time", aiofiles_serial),
        ]
    print(f"\n(b) {count:,} blobs of {size:,} bytes from an event loop")
    print(f"  {'what':<42}{'files/s':>9}{'worst loop stall':>19}")
    for name, case in cases:
        store = DiskStore(work / re.sub(r"\W+", "-", name))
        store.put(b"warm-up")  # create tmp/ and blake3/ outside the timing
        start = time.perf_counter()
        stall = await with_ticker(case(store))
        rate = count / (time.perf_counter() - start)
        print(f"  {name:<42}{rate:>9,.0f}{stall * 1000:>16.1f} ms")
        shutil.rmtree(store.root)


# --- (c) reading --------------------------------------------------------------------------


def drop_from_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_plain(path: Path, chunk_size: int) -> None:
    with path.open("rb", buffering=0) as file:
        while file.read(chunk_size):
            pass


def read_verified(store: DiskStore, digest: Digest, chunk_size: int) -> None:
    with store.open(digest, chunk_size=chunk_size) as reader:
        for _chunk in reader:
            pass


def reading(runs: WriterRuns, repeat: int) -> None:
    store, digest = runs.store, runs.digest
    assert digest is not None
    size, path = store.size_of(digest), store.blob_path(digest)

    def cold() -> None:
        drop_from_cache(path)
        start = time.perf_counter()
        read_verified(store, digest, 1 << 20)
        cold_times.append(time.perf_counter() - start)

    cold_times: list[float] = []
    cases: list[tuple[str, Callable[[], None]]] = [
        ("plain read, warm, 1 MiB chunks, no hash", lambda: read_plain(path, 1 << 20)),
        ("BlobReader, warm, 1 MiB chunks", lambda: read_verified(store, digest, 1 << 20)),
        ("BlobReader, warm, 64 KiB chunks", lambda: read_verified(store, digest, CHUNK)),
    ]
    rows: dict[str, list[float]] = {}
    for _ in range(repeat):
        cold()
        for name, action in cases:
            rows.setdefault(name, []).append(size / timed(action) / 1e9)
    rows = {"BlobReader, cold, 1 MiB chunks": [size / t / 1e9 for t in cold_times], **rows}
    table(f"(c) reading the {size / (1 << 30):.2f} GiB blob back (rehashing), GB/s", rows, {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="big body (1GiB)")
    parser.add_argument("--small", type=int, default=10_000, help="small blobs (10000)")
    parser.add_argument("--small-size", type=parse_size, default=1024, help="bytes each (1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of (a) and (c) (3)")
    parser.add_argument("--all", action="store_true", help="add the rows behind the defaults")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (a temp dir)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="fetchproxy-store-bench-", dir=args.dir))
    versions = ", ".join(f"{name} {version(name)}" for name in ("blake3", "aiofiles"))
    print(f"store bench: {os.cpu_count()} CPUs, Python {platform.python_version()}, {versions}")
    print(f"writing in {work}")
    times = []
    try:
        start = time.perf_counter()
        runs = big_body(args.size, args.repeat, work, everything=args.all)
        times.append(time.perf_counter())
        asyncio.run(small_blobs(args.small, args.small_size, work, everything=args.all))
        times.append(time.perf_counter())
        reading(runs, args.repeat)
        times.append(time.perf_counter())
    finally:
        shutil.rmtree(work)
    spans = [later - earlier for earlier, later in zip([start, *times], times, strict=False)]
    print(
        f"\ntook {sum(spans):.1f} s: "
        + ", ".join(f"({part}) {span:.1f} s" for part, span in zip("abc", spans, strict=True))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Many blobs moved at once: a bounded pool of threads, progress, failures collected.

``run_transfers(items, work, ...)`` calls ``work(item, meter)`` for every item on at most
``concurrency`` worker threads, handing out items only as threads free up (so memory does not
grow with the number of items). ``work`` reports the bytes it moves to the ``Meter``; the
calling thread turns them into a ``Progress`` for ``on_progress`` at once, then at most every
``interval`` seconds (however many items finish meanwhile), and once at the end, so a CLI can
redraw a terminal line or print one summary line without any locking or timing of its own.

Failures: a ``StoreError`` from ``work`` is that item's failure and the others go on, unless
``stops_all(error)`` says it would fail every item alike (refused credentials, an unreachable
store): then no new item starts, and the ones never started come back as not attempted. Any
other exception is a bug; it stops the pool and propagates. So does ``KeyboardInterrupt``: the
meter then raises ``TransferCancelled`` in every worker at its next chunk, so writers abort and
leave nothing half-written behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

from fetchproxy.store.base import StoreError

T = TypeVar("T")
R = TypeVar("R")


class TransferCancelled(Exception):  # noqa: N818 -- a signal to workers, not an error to report
    """Raised in workers when the transfer as a whole was interrupted."""


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Where a transfer stands: for a progress line, or for the summary at the end."""

    objects_done: int
    objects_total: int
    bytes_done: int
    bytes_total: int | None
    elapsed: float
    final: bool

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.bytes_done / self.elapsed if self.elapsed > 0 else 0.0


ProgressCallback = Callable[[Progress], None]


class Meter:
    """Bytes moved so far, added to from the worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = 0
        self._cancelled = threading.Event()

    @property
    def bytes(self) -> int:
        """The bytes reported so far."""
        with self._lock:
            return self._bytes

    def add(self, count: int) -> None:
        """Count ``count`` more bytes; ``TransferCancelled`` once the transfer was interrupted."""
        if self._cancelled.is_set():
            raise TransferCancelled
        with self._lock:
            self._bytes += count

    def check(self) -> None:
        """``TransferCancelled`` if the transfer was interrupted."""
        if self._cancelled.is_set():
            raise TransferCancelled

    def cancel(self) -> None:
        """Make every worker stop at its next chunk."""
        self._cancelled.set()


@dataclass(frozen=True, kw_only=True)
class Outcome(Generic[T, R]):
    """What ``run_transfers`` did with each item."""

    done: tuple[tuple[T, R], ...]
    failed: tuple[tuple[T, StoreError], ...]
    not_attempted: tuple[T, ...]
    bytes: int
    seconds: float


def run_transfers(
    items: Iterable[T],
    work: Callable[[T, Meter], R],
    *,
    total: int,
    concurrency: int,
    stops_all: Callable[[StoreError], bool],
    bytes_total: int | None = None,
    on_progress: ProgressCallback | None = None,
    interval: float = 0.2,
) -> Outcome[T, R]:
    """Run ``work`` over ``items`` (``total`` of them); see the module docstring."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    meter = Meter()
    start = time.monotonic()
    pending = iter(items)
    running: dict[Future[R], T] = {}
    done: list[tuple[T, R]] = []
    failed: list[tuple[T, StoreError]] = []
    stopped = False

    def report(*, final: bool) -> None:
        if on_progress is not None:
            on_progress(
                Progress(
                    objects_done=len(done) + len(failed),
                    objects_total=total,
                    bytes_done=meter.bytes,
                    bytes_total=bytes_total,
                    elapsed=time.monotonic() - start,
                    final=final,
                )
            )

    report(final=False)  # where it starts: nothing done, the totals known
    reported = time.monotonic()
    with ThreadPoolExecutor(concurrency, thread_name_prefix="fetchproxy-transfer") as pool:
        finished_cleanly = False
        try:
            while True:
                while not stopped and len(running) < concurrency:
                    try:
                        item = next(pending)
                    except StopIteration:
                        break
                    running[pool.submit(work, item, meter)] = item
                if not running:
                    break
                finished, _ = wait(running, timeout=interval, return_when=FIRST_COMPLETED)
                for future in finished:
                    item = running.pop(future)
                    error = future.exception()
                    if error is None:
                        done.append((item, future.result()))
                    elif isinstance(error, StoreError):
                        failed.append((item, error))
                        stopped = stopped or stops_all(error)
                    else:
                        raise error
                now = time.monotonic()
                if now - reported >= interval:
                    report(final=False)
                    reported = now
            finished_cleanly = True
        finally:
            if not finished_cleanly:  # a bug or an interrupt: stop the workers at once
                meter.cancel()
    report(final=True)
    return Outcome(
        done=tuple(done),
        failed=tuple(failed),
        not_attempted=tuple(pending) if stopped else (),
        bytes=meter.bytes,
        seconds=time.monotonic() - start,
    )

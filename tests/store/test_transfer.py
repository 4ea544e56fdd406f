"""The transfer pool: bounded concurrency, progress in the calling thread, failures collected."""

from __future__ import annotations

import threading
import time

import pytest

from fetchproxy.store.base import StoreError
from fetchproxy.store.remote_errors import RemoteAccessError, RemoteMissingError
from fetchproxy.store.transfer import Meter, Progress, TransferCancelled, run_transfers


def never_stops(error: StoreError) -> bool:
    return False


def stops_on_access(error: StoreError) -> bool:
    return isinstance(error, RemoteAccessError)


def test_all_done_with_bounded_concurrency_and_progress() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    caller = threading.get_ident()
    seen: list[tuple[Progress, int]] = []

    def work(item: int, meter: Meter) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        meter.add(item)
        with lock:
            running -= 1
        return item * 2

    outcome = run_transfers(
        range(40),
        work,
        total=40,
        concurrency=4,
        stops_all=never_stops,
        bytes_total=sum(range(40)),
        on_progress=lambda p: seen.append((p, threading.get_ident())),
        interval=0.005,
    )
    assert sorted(outcome.done) == [(i, i * 2) for i in range(40)]
    assert outcome.failed == ()
    assert outcome.not_attempted == ()
    assert outcome.bytes == sum(range(40))
    assert most == 4
    assert all(thread == caller for _, thread in seen)
    final = seen[-1][0]
    assert final.final
    assert (final.objects_done, final.objects_total) == (40, 40)
    assert final.bytes_done == final.bytes_total == sum(range(40))
    assert final.rate > 0
    assert [p.final for p, _ in seen].count(True) == 1


def test_progress_is_reported_at_once_then_at_most_every_interval() -> None:
    """Many items finishing within one interval make one report, not one each: a terminal
    line redrawn per blob would flood the terminal on a pull of many small blobs."""
    seen: list[Progress] = []

    def work(item: int, meter: Meter) -> int:
        meter.add(1)
        return item

    run_transfers(
        range(200), work, total=200, concurrency=4, stops_all=never_stops, bytes_total=200,
        on_progress=seen.append, interval=60.0,
    )  # fmt: skip
    assert [(p.objects_done, p.bytes_done, p.final) for p in seen] == [
        (0, 0, False),  # at once: what is to come
        (200, 200, True),
    ]


def test_an_objects_own_failure_lets_the_others_go_on() -> None:
    def work(item: int, meter: Meter) -> int:
        if item % 5 == 0:
            raise RemoteMissingError(f"no object {item}", key=f"k{item}", http_status=404)
        return item

    outcome = run_transfers(range(20), work, total=20, concurrency=3, stops_all=stops_on_access)
    assert sorted(item for item, _ in outcome.failed) == [0, 5, 10, 15]
    assert len(outcome.done) == 16
    assert outcome.not_attempted == ()


def test_a_failure_that_would_fail_everything_stops_new_work() -> None:
    started: list[int] = []

    def work(item: int, meter: Meter) -> int:
        started.append(item)
        if item == 2:
            raise RemoteAccessError("refused")
        time.sleep(0.01)
        return item

    outcome = run_transfers(range(100), work, total=100, concurrency=2, stops_all=stops_on_access)
    assert [item for item, _ in outcome.failed] == [2]
    assert len(started) < 10
    assert len(outcome.done) + len(outcome.failed) + len(outcome.not_attempted) == 100
    assert set(outcome.not_attempted).isdisjoint(started)


def test_a_bug_propagates_and_cancels_the_workers() -> None:
    cancelled = threading.Event()

    def work(item: int, meter: Meter) -> int:
        if item == 0:
            raise KeyError("a bug")
        try:
            for _ in range(500):
                meter.add(1)
                time.sleep(0.002)
        except TransferCancelled:
            cancelled.set()
            raise
        return item

    with pytest.raises(KeyError, match="a bug"):
        run_transfers(range(3), work, total=3, concurrency=3, stops_all=never_stops)
    assert cancelled.is_set()


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_transfers([1], lambda i, m: i, total=1, concurrency=0, stops_all=never_stops)

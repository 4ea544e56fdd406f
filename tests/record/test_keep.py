"""Living with a lock: `record --keep`, the change report of a fresh record, `replay --exact`."""

from __future__ import annotations

import pytest

from fetchproxy.lock.file import load_lock
from tests.support.cli import read_events
from tests.support.origin import MEDIUM, SMALL
from tests.support.proxy import Rig


def urls(rig: Rig) -> set[str]:
    return {f.key.url for f in load_lock(rig.paths.lock).fetches}


def test_record_keep_answers_known_requests_from_the_store_and_adds_only_misses(
    rig: Rig, capfd: pytest.CaptureFixture[str]
) -> None:
    first = rig.start("record")
    assert rig.get(first, "/small.txt").body == SMALL
    assert rig.get(first, "/medium.bin").body == MEDIUM  # > 256 KiB: streamed from the store
    assert first.stop() == 0
    rig.origin.reset()

    keeper = rig.start("record", keep=True)
    assert rig.get(keeper, "/small.txt").body == SMALL
    assert rig.get(keeper, "/medium.bin").body == MEDIUM
    assert rig.get(keeper, "/redirect/end").status == 200
    assert keeper.stop() == 0

    # only the miss went upstream; nothing was removed
    assert [r.path for r in rig.origin.requests] == ["/redirect/end"]
    assert rig.origin.connections == 1
    base = rig.origin.base_url
    assert urls(rig) == {f"{base}/small.txt", f"{base}/medium.bin", f"{base}/redirect/end"}
    err = capfd.readouterr().err
    assert "2 fetches answered from the existing lock (--keep)" in err
    assert f"  + GET {base}/redirect/end" in err


def test_a_fresh_record_reports_what_changed_in_the_lock(
    rig: Rig, capfd: pytest.CaptureFixture[str]
) -> None:
    first = rig.start("record")
    rig.get(first, "/small.txt")
    rig.get(first, "/chunked.txt")
    assert first.stop() == 0
    capfd.readouterr()

    again = rig.start("record")
    rig.get(again, "/small.txt")
    rig.get(again, "/gzip.txt")
    assert again.stop() == 0
    base = rig.origin.base_url
    assert urls(rig) == {f"{base}/small.txt", f"{base}/gzip.txt"}  # exactly this run's fetches
    err = capfd.readouterr().err
    assert f"fetchproxy lock diff: {rig.paths.lock} (before) → {rig.paths.lock} (now)" in err
    assert f"  + GET {base}/gzip.txt" in err
    assert f"  - GET {base}/chunked.txt" in err
    assert "summary: 1 added, 1 removed" in err

    unchanged = rig.start("record")
    rig.get(unchanged, "/small.txt")
    rig.get(unchanged, "/gzip.txt")
    assert unchanged.stop() == 0
    assert f"fetchproxy: {rig.paths.lock} is unchanged" in capfd.readouterr().err


def test_replay_exact_fails_on_unused_entries_and_logs_them(
    rig: Rig, capfd: pytest.CaptureFixture[str]
) -> None:
    recorder = rig.start("record")
    rig.get(recorder, "/small.txt")
    rig.get(recorder, "/chunked.txt")
    assert recorder.stop() == 0

    relaxed = rig.start("replay")
    assert rig.get(relaxed, "/small.txt").body == SMALL
    assert relaxed.stop() == 0

    strict = rig.start("replay", exact=True)
    assert rig.get(strict, "/small.txt").body == SMALL
    assert strict.stop() == 3
    err = capfd.readouterr().err
    assert "fetchproxy: 1 of 2 lock entries went unused" in err
    assert (
        f"fetchproxy: --exact: the build did not use exactly {rig.paths.lock} (0 refused, 1 unused)"
        in err
    )
    base = rig.origin.base_url
    assert read_events(rig.paths.log, unused=True) == [
        {"event": "unused", "key": {"method": "GET", "url": f"{base}/chunked.txt"}}
    ]

    complete = rig.start("replay", exact=True)
    rig.get(complete, "/small.txt")
    rig.get(complete, "/chunked.txt")
    assert complete.stop() == 0

"""The record journal survives an interrupted run; `lock recover` turns it into a lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.journal import Journal, JournalError, journal_path, read_journal
from fetchproxy.lock import Fetch
from fetchproxy.lockfile import load_lock


def fetch(n: int) -> Fetch:
    return Fetch(
        method="GET",
        url=f"https://example.org/{n}",
        status=200,
        digest=digest_bytes(b"%d" % n),
        size=1,
    )


def test_entries_read_back_in_order_and_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "fetchproxy.lock.toml")
    journal = Journal(path)
    journal.append(fetch(1))
    journal.append(fetch(2))
    journal.close(remove=False)
    with path.open("a") as file:
        file.write('{"method": "GET", "url": "https://exa')  # killed mid-write
    assert list(read_journal(path)) == [fetch(1), fetch(2)]


def test_a_bad_line_in_the_middle_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.journal"
    path.write_text('not json\n{"method": "GET"}\n')
    with pytest.raises(JournalError, match=r"x\.journal:1: not a journal line"):
        list(read_journal(path))


def test_lock_recover_writes_the_lock_and_removes_the_journal(tmp_path: Path) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    journal = Journal(journal_path(lock))
    for n in (3, 1, 2, 1):
        journal.append(fetch(n))
    journal.close(remove=False)
    result = subprocess.run(
        [sys.executable, "-m", "fetchproxy", "lock", "recover", "--lock", str(lock)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"fetchproxy: {lock}: recovered 3 fetches from {journal_path(lock)}\n"
    assert [f.url for f in load_lock(lock).fetches] == [fetch(n).url for n in (1, 2, 3)]
    assert not journal_path(lock).exists()

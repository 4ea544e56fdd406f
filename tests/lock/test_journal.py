"""The record journal survives an interrupted run; `lock recover` turns it into a lock."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.files import WriteError
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import load_lock, write_lock
from fetchproxy.lock.journal import Journal, JournalError, journal_mode, journal_path, read_journal
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.record import book as record_book
from tests.support.cli import run_command, run_fetchproxy


def fetch(n: int) -> Fetch:
    return Fetch(
        key=RequestKey(method="GET", url=f"https://example.org/{n}"),
        status=200,
        digest=digest_bytes(b"%d" % n),
        size=1,
    )


def recover(lock: Path) -> subprocess.CompletedProcess[str]:
    """``fetchproxy lock recover --lock LOCK``, as a user runs it."""
    return run_fetchproxy("lock", "recover", "--lock", str(lock))


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
    result = recover(lock)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"fetchproxy: {lock}: recovered 3 fetches from {journal_path(lock)}\n"
    assert [f.key.url for f in load_lock(lock).fetches] == [fetch(n).key.url for n in (1, 2, 3)]
    assert not journal_path(lock).exists()


def test_the_journal_is_made_with_its_first_fetch_and_says_whether_the_run_keeps(
    tmp_path: Path,
) -> None:
    for keep in (False, True):
        path = tmp_path / f"keep-{keep}.journal"
        journal = Journal(path, keep=keep)
        assert not path.exists()  # a run that records nothing leaves no journal
        journal.append(fetch(1))
        journal.close(remove=False)
        assert path.read_text().splitlines()[0] == f'{{"journal": 1, "keep": {str(keep).lower()}}}'
        assert journal_mode(path) == ("keep" if keep else "fresh")
        assert list(read_journal(path)) == [fetch(1)]
    older = tmp_path / "older.journal"  # before the first line said how the run recorded
    older.write_text(json.dumps(fetch(2).to_dict()) + "\n")
    assert list(read_journal(older)) == [fetch(2)]
    assert journal_mode(older) == "older"


def test_recovering_a_journal_without_a_fetch_leaves_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([fetch(1)]))
    before = lock.read_bytes()
    journal_path(lock).write_text("")  # an older run that failed before its first fetch
    result = recover(lock)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"fetchproxy: {lock}: {journal_path(lock)} held no fetch; removed it, "
        "the lock is unchanged\n"
    )
    assert lock.read_bytes() == before
    assert not journal_path(lock).exists()


def test_a_lock_recover_cannot_write_is_an_error_and_keeps_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    journal = Journal(journal_path(lock))
    journal.append(fetch(1))
    journal.close(remove=False)

    def read_only(path: Path, lock: Lock) -> bool:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(record_book, "write_lock", read_only)
    with pytest.raises(WriteError) as caught:
        run_command("lock", "recover", "--lock", str(lock))
    unchanged = "Read-only file system — the lock is unchanged"
    assert str(caught.value) == f"cannot write {lock}: {unchanged}"
    assert journal_path(lock).exists()


def test_an_older_journal_is_recovered_onto_the_lock_dropping_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([fetch(1), fetch(2)]))
    # a journal from before its first line said how the run recorded: maybe a --keep run
    journal_path(lock).write_text(json.dumps(fetch(3).to_dict()) + "\n")
    result = recover(lock)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"fetchproxy: {lock}: recovered 1 fetch from {journal_path(lock)} on top of its "
        "2 entries (an older journal: nothing is removed)\n"
    )
    assert [f.key.url for f in load_lock(lock).fetches] == [fetch(n).key.url for n in (1, 2, 3)]


def test_a_journal_whose_last_write_fails_is_closed_all_the_same(tmp_path: Path) -> None:
    """A full disk failed the flush in close(): the file stayed open (and its lock held) for
    the rest of the process."""
    path = journal_path(tmp_path / "fetchproxy.lock.toml")
    journal = Journal(path)
    journal.append(fetch(1))
    fd = journal._file.fileno() if journal._file is not None else -1
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, fd)  # from here on the journal's writes (and its fsync) fail
    os.close(full)
    with pytest.raises(OSError, match="Invalid argument"):  # fsync of a character device
        journal.close(remove=False)
    with pytest.raises(OSError, match="Bad file descriptor") as closed:
        os.fstat(fd)
    assert closed.value.errno == errno.EBADF
    assert list(read_journal(path)) == [fetch(1)]

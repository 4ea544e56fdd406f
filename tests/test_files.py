"""write_atomic: the target holds the old bytes or the new ones, never anything else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fetchproxy.files import write_atomic


def test_creates_a_file_with_the_given_mode_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "fetchproxy.lock.toml"
    old_umask = os.umask(0o077)
    try:
        write_atomic(target, b"version = 1\n")
        write_atomic(tmp_path / "private", b"x", mode=0o600)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"version = 1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600


def test_replaces_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "lock"
    target.write_bytes(b"old")
    with target.open("rb") as reader_of_old:
        write_atomic(target, b"new")
        assert reader_of_old.read() == b"old"  # a new file took the name; the old one is intact
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["lock"]


def test_temp_file_is_hidden_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    real_fchmod = os.fchmod

    def fchmod(fd: int, mode: int) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        real_fchmod(fd, mode)

    monkeypatch.setattr(os, "fchmod", fchmod)
    write_atomic(tmp_path / "lock", b"data")
    ((temp_name,),) = seen
    assert temp_name.startswith(".lock.")
    assert temp_name.endswith(".tmp")
    assert len(temp_name) == len(".lock.") + 16 + len(".tmp")


def test_failure_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "lock"
    target.write_bytes(b"old")

    def fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomic(target, b"new" * 1000)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["lock"]


def test_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "absent" / "lock", b"data")
    assert list(tmp_path.iterdir()) == []


def test_large_and_empty_contents(tmp_path: Path) -> None:
    big = os.urandom(3 << 20)
    write_atomic(tmp_path / "big", big)
    write_atomic(tmp_path / "empty", b"")
    assert (tmp_path / "big").read_bytes() == big
    assert (tmp_path / "empty").read_bytes() == b""

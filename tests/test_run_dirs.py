"""A run's temp directory (its ephemeral CA key inside) is removed by the next run if a SIGKILL
stopped its own clean-up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fetchproxy.run import RUN_DIR_PREFIX, remove_stale_run_dirs


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_only_directories_of_runs_that_are_gone_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / f"{RUN_DIR_PREFIX}{dead_pid()}-abc123"
    (stale / "ca").mkdir(parents=True)
    (stale / "ca" / "mitmproxy-ca.pem").write_text("the run's CA key\n")
    live = tmp_path / f"{RUN_DIR_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    other = tmp_path / f"{RUN_DIR_PREFIX}not-a-pid"  # an older fetchproxy's, or not ours
    other.mkdir()
    a_file = tmp_path / f"{RUN_DIR_PREFIX}{dead_pid()}-file"
    a_file.write_text("not a directory\n")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / f"{RUN_DIR_PREFIX}{dead_pid()}-link"
    link.symlink_to(target)

    assert remove_stale_run_dirs(tmp_path) == [stale]
    assert not stale.exists()
    assert live.is_dir()
    assert other.is_dir()
    assert a_file.is_file()
    assert link.is_symlink()
    assert target.is_dir()

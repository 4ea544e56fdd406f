"""A run's temp directory (its ephemeral CA key inside) is removed by the next run if a SIGKILL
stopped its own clean-up: a live run holds an flock on it, which the kernel drops at death."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from fetchproxy.run.rundir import RUN_DIR_PREFIX, RUN_LOCK, hold_run_dir, remove_stale_run_dirs

HOLD = """
import sys, time
from pathlib import Path
from fetchproxy.run.rundir import hold_run_dir
with hold_run_dir(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def run_dir(parent: Path, name: str) -> Path:
    directory = parent / f"{RUN_DIR_PREFIX}{name}"
    (directory / "ca").mkdir(parents=True)
    (directory / "ca" / "mitmproxy-ca.pem").write_text("the run's CA key\n")
    return directory


def test_only_directories_of_runs_that_are_gone_are_removed(tmp_path: Path) -> None:
    killed = run_dir(tmp_path, "killed")
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(killed)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "held\n"
    live = run_dir(tmp_path, "live")
    being_made = run_dir(tmp_path, "being-made")  # no lock file yet: never touched
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / RUN_LOCK).write_text("")
    link = tmp_path / f"{RUN_DIR_PREFIX}link"
    link.symlink_to(target)
    with hold_run_dir(live):
        assert remove_stale_run_dirs(tmp_path) == []  # the killed run is still alive
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        assert remove_stale_run_dirs(tmp_path) == [killed]
    assert not killed.exists()
    assert (live / RUN_LOCK).exists()
    assert being_made.is_dir()
    assert link.is_symlink()
    assert target.is_dir()
    assert sorted(p.name for p in live.iterdir()) == [RUN_LOCK, "ca"]

"""A run's private directory: made per run (0700, ``fetchproxy-run-…``), held while the run
lives, and removed by the next run when a SIGKILL left it behind.

It holds the run's ephemeral CA, whose key never leaves it, and the files the build is given.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

RUN_DIR_PREFIX = "fetchproxy-run-"
RUN_LOCK = ".run-lock"
"""A file in a run's directory that the run holds an ``flock`` on for as long as it lives."""


@contextlib.contextmanager
def run_dir() -> Iterator[Path]:
    """A fresh private directory for one run, held while it lives and removed when it ends;
    those of runs killed with SIGKILL are removed first."""
    remove_stale_run_dirs(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=RUN_DIR_PREFIX) as tmp, hold_run_dir(Path(tmp)):
        yield Path(tmp)


@contextlib.contextmanager
def hold_run_dir(directory: Path) -> Iterator[None]:
    """Hold ``directory`` as a live run's: an ``flock`` the kernel drops when the run dies.

    The lock file is locked under a temp name and then renamed into place, so a sweeping run
    never finds it unlocked while this run lives.
    """
    fd, name = tempfile.mkstemp(dir=directory, prefix=".run-lock-")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        Path(name).rename(directory / RUN_LOCK)
        yield
    finally:
        os.close(fd)


def remove_stale_run_dirs(parent: Path) -> list[Path]:
    """Remove the run directories in ``parent`` whose run is gone; which were removed.

    A run removes its directory (and the ephemeral CA key in it) itself, unless it was killed
    with SIGKILL. A run holds an ``flock`` on its directory's lock file while it lives (the
    kernel drops it when the process dies, whatever its PID namespace), so a directory whose
    lock can be taken is left over. Only this user's directories are touched; one without a
    lock file (being made, or from an older fetchproxy) is left alone.
    """
    removed = []
    for path in parent.glob(f"{RUN_DIR_PREFIX}*"):
        try:
            info = path.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            fd = os.open(path / RUN_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the run is alive
            continue
        else:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed

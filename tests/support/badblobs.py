"""Blob names that hold something other than a regular file, as a hostile or broken store has.

Reading such a "blob" the naive way hangs (a FIFO without a writer), never ends (a link to
``/dev/zero``) or serves bytes the store never verified (a link to a file elsewhere). The
store must open only regular files; these helpers make the other kinds, and run a store
operation with a deadline so that a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

import pytest

T = TypeVar("T")

KINDS: Final = {
    "fifo": "a FIFO",
    "link-to-fifo": "a symbolic link",
    "link-to-dev-zero": "a symbolic link",
    "link-to-good-copy": "a symbolic link",
    "directory": "a directory",
    "device": "a character device",
}
"""Each kind of non-regular blob the tests make, and how the store describes it."""

DEADLINE: Final = 10.0
"""Seconds a store operation on a bad blob may take; it should take microseconds."""
SUBPROCESS_DEADLINE: Final = 60.0
"""Seconds a ``fetchproxy`` process meeting a bad blob may take (start-up included, under load)."""


def make_not_regular(path: Path, kind: str, *, body: bytes, elsewhere: Path) -> None:
    """Put a ``kind`` (see :data:`KINDS`) at ``path``, the name of the blob of ``body``.

    ``elsewhere`` is a directory outside the store for link targets. ``device`` needs root
    (``mknod``): CI runs as root, elsewhere the test is skipped.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    elsewhere.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path, 0o444)
    elif kind == "link-to-fifo":
        target = elsewhere / "fifo"
        os.mkfifo(target, 0o644)
        path.symlink_to(target)
    elif kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link-to-good-copy":
        target = elsewhere / "good-copy"
        target.write_bytes(body)  # the right bytes, but not a file of the store
        path.symlink_to(target)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node (mknod) needs root; CI runs as root")
        os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(1, 5))  # what /dev/zero is
    else:
        raise ValueError(f"unknown kind {kind!r}")


def unblock_fifos(*paths: Path) -> None:
    """Open each FIFO among ``paths`` for writing and close it: a reader stuck in ``open``
    then reads end-of-file, so a hung regression does not keep the test process waiting."""
    for path in paths:
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(path.stat().st_mode):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def within_deadline(action: Callable[[], T], *, fifos: tuple[Path, ...] = ()) -> T:
    """``action()`` in a thread; fails the test if it takes longer than :data:`DEADLINE`.

    ``fifos`` are unblocked (see :func:`unblock_fifos`) when it hangs.
    """
    outcome: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # noqa: BLE001 -- handed to the test's thread
            error.append(exc)

    thread = threading.Thread(target=run, name="bad-blob-deadline", daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        unblock_fifos(*fifos)
        pytest.fail(f"still running after {DEADLINE} s: the store read a non-regular file")
    if error:
        raise error[0]
    return outcome[0]

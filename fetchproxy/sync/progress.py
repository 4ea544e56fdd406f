"""How a transfer of many blobs shows itself: a line redrawn on a terminal, one summary line.

:class:`ProgressLine` is the ``on_progress`` callback of a push, pull or fetch: on a terminal it
redraws one line (blobs done of all, bytes done of all, the rate) for each report of the
transfer pool (at once, then at most every 0.2 s) and clears it at the end; elsewhere (a CI log)
it prints nothing, so a log gets only the summary the caller prints once (:func:`summary_text`).
The texts themselves are pure functions.
"""

from __future__ import annotations

import sys
from typing import TextIO

from fetchproxy.store.transfer import Progress
from fetchproxy.text import counted, human_bytes

_CLEAR = "\r\x1b[K"


def progress_text(action: str, progress: Progress) -> str:
    """``pull: 1204/2004 blobs, 120.5 MiB of 288.0 MiB, 45.2 MiB/s``."""
    size = human_bytes(progress.bytes_done)
    if progress.bytes_total is not None:
        size += f" of {human_bytes(progress.bytes_total)}"
    return (
        f"fetchproxy: {action}: {progress.objects_done}/{progress.objects_total} blobs, {size}, "
        f"{human_bytes(int(progress.rate))}/s"
    )


def summary_text(
    done: str, *, moved: int, bytes_moved: int, seconds: float, where: str, present: str = ""
) -> str:
    """``fetchproxy: pulled 12 blobs (3.4 MiB) from s3://b/p in 1.2 s, 2.8 MiB/s; …``.

    ``done`` is the verb (``pulled``), ``where`` what follows it (``from s3://b/p``),
    ``present`` what was there already, if anything to say.
    """
    rate = f", {human_bytes(int(bytes_moved / seconds))}/s" if seconds > 0 and moved else ""
    line = (
        f"fetchproxy: {done} {counted(moved, 'blob', 'blobs')} ({human_bytes(bytes_moved)}) "
        f"{where} in {seconds:.1f} s{rate}"
    )
    return line + (f"; {present}" if present else "")


class ProgressLine:
    """The progress callback: one line redrawn on a terminal for each report (the transfer
    pool reports at most every 0.2 s), nothing elsewhere."""

    def __init__(self, action: str, stream: TextIO | None = None) -> None:
        self.action = action
        self.stream = stream if stream is not None else sys.stderr
        self.shown = False
        try:
            self.terminal = self.stream.isatty()
        except (AttributeError, ValueError):  # a closed or odd stream: no terminal
            self.terminal = False

    def __call__(self, progress: Progress) -> None:
        if not self.terminal:
            return
        if progress.final:
            if self.shown:
                self.stream.write(_CLEAR)
                self.stream.flush()
            return
        self.stream.write(_CLEAR + progress_text(self.action, progress))
        self.stream.flush()
        self.shown = True

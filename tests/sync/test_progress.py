"""The progress line: what it says, that it is redrawn and cleared, and silence off a
terminal (how often it is redrawn is the transfer pool's: tests/store/test_transfer.py)."""

from __future__ import annotations

import io
import os

from fetchproxy.store.transfer import Progress
from fetchproxy.sync.progress import ProgressLine, progress_text, summary_text

MiB = 1 << 20


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def at(done: int, bytes_done: int, *, final: bool = False) -> Progress:
    return Progress(
        objects_done=done, objects_total=4, bytes_done=bytes_done, bytes_total=8 * MiB,
        elapsed=2.0, final=final,
    )  # fmt: skip


def test_the_line_says_blobs_bytes_and_rate() -> None:
    assert progress_text("pull", at(1, 3 * MiB)) == (
        "fetchproxy: pull: 1/4 blobs, 3.0 MiB of 8.0 MiB, 1.5 MiB/s"
    )
    unknown = Progress(
        objects_done=0, objects_total=2, bytes_done=0, bytes_total=None, elapsed=0.0, final=False
    )
    assert progress_text("fetch", unknown) == "fetchproxy: fetch: 0/2 blobs, 0 B, 0 B/s"


def test_each_report_redraws_the_line_and_the_last_clears_it() -> None:
    terminal = Terminal()
    line = ProgressLine("push", terminal)
    line(at(0, 0))
    line(at(3, 3 * MiB))
    line(at(4, 8 * MiB, final=True))
    assert terminal.getvalue() == (
        "\r\x1b[Kfetchproxy: push: 0/4 blobs, 0 B of 8.0 MiB, 0 B/s"
        "\r\x1b[Kfetchproxy: push: 3/4 blobs, 3.0 MiB of 8.0 MiB, 1.5 MiB/s"
        "\r\x1b[K"  # cleared, so the summary the caller prints starts a clean line
    )


def test_nothing_is_drawn_off_a_terminal() -> None:
    log = io.StringIO()  # a CI log: isatty() is False
    line = ProgressLine("pull", log)
    line(at(0, 0))
    line(at(4, 8 * MiB, final=True))
    assert log.getvalue() == ""


def test_a_closed_stream_is_no_terminal() -> None:
    with open(os.devnull, "w") as closed:  # noqa: PTH123 -- a real file object, closed below
        pass
    line = ProgressLine("pull", closed)  # isatty() raises ValueError on it
    line(at(0, 0))  # would raise on write if it were taken for a terminal
    assert not line.terminal


def test_a_final_report_alone_clears_nothing() -> None:
    terminal = Terminal()
    ProgressLine("pull", terminal)(at(4, 8 * MiB, final=True))
    assert terminal.getvalue() == ""


def test_the_summary() -> None:
    assert summary_text(
        "pulled", moved=2, bytes_moved=3 * MiB, seconds=1.5, where="from s3://b/p",
        present="1 already here",
    ) == (
        "fetchproxy: pulled 2 blobs (3.0 MiB) from s3://b/p in 1.5 s, 2.0 MiB/s; 1 already here"
    )  # fmt: skip
    assert summary_text("pushed", moved=0, bytes_moved=0, seconds=0.0, where="to s3://b") == (
        "fetchproxy: pushed 0 blobs (0 B) to s3://b in 0.0 s"
    )

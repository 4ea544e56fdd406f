"""``--time-limit`` of both benchmark scripts: SIGALRM ends a run that takes too long."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class OvertimeError(Exception):
    """The whole run took longer than ``--time-limit``."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise OvertimeError(f"the benchmark did not finish within {seconds} s (--time-limit)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

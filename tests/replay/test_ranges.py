"""Range requests answered from a whole body."""

from __future__ import annotations

import pytest

from fetchproxy.replay.ranges import ByteRange, Unsatisfiable, parse_range


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", ByteRange(0, 9, 100)),
        ("bytes=90-", ByteRange(90, 99, 100)),
        ("bytes=90-200", ByteRange(90, 99, 100)),
        ("bytes=-10", ByteRange(90, 99, 100)),
        ("bytes=-1000", ByteRange(0, 99, 100)),
        ("bytes = 5 - 6", ByteRange(5, 6, 100)),
        ("bytes=100-", Unsatisfiable(100)),
        ("bytes=-0", Unsatisfiable(100)),
        ("bytes=9-1", None),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=-", None),
    ],
)
def test_parse_range(header: str | None, expected: object) -> None:
    assert parse_range(header, 100) == expected


def test_headers_of_a_range() -> None:
    assert ByteRange(0, 9, 100).content_range() == "bytes 0-9/100"
    assert ByteRange(0, 9, 100).length == 10
    assert Unsatisfiable(100).content_range() == "bytes */100"
    assert parse_range("bytes=0-0", 0) == Unsatisfiable(0)

"""``Range`` requests answered from a whole recorded body (RFC 9110, section 14).

The lock always holds full bodies (recording strips ``Range``), so replay answers a single byte
range itself. Several ranges in one header are answered with the whole body, which RFC 9110
allows and every client handles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*")


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``start`` to ``end`` inclusive of a body of ``size`` bytes."""

    start: int
    end: int
    size: int

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self) -> str:
        return f"bytes {self.start}-{self.end}/{self.size}"


@dataclass(frozen=True, slots=True)
class Unsatisfiable:
    """A range that lies outside the body: answered with 416."""

    size: int

    def content_range(self) -> str:
        return f"bytes */{self.size}"


def parse_range(header: str | None, size: int) -> ByteRange | Unsatisfiable | None:
    """What to answer for ``Range: header`` on a body of ``size`` bytes.

    ``None`` means "the whole body" (no header, a header we do not honour, or several ranges).
    """
    if header is None:
        return None
    match = _RANGE_RE.fullmatch(header)
    if match is None:
        return None  # other units, several ranges, or garbage: answer the whole body
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # suffix range: the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return Unsatisfiable(size)
        return ByteRange(max(size - suffix, 0), size - 1, size)
    start = int(first)
    if start >= size:
        return Unsatisfiable(size)
    end = min(int(last), size - 1) if last else size - 1
    if end < start:
        return None  # an invalid range is ignored (RFC 9110, 14.1.1)
    return ByteRange(start, end, size)

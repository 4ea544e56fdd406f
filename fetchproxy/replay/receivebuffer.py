"""The bytes a connection received and has not parsed yet: :class:`ReceiveBuffer`.

The buffer is the only owner of its offsets: where the unparsed bytes start, and how far a
search for the end of a head or a line already looked (so that a head arriving a byte at a
time is scanned once, not once per byte). It hands out whole pieces — a head, a line, up to
``n`` bytes — and drops what it handed out. Bytes that arrive while nothing is buffered are
kept as they came (no copy): a request that arrives in one read is parsed in place.

Every line must end in CRLF: a bare LF is refused the moment it arrives (RFC 9112, 2.2 allows
a recipient to accept one; a security boundary does not, since two readers that split lines
differently disagree about where a request ends).
"""

from __future__ import annotations

import re

from fetchproxy.replay.http1 import HTTPParseError

_BARE_LF_RE = re.compile(rb"(?<!\r)\n")


class ReceiveBuffer:
    """Received bytes not yet handed out, in order."""

    __slots__ = ("_data", "_scanned", "_start")

    def __init__(self) -> None:
        self._data: bytes | bytearray = b""
        self._start = 0
        """Where the bytes not handed out begin in ``_data``."""
        self._scanned = 0
        """How far (in ``_data``) the current search found no end yet."""

    def __len__(self) -> int:
        return len(self._data) - self._start

    def append(self, data: bytes) -> None:
        """Bytes that arrived after those buffered."""
        if not data:
            return
        buffered = self._data
        start = self._start
        if start == len(buffered):  # nothing buffered: keep the new bytes as they are
            self._data, self._start, self._scanned = data, 0, 0
        elif isinstance(buffered, bytearray):
            if start:
                del buffered[:start]  # O(1) at the front of a bytearray
                self._scanned -= start
                self._start = 0
            buffered += data
        else:
            self._data = bytearray(memoryview(buffered)[start:])
            self._data += data
            self._scanned -= start
            self._start = 0

    def maybe_extract_head(self, limit: int) -> bytes | None:
        """The head at the start (request line and header lines, without the empty line that
        ends it) once all of it is here, else None. Raises :class:`HTTPParseError` for a bare
        LF before the end, or (431) a head longer than ``limit``. One empty line before it is
        dropped (RFC 9112, 2.2: a server ignores at least one)."""
        data, start = self._data, self._start
        if start == len(data):
            return None  # nothing buffered (what a kept-alive connection asks between requests)
        if data.startswith(b"\r\n", start):
            start = self._start = start + 2
            self._scanned = max(self._scanned, start)
        end = data.find(b"\r\n\r\n", max(self._scanned - 3, start))
        if end < 0:  # (a bare LF in a whole head is the parser's to find)
            if data.startswith(b"\n", start) or (
                _BARE_LF_RE.search(data, max(self._scanned - 1, start)) is not None
            ):
                raise HTTPParseError("a bare LF in the request head (lines end in CRLF)")
            if len(data) - start > limit:
                raise HTTPParseError("request head too large", 431)
            self._scanned = len(data)
            return None
        if end - start > limit:
            raise HTTPParseError("request head too large", 431)
        self._start = self._scanned = end + 4
        return bytes(data[start:end]) if isinstance(data, bytearray) else data[start:end]

    def maybe_extract_line(self, limit: int, what: str) -> bytes | None:
        """The line at the start without its CRLF once all of it is here, else None. Raises
        :class:`HTTPParseError` for a bare LF, or a line longer than ``limit`` (``what`` says
        which line, for the message)."""
        data, start = self._data, self._start
        end = data.find(b"\n", max(self._scanned, start))
        if end < 0:
            if len(data) - start > limit:
                raise HTTPParseError(f"{what} too long")
            self._scanned = len(data)
            return None
        if end == start or data[end - 1] != 0x0D:
            raise HTTPParseError(f"a bare LF in a {what} (lines end in CRLF)")
        if end - 1 - start > limit:
            raise HTTPParseError(f"{what} too long")
        line = bytes(data[start : end - 1])
        self._start = self._scanned = end + 1
        return line

    def maybe_extract(self, most: int) -> bytes | None:
        """Up to ``most`` bytes from the start; None when there are none."""
        data, start = self._data, self._start
        if start == len(data) or most <= 0:
            return None
        if start == 0 and most >= len(data) and isinstance(data, bytes):
            piece = data  # the whole of a bytes object is itself, not a copy
        else:
            piece = bytes(data[start : start + most])
        self._start = self._scanned = start + len(piece)
        return piece

    def extract_all(self) -> bytes:
        """Everything buffered (what followed a ``CONNECT``, for the tunnel)."""
        return self.maybe_extract(len(self)) or b""

    def clear(self) -> None:
        """Drop everything buffered (a connection that reads no more requests)."""
        self._data, self._start, self._scanned = b"", 0, 0

"""Text as people read it: sizes in bytes, numbers of things, and nothing a terminal obeys.

:func:`printable` is applied to everything fetchproxy shows a person (the diff, the listing,
summaries, refusal bodies, error and log messages): a value that came from an origin, a build
or a hand-edited lock can hold escape sequences that would move the cursor, conceal the rest
of the screen or reorder it, and a reviewer must see what is there, not what it asks for.
"""

from __future__ import annotations

import re

_INVISIBLE = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_RE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
"""What a terminal acts on or a reader cannot see: C0 (but tab and line feed) and C1 controls,
DEL, the bidirectional overrides and marks ("Trojan Source"), and lone surrogates (raw bytes
decoded with surrogateescape)."""
_ANY_LINE_BREAK_RE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE}]")


def printable(text: str, *, lines: bool = True) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``), as
    git's ``core.quotePath`` shows odd file names. With ``lines=False`` line breaks and tabs
    are escaped too (for a value that must stay on its line)."""
    pattern = _UNSAFE_RE if lines else _ANY_LINE_BREAK_RE
    if not pattern.search(text):
        return text
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    if 0xDC80 <= code <= 0xDCFF:  # a raw byte, decoded with surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def human_bytes(size: int) -> str:
    """``1536`` → ``1.5 KiB``; whole bytes below 1 KiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def counted(count: int, singular: str, plural: str) -> str:
    """``1 blob``, ``2 blobs``: ``count`` with the word that agrees with it."""
    return f"{count} {singular if count == 1 else plural}"

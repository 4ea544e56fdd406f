"""Counts as people read them: sizes in bytes, and numbers of things."""

from __future__ import annotations

import re


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


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` (from an origin, a build or a file) safe to print for people: control
    characters, and the ones that reorder or break lines, as ``\\xNN`` / ``\\uNNNN`` escapes,
    so nothing in it can rewrite a terminal or a page."""
    return _CONTROL_RE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

"""Counts as people read them: sizes in bytes, and numbers of things."""

from __future__ import annotations


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

"""BLAKE3 digests as they appear in locks, store paths and logs: ``blake3:<64 hex>``."""

from __future__ import annotations

import re
from typing import NewType

import blake3

Digest = NewType("Digest", str)
"""A validated ``blake3:`` + 64 lowercase hex digits string."""

ALGORITHM = "blake3"
PREFIX = f"{ALGORITHM}:"
HEX_LENGTH = 64
_DIGEST_RE = re.compile(r"blake3:[0-9a-f]{64}")


def parse_digest(text: str) -> Digest:
    """Validate ``text`` as a digest; raise ``ValueError`` saying what is wrong."""
    if _DIGEST_RE.fullmatch(text):
        return Digest(text)
    if not text.startswith(PREFIX):
        raise ValueError(
            f"{text!r} is not a digest: expected 'blake3:' and 64 lowercase hex digits"
        )
    raise ValueError(
        f"{text!r} is not a digest: expected exactly 64 lowercase hex digits after 'blake3:'"
    )


def hex_of(digest: Digest) -> str:
    """The 64 hex digits of ``digest``, without the algorithm prefix."""
    return digest[len(PREFIX) :]


def from_hex(hex_digest: str) -> Digest:
    """A digest from BLAKE3's hex output."""
    return parse_digest(PREFIX + hex_digest)


def digest_bytes(data: bytes) -> Digest:
    """The digest of ``data``."""
    return Digest(PREFIX + blake3.blake3(data).hexdigest())


EMPTY = digest_bytes(b"")
"""The digest of the empty body (HEAD, 204, 304 and empty answers)."""

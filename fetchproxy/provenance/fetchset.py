"""The fetch-set digest: one digest of the set of fetches a run used, or a lock holds.

Independent of order, of duplicates and of the lock's text (its layout, comments, field order).
The construction, precise enough for another tool to recompute it, is in ``docs/provenance.md``:

1. Each entry becomes one line: the RFC 8785 canonical JSON of
   ``{"key": {...}, "answer": {"status", "digest", "size", "headers"}}`` (:func:`entry_line`).
2. The distinct lines are sorted bytewise.
3. The digest is BLAKE3 over :data:`TAG` followed by each line and a newline
   (:func:`fetch_set_bytes`), written ``blake3:<64 hex>`` like every digest fetchproxy shows.

Canonical JSON has no raw newline, so the newline ends each line unambiguously; the tag keeps
these bytes from ever meaning anything else, and names the version of the construction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import blake3

from fetchproxy.digest import PREFIX, Digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.provenance.entry import Entry
from fetchproxy.provenance.jcs import CanonicalJSONError

TAG: Final = b"fetchproxy fetch-set v1\n"
"""What the hashed bytes start with: the construction's name and version."""


class ConflictingAnswersError(FetchproxyError, ValueError):
    """Two entries of one set have the same key and different answers."""


def entry_object(entry: Entry) -> dict[str, object]:
    """The JSON object of one entry: its key (lock field names) and its answer."""
    return {
        "key": entry.key_fields(),
        "answer": {
            "status": entry.status,
            "digest": entry.digest,
            "size": entry.size,
            "headers": [[name, value] for name, value in entry.headers],
        },
    }


def entry_line(entry: Entry) -> bytes:
    """The canonical bytes of one entry, without the newline."""
    return _canonical(entry_object(entry))


_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _canonical(value: dict[str, object]) -> bytes:
    """RFC 8785 bytes of an entry's object or key, by the C JSON encoder (a replay of a large
    lock computes this once per entry).

    For these values it writes what :func:`~fetchproxy.provenance.jcs.canonical_json` does:
    member names are fixed ASCII field names (so code-point order is UTF-16 order), numbers are
    integers an :class:`Entry` keeps within 2**53-1, and ``ensure_ascii=False`` escapes exactly
    the characters JSON must (``"``, ``\\``, controls; ``\b \f \n \r \t`` short), in
    lowercase hex. A lone surrogate, which is not Unicode, fails to encode as UTF-8 and is
    refused as ``canonical_json`` refuses it. ``tests/provenance/test_fetchset.py`` holds the
    two to the same bytes.
    """
    text = _ENCODER.encode(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalJSONError("a string holds a lone surrogate, which is not Unicode") from None


def key_line(entry: Entry) -> bytes:
    """The canonical bytes of an entry's key: what tells two requests apart."""
    return canonical_key(entry.key_fields())


def canonical_key(fields: dict[str, str]) -> bytes:
    """The canonical bytes of a key spelled as the lock and the event log spell it."""
    return _canonical(dict(fields))


def fetch_set_lines(entries: Iterable[Entry]) -> list[bytes]:
    """The sorted, distinct lines of ``entries``.

    Raise :class:`ConflictingAnswersError` when two entries have one key and different
    answers: a set of fetches holds one answer per request.
    """
    by_key: dict[tuple[str | None, ...], tuple[Entry, bytes]] = {}
    for entry in entries:
        key = (entry.method, entry.url, entry.accept, entry.git_protocol, entry.body_digest)
        line = entry_line(entry)
        seen = by_key.get(key)
        if seen is None:
            by_key[key] = (entry, line)
        elif seen[1] != line:
            raise ConflictingAnswersError(
                f"{entry.method} {entry.url}: two different answers to one request "
                f"({seen[0].status}, {seen[0].digest} and {entry.status}, {entry.digest}) — "
                "a fetch set holds one answer per request"
            )
    return sorted(line for _, line in by_key.values())


def fetch_set_bytes(entries: Iterable[Entry]) -> bytes:
    """Exactly the bytes the fetch-set digest hashes: :data:`TAG`, then each line and ``\\n``."""
    return TAG + b"".join(line + b"\n" for line in fetch_set_lines(entries))


def fetch_set_digest(entries: Iterable[Entry]) -> Digest:
    """``blake3:<64 hex>`` of :func:`fetch_set_bytes`."""
    hasher = blake3.blake3(TAG)
    for line in fetch_set_lines(entries):
        hasher.update(line + b"\n")
    return Digest(PREFIX + hasher.hexdigest())

"""What a replay served, read back from its event log: ``lock sbom --served EVENTLOG``.

Pure: :func:`served_entries` takes the log's text and the lock's entries. A finished replay's
log ends with one ``used`` line per entry it served and then the ``fetch-set`` line (the
schema is :mod:`fetchproxy.lock.eventlog`'s); the entries returned are the lock's own, picked
by those keys. Every line is checked, and anything that says this is not that log, or not a
log of this lock, is a :class:`ServedLogError` naming ``file:line``: a line that is not an
event, a log without its ``fetch-set`` line (a record's log, a replay that was killed), an
entry served with other bytes than the lock's, and a set whose digest is not the one the
replay wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Final

from fetchproxy.errors import FetchproxyError
from fetchproxy.provenance.entry import Entry
from fetchproxy.provenance.fetchset import canonical_key, fetch_set_digest, key_line
from fetchproxy.text import printable

USED: Final = "used"
FETCH_SET: Final = "fetch-set"
"""The event names (as :mod:`fetchproxy.lock.eventlog` defines them; a test holds the two
equal)."""
_FIX: Final = (
    "give --served the event log of the replay whose fetches the SBOM lists (--log, or "
    "the .log.jsonl beside the lock), with the lock it replayed"
)


class ServedLogError(FetchproxyError, ValueError):
    """An event log that is not a finished replay's log of this lock; names ``file:line``."""


def served_entries(
    text: str, lock_entries: Iterable[Entry], *, path: str, lock: str
) -> list[Entry]:
    """The entries of ``lock_entries`` (the lock at ``lock``) that the replay logged in
    ``text`` (the file ``path``) served, in the lock's order."""
    by_key = {key_line(e): e for e in lock_entries}
    chosen: dict[bytes, Entry] = {}
    end: tuple[int, str] | None = None
    last = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        last = number
        where = f"{path}:{number}"
        event = _event(line, where)
        if end is not None:
            raise ServedLogError(
                f"{where}: an event after the fetch-set line, which ends a replay's log — "
                f"this is not one replay's log; {_FIX}"
            )
        name = event["event"]
        if name == USED:
            key, entry = _used(event, where, by_key, lock)
            chosen[key] = entry
        elif name == FETCH_SET:
            digest = event.get("digest")
            if not isinstance(digest, str):
                raise ServedLogError(f"{where}: a fetch-set event without its digest; {_FIX}")
            end = (number, digest)
    if end is None:
        raise ServedLogError(
            f"{path}:{last}: the log ends without a fetch-set line, so it is not the log of a "
            f"finished replay (a record's log, or a replay that was stopped); {_FIX}"
        )
    served = [e for key, e in by_key.items() if key in chosen]
    recomputed = fetch_set_digest(served)
    if recomputed != end[1]:
        raise ServedLogError(
            f"{path}:{end[0]}: the replay served the fetch set {end[1]}, but these entries of "
            f"{lock} give {recomputed}: the lock changed since the replay; {_FIX}"
        )
    return served


def _event(line: str, where: str) -> Mapping[str, object]:
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise ServedLogError(
            f"{where}: not an event-log line (a JSON object with an event); {_FIX}"
        )
    return event


def _used(
    event: Mapping[str, object], where: str, by_key: Mapping[bytes, Entry], lock: str
) -> tuple[bytes, Entry]:
    fields = event.get("key")
    if (
        not isinstance(fields, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
        or "method" not in fields
        or "url" not in fields
    ):
        raise ServedLogError(f"{where}: a used event without a request key; {_FIX}")
    key = canonical_key(fields)
    request = printable(f"{fields['method']} {fields['url']}", lines=False)
    entry = by_key.get(key)
    if entry is None:
        raise ServedLogError(
            f"{where}: {request} was served, but {lock} has no such entry — the log is of "
            f"another lock, or the lock changed since the replay; {_FIX}"
        )
    if event.get("digest") != entry.digest:
        logged = printable(str(event.get("digest")), lines=False)
        raise ServedLogError(
            f"{where}: {request} was served as {logged}, but {lock} answers "
            f"{entry.digest} — the lock changed since the replay; {_FIX}"
        )
    return key, entry

"""The books of one replay run: the lock it serves, what it served, refused and never used.

Both replay engines keep one :class:`ReplayBook` (the direct server of
:mod:`fetchproxy.replayserver` and the mitmproxy addon of ``addons/replay.py``), so the event
log, the end-of-run summary and the exit status mean the same whichever answered.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.eventlog import UNUSED, USED, EventLog, default_log_path
from fetchproxy.lock.file import load_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.replay.decisions import NOT_HTTP, accept_hint, nearest
from fetchproxy.store import Store

logger = logging.getLogger("fetchproxy.replay")

SHOWN_REFUSALS = 10
"""Refused requests named in the end-of-run summary; the event log has every one."""


class MissingBodiesError(FetchproxyError, FileNotFoundError):
    """The lock names bodies the store does not hold: replay cannot serve it."""


class ReplayStats:
    """What a replay run did, for the summary line."""

    def __init__(self) -> None:
        self.served = 0
        self.refused = 0
        self.bytes = 0


def check_bodies(lock: Lock, lock_path: Path, store: Store) -> None:
    """Raise :class:`MissingBodiesError` unless ``store`` holds every body ``lock`` names."""
    missing = sorted(d for d in lock.digests() if not store.contains(d))
    if not missing:
        return
    shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
    bodies = "recorded body is" if len(missing) == 1 else "recorded bodies are"
    raise MissingBodiesError(
        f"{lock_path}: {len(missing)} {bodies} missing from the store "
        f"{getattr(store, 'root', '(memory)')} ({shown}) — record again with "
        "`fetchproxy record`, or point --store at the store it was recorded into"
    )


class ReplayBook:
    """The lock being replayed and the record of what became of each request."""

    def __init__(self, lock: Lock, lock_path: Path, events: EventLog) -> None:
        self.lock = lock
        self.lock_path = lock_path
        self.events = events
        self.stats = ReplayStats()
        self.used: set[RequestKey] = set()
        self.refused: list[RequestKey] = []
        """The first refused requests, for the summary (all of them are in the event log)."""
        self.hints: dict[RequestKey, str] = {}
        """What to do about a refused request, where the lock shows it (its nearest entry
        differs only in ``accept``)."""
        self.refused_unkeyed = 0
        """Refusals of what had no key: invalid requests, non-HTTP traffic."""
        self._closed = False

    @classmethod
    def open(cls, lock_path: Path, store: Store, log: Path | None) -> ReplayBook:
        """Load and check the lock, then open the event log (``log``, or beside the lock).

        Raises :class:`~fetchproxy.lockfile.LockFileError` or :class:`MissingBodiesError`
        before anything is written.
        """
        lock = load_lock(lock_path)
        check_bodies(lock, lock_path, store)
        return cls(lock, lock_path, EventLog(log or default_log_path(lock_path)))

    def lookup(self, key: RequestKey) -> Fetch | None:
        return self.lock.lookup(key)

    def served(self, key: RequestKey, body_bytes: int) -> None:
        self.used.add(key)
        self.stats.served += 1
        self.stats.bytes += body_bytes

    def refuse(self, key: RequestKey, *, reason: str, error: str | None = None) -> None:
        """Count and log a refused request, with the lock entry most like it.

        A request the lock holds (refused for its blob, or as a websocket) was asked for: it
        is not unused, and it is its own entry, so no nearest one is named. ``error``: why the
        store could not serve it.
        """
        self.stats.refused += 1
        if len(self.refused) < SHOWN_REFUSALS:
            self.refused.append(key)
        hint: str | None = None
        if self.lock.lookup(key) is not None:
            self.used.add(key)
            near = None
        else:
            near = nearest(self.lock, key)
            hint = accept_hint(key, near)
        if hint is not None:
            self.hints.setdefault(key, hint)
        self.events.refused(key, reason=reason, nearest=near, hint=hint, error=error)

    def revoke(
        self, key: RequestKey, body_bytes: int, *, reason: str, error: str | None = None
    ) -> None:
        """A request counted as served whose body was cut off (its blob rotted): a refusal."""
        self.stats.served -= 1
        self.stats.bytes -= body_bytes
        self.refuse(key, reason=reason, error=error)

    def refuse_raw(self, address: object) -> None:
        """Refuse traffic to ``address`` that is not HTTP (raw TCP or UDP in a tunnel)."""
        self.refuse_other(NOT_HTTP, address=f"{address}")
        logger.warning("replay: refused a non-HTTP connection to %s", address)

    def refuse_other(
        self, reason: str, *, error: str | None = None, address: str | None = None
    ) -> None:
        """Count and log what was refused without a key: an invalid request, raw TCP."""
        self.stats.refused += 1
        self.refused_unkeyed += 1
        self.events.refused(None, reason=reason, error=error, address=address)

    def was_used(self, key: RequestKey) -> bool:
        """Whether the run asked for ``key``; a HEAD counts as asked for when the GET of the
        same key was: a client may send the HEAD first or not, by its own timing (uv does)."""
        if key in self.used:
            return True
        return key.method == "HEAD" and dataclasses.replace(key, method="GET") in self.used

    def unused(self) -> list[Fetch]:
        """Lock entries no request asked for in this run (see :meth:`was_used`)."""
        return [f for f in self.lock.fetches if not self.was_used(f.key)]

    def close(self) -> None:
        """Log which entries were used and which not, and close the event log; once."""
        if self._closed:
            return
        self._closed = True
        for fetch in self.lock.fetches:
            if fetch.key in self.used:  # served (a HEAD only covered by its GET is not)
                self.events.emit(USED, key=fetch.key, digest=fetch.digest, size=fetch.size)
            elif not self.was_used(fetch.key):
                self.events.emit(UNUSED, key=fetch.key)
        self.events.close()

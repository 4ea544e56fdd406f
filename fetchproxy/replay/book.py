"""The books of one replay run: the lock it serves, what it served, refused and never used.

Both replay engines keep one :class:`ReplayBook` (the direct server of
:mod:`fetchproxy.replayserver` and the mitmproxy addon of ``addons/replay.py``), so the event
log, the end-of-run summary and the exit status mean the same whichever answered. When the run
is over, :meth:`ReplayBook.served_set` is what it served (its fetch-set digest, whether it was
exact): what the end of the event log, the summary and an attestation say.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fetchproxy.digest import Digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.eventlog import FETCH_SET, UNUSED, USED, EventLog, default_log_path
from fetchproxy.lock.file import read_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.provenance.entry import entry_from_fetch
from fetchproxy.provenance.fetchset import fetch_set_digest
from fetchproxy.provenance.statement import LockReference
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


@dataclass(frozen=True, kw_only=True, slots=True)
class ServedSet:
    """What a finished replay served: the lock entries it answered, in lock order, their
    fetch-set digest, and the facts an attestation states beside them."""

    fetches: tuple[Fetch, ...]
    digest: Digest
    exact: bool
    """Nothing was refused and every lock entry was served (what ``--exact`` asks for)."""
    refused: int
    sandbox: str
    """The sandbox the build ran in: ``root``, ``user`` or ``none``."""


class ReplayBook:
    """The lock being replayed and the record of what became of each request.

    ``sandbox``: where the clients it serves run (``root``, ``user``; ``none`` for a build
    without a sandbox and for ``serve``), for the record of what was served.
    """

    def __init__(
        self,
        lock: Lock,
        lock_path: Path,
        events: EventLog,
        *,
        sandbox: str = "none",
        lock_bytes: bytes | None = None,
    ) -> None:
        self.lock = lock
        self.lock_path = lock_path
        self.lock_reference = (
            None if lock_bytes is None else LockReference.of(str(lock_path), lock_bytes)
        )
        """The lock's path and the digests of the bytes it was loaded from (when known)."""
        self.events = events
        self.sandbox = sandbox
        self.stats = ReplayStats()
        self.used: set[RequestKey] = set()
        """Keys of the lock's entries some request asked for and was refused (its blob could
        not be served, or it was a websocket); the served ones are in ``_answered``."""
        self._answered: dict[RequestKey, int] = {}
        """How many whole answers each served entry got (a revoked one is taken back); a key
        once in it was asked for, whatever its count."""
        self.refused: list[RequestKey] = []
        """The first refused requests, for the summary (all of them are in the event log)."""
        self.hints: dict[RequestKey, str] = {}
        """What to do about a refused request, where the lock shows it (its nearest entry
        differs only in ``accept``)."""
        self.refused_unkeyed = 0
        """Refusals of what had no key: invalid requests, non-HTTP traffic."""
        self._closed = False
        self._served_set: ServedSet | None = None

    @classmethod
    def open(
        cls,
        lock_path: Path,
        store: Store,
        log: Path | None,
        *,
        sandbox: str = "none",
        fill: Callable[[Lock], None] | None = None,
    ) -> ReplayBook:
        """Load and check the lock, then open the event log (``log``, or beside the lock).

        ``fill`` is called with the lock before its bodies are checked, to bring the ones the
        store lacks (a pull from the remote store). Raises
        :class:`~fetchproxy.lockfile.LockFileError` or :class:`MissingBodiesError` (or what
        ``fill`` raises) before anything is written.
        """
        lock, data = read_lock(lock_path)
        if fill is not None:
            fill(lock)
        check_bodies(lock, lock_path, store)
        events = EventLog(log or default_log_path(lock_path))
        return cls(lock, lock_path, events, sandbox=sandbox, lock_bytes=data)

    def lookup(self, key: RequestKey) -> Fetch | None:
        return self.lock.lookup(key)

    def served(self, key: RequestKey, body_bytes: int) -> None:
        answered = self._answered  # the hot path of every hit: one dict, no set
        answered[key] = answered.get(key, 0) + 1
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
        self._answered[key] = self._answered.get(key, 0) - 1
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
        if key in self._answered or key in self.used:
            return True
        if key.method != "HEAD":
            return False
        get = dataclasses.replace(key, method="GET")
        return get in self._answered or get in self.used

    def unused(self) -> list[Fetch]:
        """Lock entries no request asked for in this run (see :meth:`was_used`)."""
        return [f for f in self.lock.fetches if not self.was_used(f.key)]

    def _was_served(self, key: RequestKey) -> bool:
        """Whether the run answered ``key`` from the lock; a HEAD also when the GET of the same
        key was (its answer is the GET's without the body: see :meth:`was_used`)."""
        if self._answered.get(key, 0) > 0:
            return True
        return (
            key.method == "HEAD"
            and self._answered.get(dataclasses.replace(key, method="GET"), 0) > 0
        )

    def served_set(self) -> ServedSet:
        """What the run served, once it is over (worked out once: a large lock takes a while)."""
        if self._served_set is None:
            fetches = tuple(f for f in self.lock.fetches if self._was_served(f.key))
            self._served_set = ServedSet(
                fetches=fetches,
                digest=fetch_set_digest(entry_from_fetch(f) for f in fetches),
                exact=self.stats.refused == 0 and len(fetches) == len(self.lock),
                refused=self.stats.refused,
                sandbox=self.sandbox,
            )
        return self._served_set

    def close(self) -> None:
        """Log which entries were served and which never asked for, then what the run served
        as a whole (``fetch-set``), and close the event log; once.

        An entry that was asked for but never served (its blob was refused) gets neither
        ``used`` nor ``unused``: its ``refused`` events say what happened.
        """
        if self._closed:
            return
        self._closed = True
        served = self.served_set()
        answered = {f.key for f in served.fetches}
        for fetch in self.lock.fetches:
            if fetch.key in answered:
                self.events.emit(USED, key=fetch.key, digest=fetch.digest, size=fetch.size)
            elif not self.was_used(fetch.key):
                self.events.emit(UNUSED, key=fetch.key)
        self.events.emit(
            FETCH_SET,
            key=None,
            digest=served.digest,
            entries=len(served.fetches),
            exact=served.exact,
            refused=served.refused,
            sandbox=served.sandbox,
        )
        self.events.close()

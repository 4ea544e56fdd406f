"""The books of one record run, from the checks before it starts to the lock it writes.

:class:`RecordBook` owns a record's life cycle without knowing any engine: :meth:`RecordBook.open`
checks everything the run will write before anything listens (a journal left by an interrupted
run, the lock it must not overwrite unread, the lock's directory, the event log, the store) and
loads the lock as it was; each answer the engine stored becomes one :meth:`~RecordBook.recorded`
entry, appended to the journal at once (made exclusively with the first entry); answers that were
passed through, failed, or could not be stored are counted; :meth:`~RecordBook.finish` writes the
lock — or keeps it, with the reason, when the build failed, was stopped, or an answer was lost —
and :func:`recover` turns a journal left behind into the lock.

A fresh record (the default, like ``cargo update``) writes exactly what the run fetched; with
``keep`` (``record --keep``) requests the lock holds are answered from it and the rest added.

With a remote store, a :class:`BlobUpload` is one more check before the run and one more step
before the lock is written: every blob the lock names is uploaded first, and a failed upload
keeps the lock as it was (and the journal), like a lost answer.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fetchproxy.errors import FetchproxyError
from fetchproxy.files import WriteError, check_writable, write_error
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.eventlog import (
    DRIFT_IN_RUN,
    FAILED,
    HEADERS_NOT_KEPT,
    UNSTORED,
    EventLog,
    check_writable_log,
    default_log_path,
)
from fetchproxy.lock.file import LockFileError, load_lock, write_lock
from fetchproxy.lock.journal import (
    Journal,
    journal_mode,
    journal_path,
    journal_state,
    read_journal,
)
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.store import Store, StoreError
from fetchproxy.text import counted

logger = logging.getLogger("fetchproxy.record")


class RecordStartError(FetchproxyError, OSError):
    """A record that must not start: what it would write cannot be written, or must not be."""


class BlobUpload(Protocol):
    """Where a record's blobs go before its lock is written (the remote store)."""

    def check(self) -> None:
        """Raise a ``FetchproxyError`` unless uploads can be made (before the run starts)."""

    def upload(self, lock: Lock, lock_path: Path) -> str:
        """Upload every blob ``lock`` names; a summary line. ``StoreError`` if any failed (its
        first line says what, the next ones which blobs and why)."""


@dataclass(slots=True)
class RecordStats:
    """What a record run did, for the summary line."""

    recorded: int = 0
    bytes: int = 0
    kept: int = 0
    """Answered from the existing lock (``--keep``)."""
    passed: int = 0
    """Answered by the origin but not locked (5xx, protocol switches, websockets)."""
    failed: int = 0
    """Connection or TLS failures: the client got an error, nothing was locked."""
    unstored: int = 0
    """Answered, but the store could not keep the body: not locked, and the lock stays."""
    refused: int = 0
    """Requests fetchproxy answered itself instead of forwarding (invalid, not allowed)."""
    headers_not_kept: int = 0
    """Answers locked without a header whose value was not clean text."""
    redacted: int = 0
    """Token answers locked with their credentials replaced (fetchproxy.record.tokens)."""


@dataclass(frozen=True, slots=True)
class RecordResult:
    """How a record run ended: the lock written, or left as it was and why."""

    written: bool
    reason: str | None
    """Why the lock was left as it was (None when written)."""
    journal: Path | None
    """Where what the run recorded is kept, when the lock was not written."""
    previous: Lock | None
    new: Lock
    changed_meanwhile: bool = False
    """The lock left as it was by fetchproxy changed during the run all the same (by someone
    else: a record never lets the build change it)."""
    detail: str | None = None
    """More lines about ``reason`` (which blobs could not be uploaded, and why)."""
    uploaded: str | None = None
    """What the upload before the lock was written did (a summary line), if there was one."""


class RecordBook:
    """One record run's books. Make it with :meth:`open`; end it with :meth:`finish`."""

    def __init__(
        self,
        lock_path: Path,
        *,
        keep: bool,
        previous: Lock | None,
        events: EventLog,
        upload: BlobUpload | None = None,
    ) -> None:
        self.lock_path = lock_path
        self.keep = keep
        self.upload = upload
        """Uploads the lock's blobs before it is written (a remote store), if any."""
        self.previous = previous
        """The lock as it was before this run (None when there was none)."""
        self.events = events
        self.fetches: dict[RequestKey, Fetch] = {}
        self.stats = RecordStats()
        self.journal = Journal(journal_path(lock_path), keep=keep)
        self.origins: set[str] = set()
        """The origins (``host`` or ``host:port``) this run reached for the build."""
        self.journal_failed = False
        self.lock_bytes: bytes | None = None
        """The lock file's bytes when the run started (None: there was none)."""

    @classmethod
    def open(
        cls,
        lock_path: Path,
        store: Store,
        log: Path | None,
        *,
        keep: bool,
        upload: BlobUpload | None = None,
    ) -> RecordBook:
        """Check what the run will write and load the lock as it is; then open the event log.

        Raises :class:`RecordStartError`, :class:`~fetchproxy.lock.file.LockFileError`,
        :class:`~fetchproxy.files.WriteError` or :class:`~fetchproxy.store.StoreError` before
        anything is changed.
        """
        journal = journal_path(lock_path)
        state = journal_state(journal)
        if state == "in-use":
            raise RecordStartError(
                f"{journal}: another record of {lock_path} is running; wait for it to end"
            )
        if state == "left":
            raise RecordStartError(
                f"{journal}: a record that was interrupted or failed left this journal; run "
                f"`fetchproxy lock recover --lock {lock_path}` to keep what it fetched, "
                "or delete it to start afresh"
            )
        if state == "left-empty":  # a run killed before its first fetch: it holds nothing
            journal.unlink(missing_ok=True)
        check_writable(lock_path, "record writes the lock and its journal there (--lock PATH)")
        log_path = log or default_log_path(lock_path)
        check_writable_log(log_path)
        store.check_writable()
        previous = _lock_as_it_is(lock_path)
        if upload is not None:
            upload.check()
        book = cls(
            lock_path, keep=keep, previous=previous, events=EventLog(log_path), upload=upload
        )
        book.lock_bytes = _bytes_of(lock_path)
        try:
            book.journal.create()
        except OSError as exc:
            book.events.close()
            raise write_error(journal, exc, "record writes its journal beside the lock") from None
        return book

    def kept_answer(self, key: RequestKey) -> Fetch | None:
        """With ``keep``: the existing lock's entry for ``key``, to answer from the store."""
        if not self.keep or self.previous is None:
            return None
        return self.previous.lookup(key)

    def answered_from_lock(self) -> None:
        """A request was answered from the existing lock (``--keep``)."""
        self.stats.kept += 1

    def recorded(self, fetch: Fetch) -> None:
        """An answer stored and ready to lock: journaled at once, then counted."""
        key = fetch.key
        try:
            self.journal.append(fetch)
        except OSError as exc:  # a full disk: this answer cannot be kept safely
            self._unjournaled(key, exc)
            return
        previous = self.fetches.get(key)
        if previous is not None and previous != fetch:
            logger.warning(
                "%s %s answered differently within one run (%s, %d bytes, then %s, %d bytes): "
                "the origin is not deterministic; the lock keeps the last answer",
                key.method,
                key.url,
                previous.digest,
                previous.size,
                fetch.digest,
                fetch.size,
            )
            self.events.emit(DRIFT_IN_RUN, key=key)
        if previous is None:
            self.stats.recorded += 1
            self.stats.bytes += fetch.size
            self.stats.redacted += fetch.redacted is not None
        self.fetches[key] = fetch

    def _unjournaled(self, key: RequestKey, exc: OSError) -> None:
        self.stats.unstored += 1
        error = str(write_error(self.journal.path, exc, "the lock will stay as it was"))
        if not self.journal_failed:  # said once; every answer it loses is counted
            logger.error("record: %s", error)
        self.journal_failed = True
        self.events.emit(UNSTORED, key=key, error=error)

    def headers_dropped(self, key: RequestKey, names: list[str]) -> None:
        """``key``'s answer is locked without ``names``: their values are not clean text."""
        self.stats.headers_not_kept += 1
        logger.warning(
            "record: %s %s: not keeping %s (not clean text: control characters or bytes that "
            "are not UTF-8)",
            key.method,
            key.url,
            ", ".join(names),
        )
        self.events.emit(HEADERS_NOT_KEPT, key=key, headers=names)

    def reached(self, origin: str) -> None:
        """A request was forwarded to ``origin``."""
        self.origins.add(origin)

    def passed(self) -> None:
        """An answer the client got from the origin that is not locked (5xx, websocket)."""
        self.stats.passed += 1

    def failed(self, key: RequestKey | None, error: str) -> None:
        """A request the origin could not answer (connection or TLS failure)."""
        self.stats.failed += 1
        self.events.emit(FAILED, key=key, error=error)

    def unstored(self, key: RequestKey, exc: StoreError) -> None:
        """The client got its answer but the store could not keep it: loud, and not locked."""
        self.stats.unstored += 1
        logger.error("record: %s %s was not recorded: %s", key.method, key.url, exc)
        self.events.emit(UNSTORED, key=key, error=str(exc))

    def refused(self, reason: str, *, key: RequestKey | None, error: str) -> None:
        """A request fetchproxy answered itself instead of forwarding it."""
        self.stats.refused += 1
        self.events.refused(key, reason=reason, error=error)

    def new_lock(self) -> Lock:
        """What this run recorded; with ``keep``, on top of the existing lock."""
        base = self.previous if self.keep and self.previous is not None else Lock()
        return base.updated(self.fetches.values())

    def finish(self, build_status: int = 0) -> RecordResult:
        """Write the lock, or leave it as it was when it must not change; close the books.

        The lock stays, and the journal keeps what was recorded, when the build failed
        (``build_status`` > 0), was stopped by a signal (< 0), an answer could not be stored,
        or the lock could not be written.
        """
        try:
            new = self.new_lock()
            reason = self._why_the_lock_stays(build_status)
            detail = uploaded = None
            if reason is None and self.upload is not None:
                try:
                    uploaded = self.upload.upload(new, self.lock_path)
                except StoreError as exc:
                    reason, _, rest = str(exc).partition("\n")
                    detail = rest or None
            if reason is None:
                try:
                    write_lock(self.lock_path, new)
                except OSError as exc:
                    reason = str(write_error(self.lock_path, exc, "the lock could not be written"))
        except BaseException:  # a defect: the journal keeps what was fetched, and is let go
            self.close()
            raise
        self.events.close()
        if reason is None:
            self._close_journal(remove=True)
            return RecordResult(
                written=True,
                reason=None,
                journal=None,
                previous=self.previous,
                new=new,
                uploaded=uploaded,
            )
        self._close_journal(remove=False)  # one that holds no fetch goes all the same
        journal = self.journal.path if self.journal.appended else None
        return RecordResult(
            written=False,
            reason=reason,
            journal=journal,
            previous=self.previous,
            new=new,
            changed_meanwhile=_bytes_of(self.lock_path) != self.lock_bytes,
            detail=detail,
        )

    def close(self) -> None:
        """Close the books without writing the lock (a run that never started): the journal
        goes when it holds nothing."""
        self.events.close()
        self._close_journal(remove=False)

    def _close_journal(self, *, remove: bool) -> None:
        try:
            self.journal.close(remove=remove)
        except OSError as exc:  # what it holds was flushed line by line: say so, go on
            if not self.journal_failed:  # else said already
                why = write_error(self.journal.path, exc, "its last lines may be lost")
                logger.error("record: %s", why)

    def _why_the_lock_stays(self, build_status: int) -> str | None:
        if build_status < 0:
            try:
                name = signal.Signals(-build_status).name
            except ValueError:  # a real-time signal has no name
                name = f"signal {-build_status}"
            return f"the build was stopped by {name}"
        if build_status > 0:
            return f"the build failed (exit status {build_status})"
        if self.stats.unstored:
            return f"{self.stats.unstored} answer(s) could not be stored"
        return None


def _bytes_of(path: Path) -> bytes | None:
    """The lock's bytes; None for none, or for the empty file that reserves its name while
    a first record runs (the writer never writes an empty lock)."""
    try:
        return path.read_bytes() or None
    except OSError:
        return None


def _lock_as_it_is(lock_path: Path) -> Lock | None:
    """The lock before the run; one that exists but cannot be read stops the run unchanged.

    An empty file is no lock: the writer never writes one, but a first record that was killed
    leaves the empty file the sandbox reserved the lock's name with.
    """
    try:
        if lock_path.stat().st_size == 0 and lock_path.is_file():
            return None
    except FileNotFoundError:
        return None
    try:
        return load_lock(lock_path)
    except LockFileError as exc:
        raise LockFileError(
            exc.path,
            exc.line,
            f"{exc.message} (record does not overwrite a lock it cannot read: to record "
            "afresh, move it aside first)",
        ) from None


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover` did."""

    fetches: int
    """Entries the journal held (0: the lock was left as it was)."""
    onto: int | None
    """Entries of the existing lock kept under them (None: the journal replaced the lock)."""
    mode: str


def recover(lock_path: Path) -> Recovered:
    """Write the lock from the journal an interrupted or failed record left, then remove it.

    A ``--keep`` run's journal (and an older one that does not say how it recorded) is added
    on top of the existing lock, the same rule as :meth:`RecordBook.new_lock`; a fresh run's
    replaces it. An empty journal is removed and the lock left as it was.
    """
    journal = journal_path(lock_path)
    state = journal_state(journal)
    if state == "absent":
        raise FetchproxyError(f"{journal}: no journal to recover (nothing was interrupted)")
    if state == "in-use":
        raise FetchproxyError(f"{journal}: a record of {lock_path} is running: it is not over")
    latest = {fetch.key: fetch for fetch in read_journal(journal)}
    mode = journal_mode(journal)
    if not latest:
        journal.unlink()
        return Recovered(fetches=0, onto=None, mode=mode)
    keep = mode != "fresh"  # an older journal does not say: adding to the lock drops nothing
    previous = _lock_as_it_is(lock_path) if keep else None
    book = RecordBook(lock_path, keep=keep, previous=previous, events=EventLog(None))
    book.fetches = latest
    try:
        write_lock(lock_path, book.new_lock())
    except OSError as exc:
        raise WriteError(str(write_error(lock_path, exc, "the lock is unchanged"))) from None
    journal.unlink()
    onto = (len(previous) if previous is not None else 0) if keep else None
    return Recovered(fetches=len(latest), onto=onto, mode=mode)


def recovered_text(lock_path: Path, result: Recovered) -> str:
    """What ``fetchproxy lock recover`` prints."""
    journal = journal_path(lock_path)
    if not result.fetches:
        return (
            f"fetchproxy: {lock_path}: {journal} held no fetch; removed it, the lock is unchanged"
        )
    onto = ""
    if result.onto is not None:
        why = "--keep" if result.mode == "keep" else "an older journal: nothing is removed"
        onto = f" on top of its {counted(result.onto, 'entry', 'entries')} ({why})"
    return (
        f"fetchproxy: {lock_path}: recovered {counted(result.fetches, 'fetch', 'fetches')} "
        f"from {journal}{onto}"
    )

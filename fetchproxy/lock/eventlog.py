"""The event log: one JSON object per line for every refusal and every problem a run meets.

It is written beside the lock by default (``fetchproxy.lock.log.jsonl`` for
``fetchproxy.lock.toml``), fresh for each run, line-buffered so a killed run keeps what it saw.
The schema (docs/event-log.md) is one shape for every event: ``{"event": NAME, "key": KEY, ...}``
where ``KEY`` is the request's key spelled as the lock spells it (``method``, ``url``,
``accept``, ``git-protocol``, ``body-digest``; absent parts left out) or ``null`` for what had
no key (an invalid request, raw TCP). The names are the constants below.

Nothing secret is ever written: URLs are keys (secret parameters removed), error texts never
quote a header value or a query, and no header values other than the recorded ones appear.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from pathlib import Path
from typing import IO, Final, Self

from fetchproxy.files import check_writable, write_error
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import Fetch, key_table

logger = logging.getLogger("fetchproxy")

REFUSED: Final = "refused"
"""A request fetchproxy answered itself instead of serving or forwarding it (``reason``)."""
UNUSED: Final = "unused"
"""Replay, at the end: a lock entry no request asked for."""
USED: Final = "used"
"""Replay, at the end: a lock entry that was served (``digest``, ``size``)."""
FETCH_SET: Final = "fetch-set"
"""Replay, last of all: what the run served as a whole (``key`` null; ``digest``: the fetch-set
digest of the ``used`` entries, ``entries``: how many, ``exact``, ``refused``, ``sandbox``)."""
UNSTORED: Final = "unstored"
"""Record: an answer the client got but the store could not keep (``error``)."""
FAILED: Final = "failed"
"""Record: a request the origin could not answer (``error``)."""
DRIFT_IN_RUN: Final = "drift-in-run"
"""Record: one request answered with different bytes within one run."""
HEADERS_NOT_KEPT: Final = "headers-not-kept"
"""Record: an answer locked without headers whose values are not clean text (``headers``)."""
EVENTS: Final = (REFUSED, UNUSED, USED, FETCH_SET, UNSTORED, FAILED, DRIFT_IN_RUN, HEADERS_NOT_KEPT)


def default_log_path(lock_path: Path) -> Path:
    """``fetchproxy.lock.toml`` → ``fetchproxy.lock.log.jsonl``, in the lock's directory."""
    name = lock_path.name
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    return lock_path.with_name(f"{stem}.log.jsonl")


_FIX = "the event log goes elsewhere with --log PATH"


def check_writable_log(path: Path) -> None:
    """``WriteError`` unless an event log could be made at ``path`` (nothing is truncated)."""
    check_writable(path, _FIX)


class EventLog:
    """Appends events to a JSON-lines file; also counts them for the end-of-run summary.

    The file is opened without following a symbolic link: a link planted where the log goes
    is refused, never written through.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self.counts: dict[str, int] = {}
        self.failed: str | None = None
        """Why the log stopped, if it did (a full disk)."""
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(path, flags, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    exc = OSError(
                        errno.ELOOP,
                        "it is a symbolic link, which fetchproxy never writes through",
                        str(path),
                    )
                raise write_error(path, exc, _FIX) from None
            self._file = open(fd, "w", encoding="utf-8", buffering=1)  # noqa: PTH123, SIM115

    def emit(self, event: str, *, key: RequestKey | None, **fields: object) -> None:
        """Write one event line: ``{"event": event, "key": …, …fields}``."""
        assert event in EVENTS, f"unknown event {event!r}"
        self.counts[event] = self.counts.get(event, 0) + 1
        if self._file is not None:
            record: dict[str, object] = {"event": event}
            record["key"] = None if key is None else key_table(key)
            record.update(
                (name, value)
                for name, value in fields.items()
                if value is not None or name == "nearest"  # null: nothing on the host is locked
            )
            try:
                self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            except OSError as exc:  # a full disk: the run goes on, the log says where it ends
                self.failed = str(write_error(self.path or Path(), exc, _FIX))
                logger.error("%s; the event log stops here", self.failed)
                self._drop()

    def refused(
        self,
        key: RequestKey | None,
        *,
        reason: str,
        nearest: Fetch | None = None,
        **fields: object,
    ) -> None:
        """A request that was not served, with the lock entry most like it (when it had a key)."""
        if key is not None:
            fields["nearest"] = None if nearest is None else key_table(nearest.key)
        self.emit(REFUSED, key=key, reason=reason, **fields)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.failed = str(write_error(self.path or Path(), exc, _FIX))
                logger.error("%s", self.failed)
            self._file = None

    def _drop(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

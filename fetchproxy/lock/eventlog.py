"""The event log: one JSON object per line for every refusal and every problem a run meets.

It is written beside the lock by default (``fetchproxy.lock.log.jsonl`` for
``fetchproxy.lock.toml``), fresh for each run, line-buffered so a killed run keeps what it saw.
Nothing secret is ever written: URLs are keys (secret parameters removed) and no header values
other than the recorded ones appear.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Self

from fetchproxy.files import check_writable, write_error
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import Fetch, key_table


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
    """Appends events to a JSON-lines file; also counts them for the end-of-run summary."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self.counts: dict[str, int] = {}
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = path.open("w", encoding="utf-8", buffering=1)
            except OSError as exc:
                raise write_error(path, exc, _FIX) from None

    def emit(self, event: str, **fields: object) -> None:
        """Write one event line: ``{"event": event, ...fields}``."""
        self.counts[event] = self.counts.get(event, 0) + 1
        if self._file is not None:
            record = {"event": event, **fields}
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def refused(
        self, key: RequestKey, *, reason: str, nearest: Fetch | None, error: str | None = None
    ) -> None:
        """A request that was not served, with the lock entry most like it (and why, for a
        blob the store could not serve)."""
        near = None if nearest is None else key_table(nearest.key)
        extra = {} if error is None else {"error": error}
        self.emit("refused", reason=reason, key=key_table(key), nearest=near, **extra)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

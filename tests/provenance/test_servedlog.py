"""What a replay served, read back from the event log its book wrote; and every way a file can
fail to be that log, named by file and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.lock import eventlog
from fetchproxy.lock.eventlog import EventLog
from fetchproxy.lock.model import Lock
from fetchproxy.provenance import servedlog
from fetchproxy.provenance.entry import Entry, entry_from_fetch
from fetchproxy.provenance.fetchset import fetch_set_digest
from fetchproxy.provenance.servedlog import ServedLogError, served_entries
from fetchproxy.replay.book import ReplayBook
from tests.support.locks import make_fetch

A = make_fetch(url="https://example.org/a", status=200, digest=digest_bytes(b"a"), size=1)
B = make_fetch(url="https://example.org/b", status=200, digest=digest_bytes(b"bb"), size=2)
C = make_fetch(url="https://example.org/c", status=404, digest=digest_bytes(b"c"), size=1)
LOCK = Lock.from_fetches([A, B, C])
ENTRIES = [entry_from_fetch(f) for f in LOCK.fetches]


def replay_log(tmp_path: Path, *served: object, refused: object = None) -> str:
    """The event log a replay book writes when it served ``served`` (and refused one)."""
    path = tmp_path / "replay.log.jsonl"
    book = ReplayBook(LOCK, tmp_path / "app.lock.toml", EventLog(path), sandbox="root")
    for fetch in served:
        book.served(fetch.key, fetch.size)  # type: ignore[attr-defined]
    if refused is not None:
        book.refuse(refused.key, reason="corrupt-blob")  # type: ignore[attr-defined]
    book.close()
    return path.read_text()


def served(text: str, entries: list[Entry] = ENTRIES) -> list[Entry]:
    return served_entries(text, entries, path="replay.log.jsonl", lock="app.lock.toml")


def test_the_names_are_the_event_logs() -> None:
    assert (servedlog.USED, servedlog.FETCH_SET) == (eventlog.USED, eventlog.FETCH_SET)


def test_what_a_replay_served_is_read_back(tmp_path: Path) -> None:
    text = replay_log(tmp_path, A, C, A)
    assert served(text) == [entry_from_fetch(A), entry_from_fetch(C)]
    # an entry asked for but refused (its blob) was not served
    text = replay_log(tmp_path, A, refused=B)
    assert [line.split('"')[3] for line in text.splitlines()] == [
        "refused",
        "used",
        "unused",
        "fetch-set",
    ]
    assert served(text) == [entry_from_fetch(A)]
    assert fetch_set_digest(served(text)) in text.splitlines()[-1]


def test_a_replay_that_served_nothing_served_nothing(tmp_path: Path) -> None:
    assert served(replay_log(tmp_path)) == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda text: "not json\n" + text,
            "replay.log.jsonl:1: not an event-log line (a JSON object with an event)",
        ),
        (
            lambda text: text.replace('"event": "used"', '"kind": "used"', 1),
            "replay.log.jsonl:1: not an event-log line",
        ),
        (
            lambda text: "\n".join(text.splitlines()[:-1]) + "\n",
            "replay.log.jsonl:3: the log ends without a fetch-set line, so it is not the log of a "
            "finished replay (a record's log, or a replay that was stopped)",
        ),
        (
            lambda text: text + '{"event": "refused", "key": null}\n',
            "replay.log.jsonl:5: an event after the fetch-set line",
        ),
        (
            lambda text: text.replace(
                '"key": {"method": "GET", "url": "https://example.org/a"}', '"key": 7'
            ),
            "replay.log.jsonl:1: a used event without a request key",
        ),
        (
            lambda text: text.replace("https://example.org/a", "https://example.org/z"),
            "replay.log.jsonl:1: GET https://example.org/z was served, but app.lock.toml has no "
            "such entry — the log is of another lock, or the lock changed since the replay",
        ),
        (
            lambda text: text.replace(digest_bytes(b"a"), "\\u001b[2J", 1),
            "replay.log.jsonl:1: GET https://example.org/a was served as \\x1b[2J, but "
            f"app.lock.toml answers {digest_bytes(b'a')} — the lock changed since the replay",
        ),
        (
            lambda text: text.replace('"fetch-set", "key": null, "digest"', '"fetch-set", "x"'),
            "replay.log.jsonl:4: a fetch-set event without its digest",
        ),
    ],
    ids=[
        "not-json",
        "no-event",
        "no-fetch-set",
        "after-the-end",
        "no-key",
        "not-in-the-lock",
        "other-bytes",
        "no-digest",
    ],
)
def test_what_is_not_this_replays_log_is_named_by_line(
    tmp_path: Path, edit: object, message: str
) -> None:
    text = replay_log(tmp_path, A, C)
    with pytest.raises(ServedLogError) as caught:
        served(edit(text))  # type: ignore[operator]
    assert str(caught.value).startswith(message), str(caught.value)
    assert str(caught.value).endswith(
        "give --served the event log of the replay whose fetches the SBOM lists (--log, or the "
        ".log.jsonl beside the lock), with the lock it replayed"
    )


def test_a_lock_whose_answers_changed_is_not_the_one_replayed(tmp_path: Path) -> None:
    text = replay_log(tmp_path, A)
    # the same body, another content-type: not the answer the replay served
    changed = [entry_from_fetch(dataclasses.replace(A, content_type="text/html")), *ENTRIES[1:]]
    with pytest.raises(ServedLogError, match=r"^replay.log.jsonl:4: the replay served the fetch"):
        served(text, changed)

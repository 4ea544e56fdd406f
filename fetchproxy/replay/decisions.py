"""What replay answers: pure decisions over the lock, no mitmproxy and no I/O.

A request's key either names a lock entry exactly (a hit, answered with the recorded status,
headers and bytes) or it does not (a refusal, with the nearest entry to make the fix obvious).
There is no third outcome: no near match is ever served and nothing is forwarded.
"""

from __future__ import annotations

import bisect
import http
from dataclasses import dataclass

from fetchproxy.keys.request import ANY_ACCEPT, RequestKey
from fetchproxy.keys.rules import HostMismatchError, UnnamedServerError
from fetchproxy.lock.model import KEY_FIELDS, Fetch, Lock
from fetchproxy.replay.ranges import ByteRange, Unsatisfiable, parse_range
from fetchproxy.store import CorruptBlobError, StoreError
from fetchproxy.text import printable

REFUSED_HEADER = "x-fetchproxy-refused"
NOT_IN_LOCK = "not-in-lock"
CORRUPT_BLOB = "corrupt-blob"
NOT_HTTP = "not-http"
INVALID_REQUEST = "invalid-request"
HOST_MISMATCH = "host-mismatch"
NO_SERVER_NAME = "no-server-name"
"""An intercepted request (``--intercept transparent``) that names no server: no TLS server
name and no ``Host``, or sent to a synthetic address the DNS stub never handed out."""
ORIGIN_NOT_ALLOWED = "origin-not-allowed"
"""Record: the origin is not one record may reach for this build (fetchproxy.record.origins)."""
STORE_ERROR = "store-error"
REASONS = (
    NOT_IN_LOCK, CORRUPT_BLOB, STORE_ERROR, NOT_HTTP, INVALID_REQUEST, HOST_MISMATCH,
    ORIGIN_NOT_ALLOWED,
)  # fmt: skip
"""Every ``reason`` of a refusal: the ``x-fetchproxy-refused`` header and the event log's."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A response to send: status, headers in order, and which bytes of the blob follow."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: ByteRange | None
    """The part of the blob to send; None sends the whole blob (or nothing, for HEAD)."""
    send_body: bool = True

    @property
    def reason(self) -> str:
        return _reason(self.status)

    def span(self, size: int) -> tuple[int, int]:
        """``(start, end)`` of the bytes of a ``size``-byte blob this answer sends: its range,
        else the whole blob."""
        body = self.body
        return (0, size) if body is None else (body.start, body.end + 1)

    def body_bytes(self, size: int) -> int:
        """How many body bytes this answer sends from a ``size``-byte blob (0 for HEAD)."""
        if not self.send_body:
            return 0
        start, end = self.span(size)
        return end - start


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def answer_for(fetch: Fetch, *, method: str, range_header: str | None) -> Answer:
    """The recorded answer for a hit, with ``Range`` honoured on a recorded 200."""
    headers = fetch.response_headers()
    if method == "HEAD":
        length = fetch.content_length if fetch.content_length is not None else fetch.size
        headers.append(("content-length", str(length)))
        return Answer(fetch.status, tuple(headers), None, send_body=False)
    wanted = parse_range(range_header, fetch.size) if fetch.status == 200 else None
    if isinstance(wanted, Unsatisfiable):
        return Answer(
            416,
            (("content-range", wanted.content_range()), ("content-length", "0")),
            None,
            send_body=False,
        )
    if isinstance(wanted, ByteRange):
        headers.append(("content-range", wanted.content_range()))
        headers.append(("content-length", str(wanted.length)))
        return Answer(206, tuple(headers), wanted)
    headers.append(("content-length", str(fetch.size)))
    return Answer(fetch.status, tuple(headers), None)


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a refused request gets: the answer (status and headers) and its one-line body."""

    answer: Answer
    text: bytes


def refusal(
    key: RequestKey, *, lock_name: str, reason: str = NOT_IN_LOCK, status: int = 403
) -> Refusal:
    """The 403 a build sees for a request the lock does not hold (502 for a bad blob)."""
    return _refusal(status, reason, _refusal_text(key, lock_name=lock_name, reason=reason))


def invalid_request(problem: str, reason: str = INVALID_REQUEST, status: int = 400) -> Refusal:
    """The 400 for a request no key can name (``reason``: invalid-request, or host-mismatch
    for a ``Host`` header naming another server than the one it was sent to; ``status`` 413
    for a body over the limit)."""
    return _refusal(
        status, reason, printable(f"fetchproxy: refused: {problem}", lines=False) + "\n"
    )


def unkeyable(exc: ValueError) -> tuple[str, int]:
    """The refusal's reason and status for a request no key can name, from what the key rules
    raised: 400 ``host-mismatch`` or ``invalid-request``, 421 ``no-server-name``."""
    if isinstance(exc, HostMismatchError):
        return HOST_MISMATCH, 400
    if isinstance(exc, UnnamedServerError):
        return NO_SERVER_NAME, 421
    return INVALID_REQUEST, 400


def store_refusal(exc: StoreError) -> tuple[str, int]:
    """The reason and status for a hit whose blob the store cannot serve: never its bytes."""
    return (CORRUPT_BLOB if isinstance(exc, CorruptBlobError) else STORE_ERROR), 502


def _refusal(status: int, reason: str, text: str) -> Refusal:
    body = text.encode()
    headers = (
        (REFUSED_HEADER, reason),
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(body))),
    )
    return Refusal(Answer(status, headers, None), body)


def _refusal_text(key: RequestKey, *, lock_name: str, reason: str = NOT_IN_LOCK) -> str:
    """The one-line body of a refusal, naming the method, URL and lock."""
    if reason == NOT_IN_LOCK:
        why = f"not in the lock {lock_name}"
    elif reason == CORRUPT_BLOB:
        why = f"the recorded body in the store is corrupt (lock {lock_name})"
    elif reason == STORE_ERROR:
        why = f"the recorded body cannot be served from the store (lock {lock_name})"
    elif reason == ORIGIN_NOT_ALLOWED:
        why = f"record may not reach this origin for the build (lock {lock_name}; see its log)"
    else:
        why = f"{reason} (lock {lock_name})"
    return printable(f"fetchproxy: refused {key.method} {key.url}: {why}", lines=False) + "\n"


def nearest(lock: Lock, key: RequestKey) -> Fetch | None:
    """The lock entry most like ``key``: the longest shared URL prefix, then the same URL (not
    a longer one), then the same method, then the same ``accept``.

    Entries are sorted by URL, so the longest common prefix is at a neighbour of the spot
    where ``key`` would be inserted.
    """
    fetches = lock.fetches
    if not fetches:
        return None
    position = bisect.bisect_left(fetches, key.sort_key(), key=Fetch.sort_key)
    candidates = fetches[max(position - 2, 0) : position + 2]

    def likeness(entry: Fetch) -> tuple[int, bool, bool, bool]:
        return (
            _common_prefix(entry.key.url, key.url),
            entry.key.url == key.url,
            entry.key.method == key.method,
            entry.key.accept == key.accept,
        )

    best = max(candidates, key=likeness)
    host = key.url.split("/", 3)[:3]
    if best.key.url.split("/", 3)[:3] != host:
        return None  # nothing on this host: a new host is its own message
    return best


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def key_differences(key: RequestKey, other: RequestKey) -> list[str]:
    """The lock fields (``url``, ``accept``, …) in which two keys differ, in format order."""
    return [f.name for f in KEY_FIELDS if getattr(key, f.attr) != getattr(other, f.attr)]


def accept_hint(key: RequestKey, near: Fetch | None) -> str | None:
    """What to do about a refused request whose nearest lock entry differs only in ``accept``
    (None: it differs in more, or there is none).

    A client's ``Accept`` is part of the key because it can select another answer; but two
    versions of one tool often send different values to a server that answers every value
    alike (cargo 1.65 ``*/*``, cargo 1.95 ``text/plain``), and then a lock recorded with one
    is refused to the other. The hint names the setting that says so, ready to paste.
    """
    if near is None or key_differences(key, near.key) != ["accept"]:
        return None
    where = f"{near.key.method} {near.key.url}"
    if near.key.accept == ANY_ACCEPT:
        return (
            f"the lock holds {where} for any Accept (recorded with fetchproxy.toml's "
            "[fetchproxy] accept-selects-nothing naming it), but this run's fetchproxy.toml "
            "does not name it: replay with the fetchproxy.toml the lock was recorded with"
        )
    if key.accept == ANY_ACCEPT:
        return (
            f"this run's fetchproxy.toml says Accept selects nothing at {key.url}, but the "
            f"lock holds it with {_accept_shown(near.key.accept)} (recorded without that "
            "setting): record again with this fetchproxy.toml"
        )
    return (
        f"the lock holds {where} with {_accept_shown(near.key.accept)}, and this request has "
        f"{_accept_shown(key.accept)}: the only difference is the Accept header, so another "
        "client, or another version of it, made the lock. Record again with this one; or, if "
        "Accept selects nothing there, run `fetchproxy config add "
        f"fetchproxy.accept-selects-nothing {key.host}` and record again"
    )


def _accept_shown(accept: str | None) -> str:
    return "no Accept (or */*)" if accept is None else f'accept = "{accept}"'

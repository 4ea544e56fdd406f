"""Replay's decisions for one run, made once for both engines: :class:`Replayer`.

An engine hands over what it saw of a request (a :class:`~fetchproxy.keys.rules.RawRequest`)
and gets back either a :class:`Hit` — the lock entry and the exact answer to send — or a
:class:`~fetchproxy.replay.decisions.Refusal`, already counted and logged. The order is fixed
here: a request no key can name (400), then a websocket upgrade (403, not HTTP a lock can hold),
then a key the lock does not hold (403); a hit whose blob the store cannot serve is refused with
502 when its blob is verified. What was served is counted here too, with one formula for the
body bytes (:meth:`~fetchproxy.replay.decisions.Answer.body_bytes`).

The engines only move bytes: the direct server (:mod:`fetchproxy.replay.server`) and the
mitmproxy replay addon (``addons/replay.py``) keep no books and decide nothing of their own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules, RawRequest
from fetchproxy.lock.model import Fetch
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.book import ReplayBook
from fetchproxy.replay.decisions import (
    CORRUPT_BLOB,
    INVALID_REQUEST,
    NOT_HTTP,
    NOT_IN_LOCK,
    Answer,
    Refusal,
    answer_for,
    invalid_request,
    refusal,
    store_refusal,
    unkeyable,
)
from fetchproxy.store import StoreError

logger = logging.getLogger("fetchproxy.replay")


@dataclass(frozen=True, slots=True)
class Lookup:
    """A request's key and the lock entry it names (None: not in the lock); or, when no key
    can name it, the ``problem`` and the refusal's ``reason``. The same facts always give the
    same lookup, so an engine may keep it for a request seen again."""

    key: RequestKey | None
    fetch: Fetch | None
    problem: str = ""
    reason: str = INVALID_REQUEST
    status: int = 400
    """The refusal's status when no key can name the request (413: a body over the limit)."""


class Hit:
    """A request the lock holds, and the answer it gets.

    The answer (its headers, a range) is worked out when first asked for: a server that has
    the whole answer's bytes prepared for this request sends those and never needs it.
    """

    __slots__ = ("_answer", "_body_bytes", "fetch", "key", "method", "range_header")

    def __init__(
        self, key: RequestKey, fetch: Fetch, *, method: str, range_header: str | None
    ) -> None:
        self.key = key
        self.fetch = fetch
        self.method = method
        self.range_header = range_header
        self._answer: Answer | None = None
        self._body_bytes: int | None = None

    @property
    def answer(self) -> Answer:
        if self._answer is None:
            self._answer = answer_for(
                self.fetch, method=self.method, range_header=self.range_header
            )
        return self._answer

    @property
    def body_bytes(self) -> int:
        """The body bytes this answer sends (worked out once: a prepared hit is counted again
        for every request it answers)."""
        found = self._body_bytes
        if found is None:
            if self._answer is None and self.range_header is None:  # the whole body, or none
                found = 0 if self.method == "HEAD" else self.fetch.size
            else:
                found = self.answer.body_bytes(self.fetch.size)
            self._body_bytes = found
        return found


class Replayer:
    """The decisions of one replay run over its :class:`ReplayBook`, blobs and key rules."""

    def __init__(self, book: ReplayBook, blobs: VerifiedBlobs, rules: KeyRules) -> None:
        self.book = book
        self.blobs = blobs
        self.rules = rules

    @property
    def lock_name(self) -> str:
        return str(self.book.lock_path)

    def lookup(self, request: RawRequest) -> Lookup:
        """The key of ``request`` and its lock entry; nothing is counted yet."""
        try:
            key = self.rules.key(request)
        except ValueError as exc:  # HostMismatchError, InvalidURLError, InvalidMethodError, ...
            reason, status = unkeyable(exc)
            return Lookup(None, None, str(exc), reason, status)
        return Lookup(key, self.book.lock.lookup(key))

    def decide(
        self, lookup: Lookup, *, method: str, websocket: bool = False, range_header: str | None
    ) -> Hit | Refusal:
        """The hit to answer, or the refusal to send (counted and logged)."""
        key, fetch = lookup.key, lookup.fetch
        if key is None:
            self.book.refuse_other(lookup.reason, error=lookup.problem)
            return invalid_request(lookup.problem, lookup.reason, lookup.status)
        if websocket:
            return self._refuse(key, NOT_HTTP)
        if fetch is None:
            return self._refuse(key, NOT_IN_LOCK)
        return Hit(key, fetch, method=method, range_header=range_header)

    async def verify(self, hit: Hit) -> Refusal | None:
        """Rehash the hit's blob unless this run did; the 502 refusal when it cannot be served."""
        try:
            await self.blobs.verify(hit.fetch.digest, hit.fetch.size)
        except StoreError as exc:  # corrupt, unreadable, or not the size the lock says
            return self.store_failed(hit, exc)
        return None

    def store_failed(self, hit: Hit, exc: StoreError) -> Refusal:
        """Refuse a hit whose blob the store could not serve (nothing of it was sent)."""
        logger.error("%s", exc)
        reason, status = store_refusal(exc)
        return self._refuse(hit.key, reason, status, error=str(exc))

    def served(self, hit: Hit) -> None:
        """Count ``hit`` as served; called before its answer is sent, so the books are right by
        the time a client has it."""
        self.book.served(hit.key, hit.body_bytes)

    def withdrawn(self, hit: Hit, error: str) -> Refusal:
        """A hit counted as served whose blob could not be served after all (nothing of it was
        sent): counted as refused instead, and the 502 to send."""
        logger.error("%s", error)
        self.book.revoke(hit.key, hit.body_bytes, reason=CORRUPT_BLOB, error=error)
        return refusal(hit.key, lock_name=self.lock_name, reason=CORRUPT_BLOB, status=502)

    def cut_off(self, hit: Hit, exc: StoreError) -> None:
        """A hit counted as served whose body was cut off (its blob rotted while it streamed)."""
        logger.error("%s", exc)
        self.book.revoke(hit.key, hit.body_bytes, reason=CORRUPT_BLOB, error=str(exc))

    def refuse_raw(self, address: object) -> None:
        """Refuse traffic that is not HTTP (raw TCP or UDP in a tunnel to ``address``)."""
        self.book.refuse_raw(address)

    def refuse_not_http(self, address: object, problem: str) -> None:
        """Refuse bytes in a tunnel to ``address`` that did not parse as HTTP."""
        self.book.refuse_other(NOT_HTTP, address=f"{address}", error=problem)

    def _refuse(
        self, key: RequestKey, reason: str, status: int = 403, *, error: str | None = None
    ) -> Refusal:
        self.book.refuse(key, reason=reason, error=error)
        return refusal(key, lock_name=self.lock_name, reason=reason, status=status)

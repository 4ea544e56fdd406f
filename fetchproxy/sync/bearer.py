"""``store fetch`` against registries that ask for tokens: a Bearer challenge answered, anonymously.

A registry with token auth (Docker Hub, ghcr.io, quay.io, any distribution-based registry)
answers a GET without a credential with ``401`` and ``WWW-Authenticate: Bearer
realm="https://auth.example/token",service="registry.example",scope="repository:app:pull"``;
the client asks the realm for a token (``GET REALM?scope=…&service=…``) and sends the request
again with ``Authorization: Bearer TOKEN``. A registry that serves a repository to anyone gives
anyone a token: ``store fetch`` does what the client did, without a credential of its own.

**The challenge** is parsed strictly by RFC 9110's grammar (:mod:`fetchproxy.sync.challenge`,
pure: a header that does not parse, or names its realm twice, is refused, never guessed at).

**The realm** (:func:`~fetchproxy.sync.challenge.token_url`) is asked only when it is an
``https`` URL without userinfo or fragment, on an origin (host and port) the lock already names
and the origin policy (``--allow-origin``, ``[record] allow``) allows. Why: the challenge comes
from the origin, and a hostile origin — or a lock crafted to name one — could otherwise send
``store fetch`` to any URL it chose: a service on the runner's loopback or its internal network,
the cloud metadata address (plain http, so refused twice). Held to the lock's origins, the
realm adds no destination the lock does not send ``store fetch`` to already, and a reviewer saw
each of them in the lock (and among ``lock diff``'s new hosts). It costs real registries
nothing: the client fetched its token from the realm while the lock was recorded, so the realm
is among the lock's origins (``auth.docker.io`` beside ``registry-1.docker.io``; ``ghcr.io``
itself). The token request carries no credential (nothing to leak to a hostile realm), no
redirect is followed, and the token goes only to the origin that challenged, over TLS (an
``http`` entry's challenge is not answered). It is an anonymous token — anyone may ask the
realm for it — so a hostile origin that names another origin's realm gains nothing it could
not get itself. (Credentials are never sent: a password given to a realm chosen by an origin
would be exactly that leak.)

**The token** (:class:`BearerTokens`) is asked once per ``(realm, service, scope)`` for the
run, shared by every entry that meets the same challenge, and kept in memory until its
``expires_in`` (60 s when the answer says none, as Docker's token spec) is nearly over. It is
never written anywhere: not the store (the answer is parsed, not stored), the lock, a log or a
message (errors name the realm, never the answer).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.bodies import decoded_body
from fetchproxy.keys.url import redact_url
from fetchproxy.record.tokens import TOKEN_ANSWER_LIMIT
from fetchproxy.sync.challenge import TOKEN68_RE, BearerChallenge, token_url
from fetchproxy.sync.upstream import OriginClient, OriginUnreachableError

DEFAULT_LIFETIME: Final = 60
"""A token's lifetime in seconds when its answer gives no ``expires_in`` (Docker's token spec)."""
EARLY: Final = 10
"""Seconds before its ``expires_in`` is over that a token is asked for again."""


class TokenError(FetchproxyError):
    """The realm gave no token (its message names the realm, never a token); ``lasting``: it
    answered, and asking again in this run would get the same (not a network error)."""

    def __init__(self, message: str, *, lasting: bool = True) -> None:
        super().__init__(message)
        self.lasting = lasting


# --------------------------------------------------------------------------------- the token


@dataclass
class _Slot:
    lock: threading.Lock
    token: str | None = None
    until: float = 0.0
    refused: str | None = None


class BearerTokens:
    """Anonymous tokens, asked once per ``(realm, service, scope)`` and kept in memory only
    (thread-safe: each challenge is answered by one thread while the others wait for it)."""

    def __init__(
        self,
        client: OriginClient,
        origins: Collection[tuple[str, int]],
        *,
        user_agent: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._origins = frozenset(origins)
        self._user_agent = user_agent
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, str | None, tuple[str, ...]], _Slot] = {}

    def authorization(self, challenge: BearerChallenge) -> str:
        """``Bearer TOKEN`` for ``challenge``; :class:`ChallengeError` when its realm may not
        be asked, :class:`TokenError` when the realm gave no token (remembered for the run)."""
        url = token_url(challenge, self._origins)
        with self._lock:
            slot = self._slots.setdefault(
                (challenge.realm, challenge.service, challenge.scope), _Slot(threading.Lock())
            )
        with slot.lock:
            if slot.refused is not None:
                raise TokenError(slot.refused)
            if slot.token is None or self._clock() >= slot.until:
                try:
                    slot.token, lifetime = self._ask(url)
                except TokenError as exc:
                    if exc.lasting:  # a refusal holds for the run; a network error may pass
                        slot.refused = str(exc)
                    raise
                slot.until = self._clock() + max(lifetime - EARLY, 0)
            return f"Bearer {slot.token}"

    def _ask(self, url: str) -> tuple[str, int]:
        shown = redact_url(url.partition("?")[0])
        headers = {
            "accept": "application/json",
            "accept-encoding": "identity",
            "user-agent": self._user_agent,
        }
        try:
            answer = self._client.get(url, headers)
        except OriginUnreachableError as exc:
            raise TokenError(f"the token server {shown}: {exc}", lasting=False) from None
        whole = False
        try:
            if answer.status != 200:
                raise TokenError(
                    f"the token server {shown} refused (HTTP {answer.status}) to give an "
                    "anonymous token"
                    + (
                        ": the repository needs credentials, which store fetch never sends"
                        if answer.status in (401, 403)
                        else ""
                    )
                )
            body = answer.read(TOKEN_ANSWER_LIMIT)
            whole = body is not None
            return token_of(body, answer.headers.get("content-encoding"), shown)
        except OriginUnreachableError as exc:
            raise TokenError(f"the token server {shown}: {exc}", lasting=False) from None
        finally:
            answer.close(reuse=whole)


def token_of(body: bytes | None, content_encoding: str | None, shown: str) -> tuple[str, int]:
    """The token and its lifetime in a token answer (Docker's ``token``, OAuth 2's
    ``access_token``); :class:`TokenError`, naming ``shown`` and never the body, if none."""
    document: object = None
    if body is not None:
        try:
            document = json.loads(decoded_body(body, content_encoding, most=TOKEN_ANSWER_LIMIT))
        except (ValueError, RecursionError):
            document = None
    if not isinstance(document, dict):
        raise TokenError(f"the token server {shown} answered something other than a token answer")
    token = document.get("token") or document.get("access_token")
    if not isinstance(token, str) or not TOKEN68_RE.fullmatch(token) or len(token) > 16384:
        raise TokenError(f"the token server {shown} answered without a token fit for a header")
    lifetime = document.get("expires_in")
    if not isinstance(lifetime, int) or isinstance(lifetime, bool) or lifetime <= 0:
        lifetime = DEFAULT_LIFETIME
    return token, lifetime

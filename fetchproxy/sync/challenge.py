"""A ``WWW-Authenticate`` challenge as ``store fetch`` reads it, and the realm it may ask (pure).

**The challenge** (:func:`bearer_challenge`) is parsed by RFC 9110's grammar (section 11.6.1):
comma-separated challenges, each a scheme and ``name=value`` parameters (or one token68), a
value a token or a quoted string — so a comma or a quote inside a quoted ``scope`` is part of
it, not a new parameter. Anything that does not parse, a control character, a parameter given
twice (``realm=…,realm=…``: which would a client take?), more than one Bearer challenge, or
none with a ``realm`` is refused, never guessed at.

**The realm** (:func:`token_url`) may be asked only when it is an ``https`` URL without
userinfo or fragment whose origin (host and port) is among the lock's https origins that the
origin policy allows — why, in :mod:`fetchproxy.sync.bearer`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import InvalidURLError, normalize_url, origin_of, redact_url

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
TOKEN68_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
"""RFC 9110's token68 (RFC 6750's b64token): also what a Bearer token may be, safe in a header."""
_QDTEXT_RE = re.compile(r"[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]")
_PAIR_RE = re.compile(r"[\t \x21-\x7e\x80-\xff]")
_PRINTABLE_RE = re.compile(r"[\x20-\x7e]*")


class ChallengeError(FetchproxyError, ValueError):
    """A ``WWW-Authenticate`` value, or its realm, that ``store fetch`` does not act on."""


# ----------------------------------------------------------------------------- the challenge


@dataclass(frozen=True, slots=True)
class Challenge:
    """One challenge: its scheme (lowercase), and its parameters (names lowercase) or token68."""

    scheme: str
    params: tuple[tuple[str, str], ...] = ()
    token68: str | None = None


@dataclass(frozen=True, slots=True)
class BearerChallenge:
    """A Bearer challenge with a realm: what to ask the realm for."""

    realm: str
    service: str | None
    scope: tuple[str, ...]
    """The scopes, in the challenge's order (it separates them with spaces)."""


def parse_challenges(value: str) -> list[Challenge]:
    """Every challenge in a ``WWW-Authenticate`` value (several headers joined with ``,``);
    :class:`ChallengeError` when it is not RFC 9110's grammar."""
    return _Parser(value).challenges()


def bearer_challenge(value: str) -> BearerChallenge | None:
    """The Bearer challenge in ``value``; None when it has none (``Basic`` alone: a password);
    :class:`ChallengeError` when it cannot be acted on (see the module docstring)."""
    bearers = [c for c in parse_challenges(value) if c.scheme == "bearer"]
    if not bearers:
        return None
    if len(bearers) > 1:
        raise ChallengeError("more than one Bearer challenge")
    params = dict(bearers[0].params)
    for name, text in params.items():
        if not _PRINTABLE_RE.fullmatch(text):
            raise ChallengeError(f"the {_shown(name)} parameter holds characters a URL cannot")
    realm = params.get("realm")
    if not realm:
        raise ChallengeError("a Bearer challenge without a realm")
    return BearerChallenge(
        realm=realm,
        service=params.get("service"),
        scope=tuple(params.get("scope", "").split()),
    )


class _Parser:
    """RFC 9110 11.6.1 over one string: ``#challenge``, ``challenge = auth-scheme [ 1*SP (
    token68 / #auth-param ) ]``, ``auth-param = token BWS "=" BWS ( token / quoted-string )``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def challenges(self) -> list[Challenge]:
        found: list[Challenge] = []
        self._skip_separators()
        while self.at < len(self.text):
            found.append(self._challenge())
            self._skip_separators()
        return found

    def _challenge(self) -> Challenge:
        scheme = self._token()
        if not scheme:
            raise self._error("a challenge that does not start with a scheme name")
        if not self._peek(" "):
            return self._ended(Challenge(scheme=scheme.lower()))
        while self._peek(" "):
            self.at += 1
        token68 = self._token68()
        if token68 is not None:
            return self._ended(Challenge(scheme=scheme.lower(), token68=token68))
        params: dict[str, str] = {}
        while True:
            name, value = self._param()
            if name in params:
                raise ChallengeError(f"the {_shown(name)} parameter is given twice")
            params[name] = value
            self._skip_ows()
            if self.at == len(self.text):
                break
            if not self._peek(","):
                raise self._error("a parameter followed by something other than a comma")
            mark = self.at
            self._skip_separators()
            if self.at == len(self.text) or not self._param_ahead():
                self.at = mark  # the next challenge (or the end) starts after the comma
                break
        return Challenge(scheme=scheme.lower(), params=tuple(params.items()))

    def _ended(self, challenge: Challenge) -> Challenge:
        self._skip_ows()
        if self.at < len(self.text) and not self._peek(","):
            raise self._error("a challenge followed by something other than a comma")
        return challenge

    def _param(self) -> tuple[str, str]:
        name = self._token()
        if not name:
            raise self._error("a parameter without a name")
        self._skip_ows()
        if not self._peek("="):
            raise self._error(f"the {_shown(name)} parameter without '='")
        self.at += 1
        self._skip_ows()
        if self._peek('"'):
            return name.lower(), self._quoted()
        value = self._token()
        if not value:
            raise self._error(f"the {_shown(name)} parameter without a value")
        return name.lower(), value

    def _param_ahead(self) -> bool:
        """Whether ``token BWS "="`` starts here (an auth-param, not a new challenge)."""
        mark = self.at
        try:
            if not self._token():
                return False
            self._skip_ows()
            return self._peek("=")
        finally:
            self.at = mark

    def _token68(self) -> str | None:
        """A token68 ending the challenge here; None (and nothing read) when this is a param."""
        match = TOKEN68_RE.match(self.text, self.at)
        if match is None:
            return None
        rest = self.text[match.end() :].lstrip(" \t")
        if rest and not rest.startswith(","):
            return None  # `name=value`: the first parameter
        self.at = match.end()
        return match[0]

    def _quoted(self) -> str:
        self.at += 1  # the opening quote
        out: list[str] = []
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == '"':
                self.at += 1
                return "".join(out)
            if char == "\\":
                if self.at + 1 == len(self.text) or not _PAIR_RE.fullmatch(self.text[self.at + 1]):
                    raise self._error("a backslash in a quoted string before no character")
                out.append(self.text[self.at + 1])
                self.at += 2
                continue
            if not _QDTEXT_RE.fullmatch(char):
                raise self._error("a control character in a quoted string")
            out.append(char)
            self.at += 1
        raise self._error("a quoted string that does not end")

    def _token(self) -> str:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in _TCHAR:
            self.at += 1
        return self.text[start : self.at]

    def _peek(self, char: str) -> bool:
        return self.text.startswith(char, self.at)

    def _skip_ows(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t":
            self.at += 1

    def _skip_separators(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t,":
            self.at += 1

    def _error(self, what: str) -> ChallengeError:
        return ChallengeError(f"{what} (at character {self.at + 1})")


def _shown(name: str) -> str:
    """A parameter's name for a message: a token, so printable; cut short."""
    return repr(name[:40])


# --------------------------------------------------------------------------------- the realm


def token_url(challenge: BearerChallenge, origins: Collection[tuple[str, int]]) -> str:
    """The URL to ask for a token: the realm with the challenge's ``scope`` and ``service``,
    if it may be asked at all — ``https``, no userinfo or fragment, and its origin among
    ``origins`` (the lock's ``https`` origins the policy allows); :class:`ChallengeError` if not."""
    realm = challenge.realm
    shown = redact_url(realm)
    parts = urlsplit(realm)
    if parts.scheme.lower() != "https":
        raise ChallengeError(f"the realm {shown} is not an https URL; a token is asked over TLS")
    if "@" in parts.netloc:
        raise ChallengeError(f"the realm {shown} holds userinfo")
    if "#" in realm:
        raise ChallengeError(f"the realm {shown} holds a fragment")
    try:
        normalized = normalize_url(realm, secret_params=())
    except InvalidURLError as exc:
        raise ChallengeError(f"the realm {shown}: {exc.reason}") from None
    host, port = origin_of(normalized)
    if (host, port) not in origins:
        raise ChallengeError(
            f"the realm {shown} is on {host}:{port}, which is not an https origin the lock "
            "names; store fetch asks only those for a token"
        )
    query = [("scope", scope) for scope in challenge.scope]
    if challenge.service is not None:
        query.append(("service", challenge.service))
    if not query:
        return normalized
    return f"{normalized}{'&' if '?' in normalized else '?'}{urlencode(query)}"

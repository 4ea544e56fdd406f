"""Request keys: the normalized request a fetch is recorded and looked up under.

Pure: no I/O and no mitmproxy. The method, the URL (:mod:`fetchproxy.keys.url`), and of the
headers only those that select a representation (``Accept``, ``Git-Protocol``); a request body
by its digest (git's negotiation bodies in canonical form, :mod:`fetchproxy.keys.gitbody`).
The rules, with examples, are in ``docs/normalization.md``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from fetchproxy.digest import Digest
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS, normalize_url, redact_url

SECRET_HEADERS: frozenset[str] = frozenset(
    {"authorization", "cookie", "set-cookie", "proxy-authorization"}
)
"""Header names (lowercase) that never reach a lock, a log or the store."""

ANY_ACCEPT = "*"
"""The ``accept`` of a key made where ``Accept`` selects nothing (``fetchproxy.toml``'s
``[fetchproxy] accept-selects-nothing``): the entry answers a request with any ``Accept``, or
none. No request's own ``Accept`` normalizes to it (``*`` alone, like ``*/*``, is left out)."""

_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_OWS = " \t"  # HTTP optional whitespace
_CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")


class InvalidMethodError(FetchproxyError, ValueError):
    """A request method that is not an HTTP token."""


class InvalidHeaderError(FetchproxyError, ValueError):
    """A header the key is made of whose value no HTTP header may hold."""


SortKey = tuple[str, str, str, str, str]
"""``(url, method, accept, git-protocol, body-digest)``, absent parts as ``""``."""


@functools.total_ordering  # the other comparisons from __lt__ and the dataclass's __eq__
@dataclass(frozen=True, kw_only=True, slots=True)
class RequestKey:
    """The normalized request; lock entries are sorted by :meth:`sort_key`."""

    method: str
    url: str
    accept: str | None = None
    git_protocol: str | None = None
    """The ``Git-Protocol`` header: it selects git's v0 or v2 answer to the same URL."""
    body_digest: Digest | None = None

    def __post_init__(self) -> None:
        # "" would sort like None but compare unequal, breaking the total order.
        if self.accept == "" or self.git_protocol == "" or self.body_digest == "":
            raise ValueError(
                "RequestKey: accept, git_protocol and body_digest are None or non-empty"
            )

    def sort_key(self) -> SortKey:
        """``(url, method, accept, git-protocol, body-digest)``: the order of lock entries."""
        return (
            self.url,
            self.method,
            self.accept or "",
            self.git_protocol or "",
            self.body_digest or "",
        )

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, RequestKey):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    @property
    def host(self) -> str:
        """The normalized ``host[:port]`` of :attr:`url`, e.g. ``[::1]:8080``."""
        rest = self.url.partition("://")[2]
        return re.split(r"[/?#]", rest, maxsplit=1)[0]


def normalize_request(
    method: str,
    url: str,
    *,
    headers: Iterable[tuple[str, str]] = (),
    body_digest: Digest | None = None,
    secret_params: Collection[str] = DEFAULT_SECRET_PARAMS,
    accept_selects: bool = True,
) -> RequestKey:
    """The key of a request; of ``headers`` only ``Accept`` and ``Git-Protocol`` can be in it.

    ``accept_selects=False``: at this URL ``Accept`` selects nothing, and the key's ``accept``
    is :data:`ANY_ACCEPT` whatever the request sent.
    """
    if not _TOKEN_RE.fullmatch(method):
        raise InvalidMethodError(
            "invalid method (not an HTTP token) for URL "
            f"'{redact_url(url, secret_params=secret_params)}': a method is an HTTP token "
            "(letters, digits and !#$%&'*+-.^_`|~)"
        )
    if not method.isupper() and not method.isdigit():
        raise InvalidMethodError(
            f"method {method!r} for URL '{redact_url(url, secret_params=secret_params)}': "
            "methods are case-sensitive (RFC 9110), and a lock holds uppercase ones only"
        )
    accepts: list[str] = []
    git_protocols: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower in ("accept", "git-protocol") and _CONTROL_RE.search(value):
            raise InvalidHeaderError(
                f"{name} header of {method} '{redact_url(url, secret_params=secret_params)}': "
                "it has a control character, which no header value may hold (RFC 9110)"
            )
        if lower == "accept":
            accepts.append(value)
        elif lower == "git-protocol":
            git_protocols.append(value)
    accept = normalize_accept(",".join(accepts)) if accepts else None
    return RequestKey(
        method=method,
        url=normalize_url(url, secret_params=secret_params),
        accept=accept if accept_selects else ANY_ACCEPT,
        git_protocol=normalize_git_protocol(":".join(git_protocols)) if git_protocols else None,
        body_digest=body_digest,
    )


def normalize_git_protocol(value: str) -> str | None:
    """``Git-Protocol: version=2`` → ``version=2``: colon-separated parameters, spaces removed.

    None for an empty value. git sends it (to smart-HTTP endpoints) to ask for a protocol
    version, and the same URL answers v0 and v2 clients differently.
    """
    parts = [part.strip() for part in value.split(":") if part.strip()]
    return ":".join(parts) or None


def normalize_accept(value: str | None) -> str | None:
    """The ``Accept`` value when it selects a representation; ``None`` for absent or ``*/*``.

    Media types and parameter names are lower-cased and whitespace is canonical; the order
    and the parameter values (q-values included) are kept.
    """
    if value is None:
        return None
    ranges: list[str] = []
    for element in _split_unquoted(value, ","):
        parts = [part.strip(_OWS) for part in _split_unquoted(element, ";")]
        if not any(parts):
            continue
        params = [_normalize_param(part) for part in parts[1:] if part]
        ranges.append(";".join([parts[0].lower(), *params]))
    if all(media.partition(";")[0] in ("*/*", "*") for media in ranges):
        return None
    return ", ".join(ranges)


def _normalize_param(param: str) -> str:
    name, equals, value = param.partition("=")
    return f"{name.strip(_OWS).lower()}{equals}{value.strip(_OWS)}"


def _split_unquoted(text: str, separator: str) -> list[str]:
    if '"' not in text:
        return text.split(separator)
    parts: list[str] = []
    start, quoted, escaped = 0, False, False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts

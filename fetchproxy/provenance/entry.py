"""One fetch as provenance sees it: the request's key and the answer the build got.

:class:`Entry` is deliberately this package's own value, not the lock's: the fetch set, the
attestation and the SBOMs are defined over these fields, whatever shape the lock model takes.
:func:`entry_from_fetch` is the one place that reads a lock entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from fetchproxy.digest import Digest, parse_digest
from fetchproxy.errors import FetchproxyError

if TYPE_CHECKING:
    from fetchproxy.lock.model import Fetch

_METHOD_RE: Final = re.compile(r"[A-Z][A-Z0-9!#$%&'*+.^_`|~-]*")
_HEADER_NAME_RE: Final = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")
MAX_JSON_INTEGER: Final = 2**53 - 1
"""The largest integer every JSON reader holds exactly (RFC 8785 numbers are IEEE doubles)."""


class InvalidEntryError(FetchproxyError, ValueError):
    """A value that cannot be part of an entry; the message names the field."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """A request key (method, URL, ``accept``, ``git-protocol``, body digest) and its answer.

    ``headers`` are the response headers replay sends back besides the body's length (names
    lowercase; ``location`` among them, and ``content-length`` for a bodiless HEAD answer).
    They are kept sorted by name, then value, so two entries with the same answer are equal.
    The constructor raises :class:`InvalidEntryError` naming the field of a value that cannot
    be part of an entry.
    """

    method: str
    url: str
    accept: str | None = None
    git_protocol: str | None = None
    body_digest: Digest | None = None
    status: int
    digest: Digest
    size: int
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not _METHOD_RE.fullmatch(self.method):
            raise InvalidEntryError(f"method: {self.method!r} is not an uppercase HTTP method")
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise InvalidEntryError(f"url: {self.url!r} is not an http:// or https:// URL")
        for name in ("accept", "git_protocol"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidEntryError(f"{name}: {value!r} is not None or a non-empty string")
        if self.body_digest is not None:
            _digest_field("body_digest", self.body_digest)
        _digest_field("digest", self.digest)
        if type(self.status) is not int or not 100 <= self.status <= 599:
            raise InvalidEntryError(f"status: {self.status!r} is not an HTTP status (100-599)")
        if type(self.size) is not int or not 0 <= self.size <= MAX_JSON_INTEGER:
            raise InvalidEntryError(f"size: {self.size!r} is not a size in bytes (0 to 2**53-1)")
        object.__setattr__(self, "headers", _sorted_headers(self.headers))

    @property
    def location(self) -> str | None:
        """The ``location`` header (a redirect's target), if the answer has one."""
        return next((value for name, value in self.headers if name == "location"), None)

    def key_fields(self) -> dict[str, str]:
        """The key as the lock names its fields, absent parts left out."""
        fields = {"method": self.method, "url": self.url}
        if self.accept is not None:
            fields["accept"] = self.accept
        if self.git_protocol is not None:
            fields["git-protocol"] = self.git_protocol
        if self.body_digest is not None:
            fields["body-digest"] = self.body_digest
        return fields


def _digest_field(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidEntryError(f"{name}: {value!r} is not a digest")
    try:
        parse_digest(value)
    except ValueError as exc:
        raise InvalidEntryError(f"{name}: {exc}") from None


def _sorted_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    checked = []
    for pair in headers:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidEntryError(f"headers: {pair!r} is not a (name, value) pair")
        name, value = pair
        if not isinstance(name, str) or not _HEADER_NAME_RE.fullmatch(name):
            raise InvalidEntryError(f"headers: {name!r} is not a lowercase header name")
        if not isinstance(value, str):
            raise InvalidEntryError(f"headers: the value of {name} is not a string")
        checked.append((name, value))
    return tuple(sorted(checked))


def entry_from_fetch(fetch: Fetch) -> Entry:
    """The entry of one lock entry: its key, status, body and the headers replay sends."""
    headers = list(fetch.response_headers())
    if fetch.content_length is not None:
        headers.append(("content-length", str(fetch.content_length)))
    key = fetch.key
    return Entry(
        method=key.method,
        url=key.url,
        accept=key.accept,
        git_protocol=key.git_protocol,
        body_digest=key.body_digest,
        status=fetch.status,
        digest=fetch.digest,
        size=fetch.size,
        headers=tuple(headers),
    )

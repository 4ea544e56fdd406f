"""What recording keeps of an exchange: pure rules, no mitmproxy and no I/O.

The record addon asks these functions which request headers to change before forwarding, whether
an answer may be locked, and which :class:`~fetchproxy.lock.model.Fetch` an answer becomes.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urljoin

from fetchproxy.digest import Digest
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import InvalidURLError
from fetchproxy.lock.model import RESPONSE_HEADERS, Fetch

STRIPPED_REQUEST_HEADERS = frozenset(
    {
        "range",
        "if-range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "accept-encoding",
    }
)
"""Removed before forwarding so the origin answers with the whole, unencoded body."""

UPSTREAM_ACCEPT_ENCODING = "identity"
"""Sent instead: a digest is then the digest of the file a user would download."""


def is_recordable(status: int) -> bool:
    """Final answers below 500 are facts to lock; 5xx and protocol switches are passed through."""
    return 200 <= status <= 499


def fetch_from_answer(
    key: RequestKey,
    *,
    status: int,
    headers: Iterable[tuple[str, str]],
    digest: Digest,
    size: int,
    rules: KeyRules,
) -> Fetch:
    """The lock entry for an origin's answer to the request ``key``.

    ``headers`` are the answer's headers (any case, first occurrence wins); ``digest`` and
    ``size`` describe the body exactly as the origin sent it.
    """
    kept: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        if lower not in kept and (lower in RESPONSE_HEADERS or lower == "content-length"):
            kept[lower] = value
    location = kept.get("location")
    if location is not None:
        location = _absolute_location(key.url, location, rules)
    content_length = None
    if key.method == "HEAD" and size == 0 and kept.get("content-length", "").isdigit():
        content_length = int(kept["content-length"])
    return Fetch(
        key=key,
        status=status,
        location=location,
        digest=digest,
        size=size,
        content_type=kept.get("content-type"),
        content_encoding=kept.get("content-encoding"),
        content_disposition=kept.get("content-disposition"),
        content_length=content_length,
    )


def _absolute_location(base: str, location: str, rules: KeyRules) -> str:
    """A redirect target as an absolute, normalized URL without secrets.

    Replay sends this back, so the client follows it to a URL whose key the lock holds too. A
    target no key can name (another scheme, a malformed host) is kept without its query, its
    user info and its fragment: none of them may reach a lock, normalized or not.
    """
    target = urljoin(base, location.strip())
    try:
        return rules.url(target)
    except InvalidURLError:
        return rules.redact(target.partition("?")[0])

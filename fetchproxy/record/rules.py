"""What recording keeps of an exchange: pure rules, no mitmproxy and no I/O.

The record addon asks these functions which request headers to change before forwarding, whether
an answer may be locked, and which :class:`~fetchproxy.lock.model.Fetch` an answer becomes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urljoin

from fetchproxy.digest import EMPTY, Digest
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules
from fetchproxy.keys.url import InvalidURLError
from fetchproxy.lock.model import MAX_STATUS, MIN_STATUS, NEVER_KEPT, RESPONSE_HEADERS, Fetch

STRIPPED_REQUEST_HEADERS = frozenset(
    {
        "range",
        "if-range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "accept-encoding",
        # hop-by-hop headers meant for the proxy: the client's proxy credentials go nowhere
        "proxy-authorization",
        "proxy-connection",
    }
)
"""Removed before forwarding so the origin answers with the whole, unencoded body."""

_UNCLEAN_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")
UPSTREAM_ACCEPT_ENCODING = "identity"
"""Sent instead: a digest is then the digest of the file a user would download."""


def is_recordable(status: int) -> bool:
    """Final answers below 500 are facts to lock; 5xx and protocol switches are passed through."""
    return MIN_STATUS <= status <= MAX_STATUS


KEPT_HEADERS = frozenset(
    {
        "accept-ranges",  # uv and curl -C read a range-capable server from it
        "link",  # paginated APIs (the OCI registry's tag lists: skopeo list-tags)
        "www-authenticate",  # a 401's challenge: without it no client asks for a token
        "docker-content-digest",  # the digest of a manifest, which OCI clients check
    }
)
"""The response headers a lock keeps beside content-type, content-encoding, content-disposition
and location (fields of their own), by default: what real clients were seen to need
(docs/lock-format.md, "Headers"). ``[record] headers`` in fetchproxy.toml adds more; none of
:data:`~fetchproxy.lock.model.NEVER_KEPT` can be."""


def fetch_from_answer(
    key: RequestKey,
    *,
    status: int,
    headers: Iterable[tuple[str, str]],
    digest: Digest,
    size: int,
    rules: KeyRules,
    keep: frozenset[str] = KEPT_HEADERS,
    redacted: str | None = None,
) -> Fetch:
    """The lock entry for an origin's answer to the request ``key``.

    ``headers`` are the answer's headers, any case (the first of a field's own headers wins;
    the others' repeats are joined with ``, ``, as HTTP allows for lists); ``digest`` and
    ``size`` describe the body exactly as the origin sent it — or, with ``redacted``
    (``"token"``), the token answer stored in its place (:mod:`fetchproxy.record.tokens`),
    decoded, so without the origin's ``content-encoding``. A value that is not clean text
    (:func:`unclean_headers`) is not kept.
    """
    kept: dict[str, str] = {}
    extra: dict[str, list[str]] = {}
    for name, value in headers:
        lower = name.lower()
        if not _clean(value):
            continue
        if lower in keep and lower not in NEVER_KEPT:
            extra.setdefault(lower, []).append(value)
        elif lower not in kept and (lower in RESPONSE_HEADERS or lower == "content-length"):
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
        redacted=redacted,
        content_type=kept.get("content-type"),
        content_encoding=None if redacted else kept.get("content-encoding"),
        content_disposition=kept.get("content-disposition"),
        content_length=content_length,
        headers=tuple(sorted((name, ", ".join(values)) for name, values in extra.items())),
    )


FRAMING_HEADERS = ("content-length", "transfer-encoding")
"""Headers that frame an answer's body: the client gets the origin's."""


def client_headers(
    key: RequestKey,
    *,
    status: int,
    headers: Iterable[tuple[str, str]],
    rules: KeyRules,
    keep: frozenset[str] = KEPT_HEADERS,
) -> list[tuple[str, str]]:
    """The headers the build gets with an answer record will lock: those replay will send
    back (the same ones, in the same order) and the origin's framing. So a client behaves in
    record as it will in replay (it sees no ``Set-Cookie``, ``ETag`` or ``Date`` in either)."""
    given = list(headers)
    answer = fetch_from_answer(
        key, status=status, headers=given, digest=EMPTY, size=0, rules=rules, keep=keep
    )
    framing = [(n.lower(), v) for n, v in given if n.lower() in FRAMING_HEADERS]
    return [*answer.response_headers(), *framing]


def unclean_headers(
    headers: Iterable[tuple[str, str]], keep: frozenset[str] = KEPT_HEADERS
) -> list[str]:
    """The names of the headers :func:`fetch_from_answer` would keep but for their value: one
    with a control character, or with bytes that are not UTF-8 (a str with surrogateescape'd
    bytes, as mitmproxy decodes them). Such an answer is locked without them, and the run
    says so: a lock holds text a reviewer can read and replay sends back unchanged."""
    wanted = keep | set(RESPONSE_HEADERS)
    return sorted({n.lower() for n, v in headers if n.lower() in wanted and not _clean(v)})


def _clean(value: str) -> bool:
    return _UNCLEAN_RE.search(value) is None


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

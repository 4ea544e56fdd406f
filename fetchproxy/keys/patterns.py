"""Patterns that name origins and URLs: :class:`OriginPattern` and :class:`URLPattern`.

One grammar for both, so that a pattern means the same wherever it is written:

- ``files.example.org``: that host, any port.
- ``files.example.org:8443``: only that port (a URL without one has its scheme's default
  port: ``:443`` matches ``https://files.example.org/``).
- ``*.example.org``: any subdomain (not ``example.org`` itself); with names only, never with
  an address (``*.10.0.0.1`` would read as a subdomain of an address).
- ``[::1]:8443``: an IPv6 address, in brackets.

An origin pattern (``--allow-origin``, ``[record] allow``) is just that; a URL pattern
(``[fetchproxy] accept-selects-nothing``) may add a path, ``files.example.org/index/``: only
paths at or below ``/index`` (``/index``, ``/index/…``, never ``/indexes``). Neither takes a
scheme, a user, a query or a fragment: each is refused with what a pattern looks like, never
read as something else (``https://files.example.org`` is not the host ``https``).

A pattern is matched against *normalized* hosts and URLs, so it is normalized the same way
when it is read: the host lower-cased and IDNA-encoded, the path's percent-encoding made
canonical. The scheme is not part of a pattern (what a server may be reached for, or what it
answers, holds for http and https alike).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import (
    DEFAULT_PORTS,
    InvalidURLError,
    is_address,
    normalize_url,
    origin_of,
    split_netloc,
)

_NOT_IN_A_PATTERN = ("://", "?", "#", "@")
_ORIGIN_EXAMPLE = "e.g. files.example.org or *.example.net:8443"
_ORIGIN_FORM = f"give host, host:port or *.domain[:port], {_ORIGIN_EXAMPLE}"
_URL_EXAMPLE = "e.g. crates.example.org or *.example.net/index/"
_URL_FORM = f"give host[:port][/path], {_URL_EXAMPLE}"


class OriginPatternError(FetchproxyError, ValueError):
    """An origin pattern that is not ``host``, ``host:port`` or ``*.domain[:port]``."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"origin pattern {shown_pattern(text)!r}: {reason}")
        self.reason = reason


class URLPatternError(FetchproxyError, ValueError):
    """A pattern that is not ``host[:port][/path]`` or ``*.domain[:port][/path]``."""


@dataclass(frozen=True, slots=True)
class OriginPattern:
    """An exact host, or any subdomain of ``host`` (``wildcard``); any port when ``port`` is
    None."""

    host: str
    port: int | None
    wildcard: bool
    text: str

    @classmethod
    def parse(cls, text: str) -> OriginPattern:
        """The pattern ``text`` stands for; :class:`OriginPatternError` saying what is wrong."""
        if text.endswith("/") and text.count("/") == 1:
            text = text[:-1]  # files.example.org/ names the host alone, as a URL would
        if any(part in text for part in (*_NOT_IN_A_PATTERN, "/")):
            raise OriginPatternError(
                text,
                "give host, host:port or *.domain[:port] without a scheme, user, path or "
                f"query, {_ORIGIN_EXAMPLE}",
            )
        try:
            return _origin(text, text, _ORIGIN_FORM)
        except _BadPattern as exc:
            raise OriginPatternError(text, str(exc)) from None

    def matches(self, host: str, port: int) -> bool:
        """Whether the normalized ``host`` (lowercase, IDNA, ``[v6]``) and ``port`` are named."""
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


@dataclass(frozen=True, slots=True)
class URLPattern:
    """An origin pattern and a path prefix (``/``: every path)."""

    origin: OriginPattern
    path: str
    text: str

    @classmethod
    def parse(cls, text: str) -> URLPattern:
        """The pattern ``text`` stands for; :class:`URLPatternError` saying what is wrong."""
        if any(part in text for part in _NOT_IN_A_PATTERN):
            raise URLPatternError(
                f"URL pattern {shown_pattern(text)!r}: give host[:port][/path] without a "
                f"scheme, query, fragment or user, {_URL_EXAMPLE}"
            )
        authority, slash, path = text.partition("/")
        try:
            origin = _origin(authority, text, _URL_FORM)
            normal = normalize_url(f"http://x/{path if slash else ''}", secret_params=())
        except _BadPattern as exc:
            raise URLPatternError(f"URL pattern {shown_pattern(text)!r}: {exc}") from None
        except InvalidURLError as exc:
            raise URLPatternError(
                f"URL pattern {shown_pattern(text)!r}: {exc.reason} — {_URL_FORM}"
            ) from None
        return cls(origin=origin, path="/" + normal.split("/", 3)[3], text=text)

    def matches(self, url: str) -> bool:
        """Whether the normalized ``url`` is one this pattern names."""
        if not self.origin.matches(*origin_of(url)):
            return False
        path = "/" + url.partition("://")[2].partition("/")[2].partition("?")[0]
        prefix = self.path.rstrip("/")
        return not prefix or path == prefix or path.startswith(prefix + "/")


def shown_pattern(text: str) -> str:
    """``text`` fit for a message: a user and password (``***@``) and a query (``?…``) are
    not repeated — a pattern refused for holding them may hold a credential."""
    shown, question, _ = text.partition("?")
    start = shown.find("://")
    start = start + 3 if start >= 0 else 0
    end = shown.find("/", start)
    at = shown.rfind("@", start, len(shown) if end < 0 else end)
    if at >= 0:
        shown = shown[:start] + "***" + shown[at:]
    return shown + ("?…" if question else "")


class _BadPattern(Exception):  # noqa: N818 -- internal, carries the reason to the parsers
    pass


def _origin(authority: str, text: str, form: str) -> OriginPattern:
    """The origin part of a pattern (``text``), the grammar both kinds share; ``form`` says
    what a good one looks like."""
    wildcard = authority.startswith("*.")
    rest = authority[2:] if wildcard else authority
    if rest.endswith(":"):  # URLs read an empty port as the default one; a pattern names it
        raise _BadPattern(f"an empty port — {form}")
    try:
        netloc = normalize_url(f"http://{rest}/", secret_params=()).split("/")[2]
    except InvalidURLError as exc:
        raise _BadPattern(f"{exc.reason} — {form}") from None
    host, port = split_netloc(netloc)
    if port is None and ":" in rest.rpartition("]")[2]:
        port = DEFAULT_PORTS["http"]  # spelled in the pattern, dropped by normalization
    if wildcard and is_address(host):
        raise _BadPattern("*. goes with names, not addresses")
    return OriginPattern(host=host, port=port, wildcard=wildcard, text=text)

"""URL patterns for key rules: ``host``, ``host:port``, ``*.domain``, each with an optional path.

A project's ``fetchproxy.toml`` names with them where a rule applies (``[fetchproxy]
accept-selects-nothing``). A pattern is matched against a key's *normalized* URL, so it is
normalized the same way when it is read: the host lower-cased and IDNA-encoded, the path's
percent-encoding made canonical. The scheme is not part of a pattern (a rule about what a server
answers holds for http and https alike).

- ``crates.example.org``: every URL on that host, any port.
- ``crates.example.org:8443``: only that port (a URL without one has its scheme's default
  port: ``:443`` matches ``https://crates.example.org/``).
- ``*.example.org``: any subdomain (not ``example.org`` itself).
- ``crates.example.org/index/``: only paths at or below ``/index`` (``/index``, ``/index/…``,
  never ``/indexes``).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import InvalidURLError, normalize_url


class URLPatternError(FetchproxyError, ValueError):
    """A pattern that is not ``host[:port][/path]`` or ``*.domain[:port][/path]``."""


_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class URLPattern:
    """One pattern: a host (any subdomain of it with ``wildcard``), a port (None: any) and a
    path prefix (``/``: every path)."""

    host: str
    port: int | None
    wildcard: bool
    path: str
    text: str

    @classmethod
    def parse(cls, text: str) -> URLPattern:
        """The pattern ``text`` stands for; :class:`URLPatternError` saying what is wrong."""
        if "://" in text or "?" in text or "#" in text or "@" in text:
            raise URLPatternError(
                f"URL pattern {text!r}: give host[:port][/path] without a scheme, query, "
                "fragment or user, e.g. crates.example.org or *.example.net/index/"
            )
        wildcard = text.startswith("*.")
        rest = text[2:] if wildcard else text
        authority, slash, path = rest.partition("/")
        explicit_port = ":" in authority.rpartition("]")[2]
        try:
            normal = normalize_url(f"http://{authority}/{path if slash else ''}", secret_params=())
        except InvalidURLError as exc:
            raise URLPatternError(
                f"URL pattern {text!r}: {exc.reason} — give host[:port][/path], e.g. "
                "crates.example.org or *.example.net/index/"
            ) from None
        netloc, _, normal_path = normal.removeprefix("http://").partition("/")
        host, port = netloc, None
        if not host.endswith("]") and ":" in host:
            host, _, number = host.rpartition(":")
            port = int(number)
        elif explicit_port:
            port = 80  # the default port, dropped by normalization
        if wildcard and host.startswith("["):
            raise URLPatternError(f"URL pattern {text!r}: *. goes with names, not addresses")
        return cls(host=host, port=port, wildcard=wildcard, path="/" + normal_path, text=text)

    def matches(self, url: str) -> bool:
        """Whether the normalized ``url`` is one this pattern names."""
        scheme, _, rest = url.partition("://")
        netloc, slash, path = rest.partition("/")
        path = (slash + path).partition("?")[0] or "/"
        host, port = netloc, _DEFAULT_PORTS.get(scheme)
        if not netloc.endswith("]") and ":" in netloc:
            host, _, number = netloc.rpartition(":")
            port = int(number)
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            if not host.endswith("." + self.host):
                return False
        elif host != self.host:
            return False
        prefix = self.path.rstrip("/")
        return not prefix or path == prefix or path.startswith(prefix + "/")

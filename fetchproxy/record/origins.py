"""Which origins record may reach for a build: :class:`OriginPolicy`, pure.

A sandboxed build reaches nothing but the proxy, and record forwards for it: without a rule,
the proxy would be the build's way to the host's own services (its loopback, the cloud metadata
address, anything listening on the host's addresses). So by default record refuses an origin
whose address — the one actually connected to, after the name was resolved — is *host-local*:
loopback, link-local (169.254.169.254 included), unspecified, or one of the host's own
addresses. Patterns (``--allow-origin``, ``[record] allow``) change that:

- ``host``, ``host:port``, ``*.domain`` (any subdomain, not the domain itself) or
  ``*.domain:port``; ``[v6]:port`` for IPv6; no port means any port.
- When any pattern is given, record reaches only origins a pattern matches ("observe, then
  enforce": a record without patterns lists the origins it reached, and the ``fetchproxy config
  add record.allow`` command that allows just them).
- A host-local address is reached only through a pattern that names its host exactly (no
  ``*.``): ``--allow-origin 127.0.0.2:18443`` for a test origin on the host's loopback.

``serve record`` has no sandbox (its clients reach the host anyway), so there only the patterns
apply; ``record -- BUILD`` applies both (docs/sandbox.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from fetchproxy.keys.patterns import OriginPattern

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def host_local(address: IPAddress, own: Collection[IPAddress]) -> bool:
    """Whether ``address`` is the host's: loopback, link-local, unspecified, or one of ``own``."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_link_local or address.is_unspecified or address in own


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """The patterns, and whether host-local addresses are refused unless a pattern names them."""

    patterns: tuple[OriginPattern, ...] = ()
    guard_host: bool = True

    @classmethod
    def of(cls, patterns: Iterable[str], *, guard_host: bool) -> OriginPolicy:
        return cls(tuple(OriginPattern.parse(p) for p in patterns), guard_host)

    def name_problem(self, host: str, port: int) -> str | None:
        """Why ``host:port`` may not be reached whatever it resolves to (no allowed origin
        matches it); None when its addresses decide. Asked before the name is looked up, so a
        build cannot have record resolve names it may not reach."""
        if self.patterns and not any(p.matches(host, port) for p in self.patterns):
            return _not_allowed(host, port)
        return None

    def check(
        self, host: str, port: int, addresses: Iterable[IPAddress], own: Collection[IPAddress]
    ) -> str | None:
        """Why ``host:port`` (a normalized host: lowercase, IDNA, ``[v6]``) resolving to
        ``addresses`` may not be reached; None when it may."""
        shown = f"{host}:{port}"
        matching = [p for p in self.patterns if p.matches(host, port)]
        if self.patterns and not matching:
            return _not_allowed(host, port)
        if not self.guard_host:
            return None
        local = sorted({str(a) for a in addresses if host_local(a, own)})
        if local and not any(not p.wildcard for p in matching):
            return (
                f"{shown} is the host's own address ({', '.join(local)}): a sandboxed build "
                f"reaches no host service through record unless --allow-origin or [record] "
                f"allow names it (fetchproxy config add record.allow {shown})"
            )
        return None


def _not_allowed(host: str, port: int) -> str:
    return (
        f"{host}:{port} is not among the allowed origins (--allow-origin, [record] allow); "
        f"to record from it: fetchproxy config add record.allow {host}:{port}"
    )


def shown_origin(url: str) -> str:
    """The origin of ``url`` as a pattern spells it: ``host``, or ``host:port`` off the
    scheme's default port."""
    return url.partition("://")[2].split("/", 1)[0]

"""Which server an intercepted connection is for: the ``CONNECT`` its client did not send.

With ``--intercept transparent`` the sandbox's TCP is redirected to the proxy, and the client
never names a server to it: it connected to an address. That address is either one the DNS
stub handed out for a name (from :data:`SYNTHETIC_NETWORK`, 198.18.0.0/15, unique per name
for the run) or a literal address the client dialled itself. :func:`intercepted_authority`
turns it back into what an explicit client would have sent as ``CONNECT host:port``: the name
the synthetic address was handed out for, else the literal address; the port is always the
one the client connected to.

The engines give that authority to :class:`~fetchproxy.keys.rules.KeyRules` with
``RawRequest.intercepted`` set, and the key rules decide as for a ``CONNECT`` tunnel, with two
more refusals: the request must name its server itself (a TLS server name or a ``Host``
header), and an authority that is still a synthetic address (one the stub never handed out,
from another run or a guess) names no server at all. A server name or ``Host`` that disagrees
with the name the address was handed out for is refused, as a ``CONNECT`` to one server with
a ``Host`` naming another is. So a flow is keyed by what the client said (SNI or ``Host``),
checked against what it resolved, and never by a synthetic address.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

SYNTHETIC_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
"""Where the DNS stub's addresses come from: RFC 2544's benchmarking range, never routed on
the internet, so no real server a build could mean lives there."""


class NameBook(Protocol):
    """The names the DNS stub handed synthetic addresses out for (read side)."""

    def name_of(self, address: str) -> str | None:
        """The name ``address`` was handed out for; None when it was not."""


def is_synthetic(host: str) -> bool:
    """Whether ``host`` (an address, or anything else) is in :data:`SYNTHETIC_NETWORK`."""
    try:
        return ipaddress.ip_address(host.strip("[]")) in SYNTHETIC_NETWORK
    except ValueError:
        return False


def intercepted_authority(address: str, port: int, names: NameBook) -> str:
    """``host:port`` for a connection to ``address:port`` (its original destination): the
    name the stub handed ``address`` out for, else the address itself (an IPv6 one in
    brackets). A synthetic address the stub never handed out stays as it is, for the key
    rules to refuse."""
    name = names.name_of(address) if is_synthetic(address) else None
    if name is not None:
        return f"{name}:{port}"
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def split_authority(authority: str) -> tuple[str, int]:
    """``host:port`` (as :func:`intercepted_authority` spells it) → ``(host, port)``."""
    host, _, port = authority.rpartition(":")
    return host.strip("[]"), int(port)

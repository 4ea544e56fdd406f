"""What a proxy run is asked to do, whichever engine runs it (no mitmproxy imports here).

Also what both engines apply alike: the client gate (:func:`admitted`) and the error of a
listener that cannot bind (:func:`cannot_listen`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS
from fetchproxy.store import Store

Mode = Literal["record", "replay"]
Address = tuple[str, int]
"""A host and port a proxy listens on."""
Engine = Literal["auto", "direct", "mitmproxy"]


class ProxyStartError(FetchproxyError, OSError):
    """The proxy could not start: the port is taken, an option is wrong, a file is bad."""


@dataclass(frozen=True, kw_only=True)
class ProxySettings:
    mode: Mode
    lock: Path
    store: Store
    confdir: Path
    """Holds the CA (``mitmproxy-ca.pem``) and the upstream trust bundle."""
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    log: Path | None = None
    upstream_ca: Sequence[Path] = ()
    http2: bool = False
    """HTTP/2 to clients and origins. Off by default: measured in bench/proxy_bench.py, mitmproxy
    receives a large body over HTTP/2 at 28-44 % of its HTTP/1.1 rate and sends one at 76-83 %,
    while small requests gain nothing consistent (docs/benchmarks.md)."""
    secret_params: frozenset[str] = DEFAULT_SECRET_PARAMS
    """Query parameters removed from every key (the built-in list plus fetchproxy.toml's)."""
    keep: bool = False
    """record: keep the existing lock, record only what it lacks (``--keep``)."""
    exact: bool = False
    """replay: unused lock entries make the run fail too (``--exact``)."""
    only_client_ports: set[int] | None = None
    """When set, the proxy serves only clients from 127.0.0.1 with these source ports (the user
    sandbox's relay registers its own) and refuses every other local process."""
    engine: Engine = "auto"
    """replay: ``direct`` is fetchproxy's own HTTP/1.1 server (fetchproxy/replayserver.py),
    ``mitmproxy`` the replay addon; ``auto`` picks direct unless ``http2`` asks for HTTP/2."""
    extra_options: Mapping[str, Any] = field(default_factory=dict)
    """mitmproxy options (the mitmproxy engine only)."""

    @property
    def direct(self) -> bool:
        """Whether the direct replay server runs this (else mitmproxy)."""
        if self.mode != "replay":
            return False
        return self.engine == "direct" or (self.engine == "auto" and not self.http2)


def admitted(peer: object, only_client_ports: set[int] | None) -> bool:
    """The client gate of the user sandbox: whether the client at ``peer`` (its peer name) may
    be served. Without ``only_client_ports`` everyone may; with it, only 127.0.0.1 from one of
    those source ports (the relay's)."""
    if only_client_ports is None:
        return True
    return isinstance(peer, tuple) and peer[0] == "127.0.0.1" and peer[1] in only_client_ports


def cannot_listen(settings: ProxySettings, reason: str, *, in_use: bool) -> ProxyStartError:
    """The error of a proxy that could not bind its listener; ``in_use``: the port is taken."""
    hint = " — another program listens there; choose another port (0 picks a free one)"
    return ProxyStartError(
        f"cannot listen on {settings.listen_host}:{settings.listen_port}: {reason}"
        f"{hint if in_use else ''}"
    )

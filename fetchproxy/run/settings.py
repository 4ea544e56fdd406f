"""What a proxy run is asked to do, whichever engine runs it: :class:`ProxySettings`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fetchproxy.keys.rules import KeyRules
from fetchproxy.record.origins import OriginPolicy
from fetchproxy.record.rules import KEPT_HEADERS
from fetchproxy.store import Store
from fetchproxy.store.remote_url import RemoteURL

if TYPE_CHECKING:
    from fetchproxy.run.attest import Attester

Mode = Literal["record", "replay"]
EngineChoice = Literal["auto", "direct", "mitmproxy"]
Isolation = Literal["root", "user", "none"]
"""The sandbox a run's build is in (``none``: no sandbox, or ``serve``'s clients)."""


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
    rules: KeyRules = field(default_factory=KeyRules)
    """How requests become keys (the built-in rules plus fetchproxy.toml's)."""
    origins: OriginPolicy = field(default_factory=lambda: OriginPolicy(guard_host=False))
    """record: which origins it may reach (``--allow-origin``, ``[record] allow``; a sandboxed
    build's record refuses the host's own addresses too)."""
    keep_headers: frozenset[str] = KEPT_HEADERS
    """record: the response headers kept beside the lock's own header fields (the built-in
    ones plus ``[record] headers``)."""
    keep: bool = False
    """record: keep the existing lock, record only what it lacks (``--keep``)."""
    exact: bool = False
    """replay: unused lock entries make the run fail too (``--exact``)."""
    remote: RemoteURL | None = None
    """The remote store (``--remote``): record uploads every blob before it writes the lock;
    replay pulls the blobs the local store lacks before it listens."""
    only_client_ports: set[int] | None = None
    """When set, the proxy serves only clients from 127.0.0.1 with these source ports (the user
    sandbox's relay registers its own) and refuses every other local process."""
    engine: EngineChoice = "auto"
    """replay: ``direct`` is fetchproxy's own HTTP/1.1 server (fetchproxy/replay/server.py),
    ``mitmproxy`` the replay addon; ``auto`` picks direct unless ``http2`` asks for HTTP/2."""
    extra_options: Mapping[str, Any] = field(default_factory=dict)
    """mitmproxy options (the mitmproxy engine only)."""
    sandbox: Isolation = "none"
    """replay: the sandbox the clients are in, for the record of what was served."""
    attest: Attester | None = None
    """replay: writes the attestation of what was served when the build succeeded."""

    @property
    def direct(self) -> bool:
        """Whether the direct replay server runs this (else mitmproxy)."""
        if self.mode != "replay":
            return False
        return self.engine == "direct" or (self.engine == "auto" and not self.http2)

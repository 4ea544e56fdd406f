"""A mitmproxy addon script that fixes the protocol offered to the origin, whatever the client's.

    mitmdump -s bench/proxybench/upstream_alpn.py --set upstream_alpn=http/1.1 ...

mitmproxy offers the origin the ALPN protocols the client offered it, so a client speaking
HTTP/2 to the proxy makes the proxy speak HTTP/2 to the origin as well. With this addon the two
legs can be measured apart (table 2b of ``bench/proxy_bench.py``).
"""

from __future__ import annotations

from mitmproxy import addonmanager, ctx
from mitmproxy.proxy import server_hooks


class UpstreamALPN:
    def load(self, loader: addonmanager.Loader) -> None:
        loader.add_option(
            "upstream_alpn", str, "", "Comma-separated ALPN protocols to offer origins."
        )

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        wanted: str = ctx.options.upstream_alpn
        if wanted:
            data.server.alpn_offers = tuple(p.encode() for p in wanted.split(","))


addons = [UpstreamALPN()]

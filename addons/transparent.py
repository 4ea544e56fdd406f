"""The mitmproxy side of ``--intercept transparent``: connections the edge redirected.

mitmproxy's transparent mode reads ``SO_ORIGINAL_DST`` itself and takes the original
destination for the server (``client.sockname`` and ``server.address``): for a name the DNS
stub answered, a synthetic 198.18.x.y. :class:`Intercepted` turns that back into the name
before anything uses it, and fails closed:

- ``next_layer`` (the first thing mitmproxy asks, before TLS or HTTP is known): a synthetic
  destination the stub handed out becomes its name, so the certificate is made for the name,
  the upstream TLS server name is the name, and record dials the name;
- ``requestheaders``: the request's authority for the key rules (``flows.INTERCEPTED``), as
  :func:`~fetchproxy.keys.intercepted.intercepted_authority` makes it; the key rules then
  want a TLS server name or ``Host`` and check it against that name;
- ``server_connect``: no connection to a synthetic address, ever.

Added before mitmproxy's own addons (its NextLayer runs ``next_layer`` too), and before the
record or replay addon, whose ``request`` reads what ``requestheaders`` left.
"""

from __future__ import annotations

import logging

from mitmproxy import http
from mitmproxy.proxy import layer, mode_specs, server_hooks

from fetchproxy.addons import flows
from fetchproxy.keys.intercepted import NameBook, intercepted_authority, is_synthetic

logger = logging.getLogger("fetchproxy.transparent")


def _intercepted(mode: object) -> bool:
    return isinstance(mode, mode_specs.TransparentMode)


class Intercepted:
    def __init__(self, names: NameBook) -> None:
        self.names = names

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        context = nextlayer.context
        if not _intercepted(context.client.proxy_mode) or context.server.address is None:
            return
        host, port = str(context.server.address[0]), int(context.server.address[1])
        name = self.names.name_of(host) if is_synthetic(host) else None
        if name is not None:
            context.server.address = (name, port)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        client = flow.client_conn
        if _intercepted(client.proxy_mode) and client.sockname:
            address, port = str(client.sockname[0]), int(client.sockname[1])
            flow.metadata[flows.INTERCEPTED] = intercepted_authority(address, port, self.names)

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        address = data.server.address
        if address is not None and is_synthetic(str(address[0])):
            data.server.error = "fetchproxy: a synthetic address stands for no server"
            logger.warning(
                "transparent: refused a connection to %s:%s, an address the sandbox's DNS stub "
                "did not hand out",
                address[0],
                address[1],
            )

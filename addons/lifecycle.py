"""The lifecycle addon: tells fetchproxy when mitmproxy's listeners are bound.

mitmproxy fires ``running`` once its servers are up. The runner uses it to leave the sandbox's
edge network namespace (the listening socket keeps the namespace it was created in; everything
after, including upstream connections, is made in the host namespace) and to announce the
address. Keep this addon first so that it runs before any other addon's ``running``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mitmproxy import connection, ctx

from fetchproxy.engine import Address, admitted


class Lifecycle:
    def __init__(
        self,
        on_running: Callable[[], None] | None = None,
        *,
        only_client_ports: set[int] | None = None,
    ) -> None:
        self._on_running = on_running
        self._only_client_ports = only_client_ports
        self.listening: asyncio.Future[list[Address]] | None = None
        self.turned_away = 0

    def client_connected(self, client: connection.Client) -> None:
        """With a client gate (the user sandbox's relay), refuse every other local process."""
        if not admitted(client.peername[:2], self._only_client_ports):
            self.turned_away += 1
            client.error = "fetchproxy: this proxy serves only its sandboxed build"

    def running(self) -> None:
        if self._on_running is not None:
            self._on_running()
        proxyserver = ctx.master.addons.get("proxyserver")
        addresses = [(str(a[0]), int(a[1])) for a in proxyserver.listen_addrs()]
        if self.listening is not None and not self.listening.done():
            self.listening.set_result(addresses)

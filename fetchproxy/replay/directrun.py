"""A replay run on the direct server: the same life cycle as the mitmproxy run, none of its cost.

:class:`DirectReplayRun` loads and checks the lock before it listens (a bad lock or a missing
body fails ``start()`` with nothing listening), serves with
:class:`~fetchproxy.replayserver.ReplayServer`, and on ``stop()`` closes the listener, drops its
connections and closes the event log. It starts without importing mitmproxy (half a second);
only a compressed request body later brings in mitmproxy's decoder, to key it as the recorder
did.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

from fetchproxy.ca import load_ca
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.book import ReplayBook
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.server import ReplayServer
from fetchproxy.run.settings import Address, ProxySettings, cannot_listen


class DirectReplayRun:
    """One running direct replay server. Use ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        settings: ProxySettings,
        *,
        on_running: Callable[[], None] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: serve on this listening socket instead of the settings' address."""
        self.settings = settings
        self._on_running = on_running
        self._sock = sock
        self.book: ReplayBook | None = None
        self.server: ReplayServer | None = None
        self.addresses: list[Address] = []

    @property
    def record(self) -> None:
        """Never a recording (the mitmproxy run records)."""
        return None

    @property
    def turned_away(self) -> int:
        """Clients the client gate refused (``only_client_ports``)."""
        return 0 if self.server is None else self.server.turned_away

    async def start(self) -> list[Address]:
        s = self.settings
        self.book = ReplayBook.open(s.lock, s.store, s.log)
        try:
            ca = load_ca(s.confdir)
            self.server = ReplayServer(
                self.book,
                VerifiedBlobs(s.store),
                HostContexts(ca),
                secret_params=s.secret_params,
                only_client_ports=s.only_client_ports,
            )
            try:
                self.addresses = await self.server.start(s.listen_host, s.listen_port, self._sock)
            except OSError as exc:
                raise cannot_listen(
                    s, str(exc.strerror or exc), in_use=exc.errno == errno.EADDRINUSE
                ) from None
        except BaseException:
            self._cleanup()
            raise
        if self._on_running is not None:
            self._on_running()
        return self.addresses

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        self._cleanup()

    def _cleanup(self) -> None:
        if self.book is not None:
            self.book.close()

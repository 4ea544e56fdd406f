"""Which engine runs a proxy, and the books it keeps: :func:`open_run`, decided in one place.

Replay over HTTP/1.1 (the default) runs on fetchproxy's own server
(:class:`~fetchproxy.replay.server.ReplayServer`); recording, and replay with ``--http2``, on
mitmproxy with fetchproxy's addons (``addons/embed.py``), imported only when it is needed (it
takes half a second). Either way the books are opened first, so a bad lock, a missing blob or
an unwritable file stops the run before anything listens, and the engine only moves bytes.
With a remote store, replay's books pull the blobs the local store lacks first, and record's
upload the lock's blobs before they write it (``fetchproxy.sync.steps``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fetchproxy.ca import load_ca
from fetchproxy.engine import Address, Engine
from fetchproxy.record.book import RecordBook
from fetchproxy.record.origins import IPAddress
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.replay.book import ReplayBook
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.replayer import Replayer
from fetchproxy.replay.server import ReplayServer
from fetchproxy.run.settings import ProxySettings
from fetchproxy.sandbox.rtnetlink import Rtnetlink
from fetchproxy.sync.steps import RemoteUpload, replay_fill

if TYPE_CHECKING:
    from fetchproxy.addons.record import Record
    from fetchproxy.addons.replay import Replay


@dataclass
class ProxyRun:
    """One run of the proxy: its settings, its engine, and the books it keeps (one of two)."""

    settings: ProxySettings
    engine: Engine
    record: RecordBook | None = None
    replayer: Replayer | None = None

    @property
    def book(self) -> ReplayBook | None:
        """Replay: what the run served, refused and left unused."""
        return None if self.replayer is None else self.replayer.book

    async def start(self) -> list[Address]:
        """Start the engine; a failed start closes the books (the lock stays as it was)."""
        try:
            return await self.engine.start()
        except BaseException:
            if self.record is not None:
                self.record.close()
            if self.replayer is not None:
                self.replayer.book.close()
            raise

    async def stop(self) -> None:
        await self.engine.stop()


def open_run(
    settings: ProxySettings,
    *,
    on_running: Callable[[], None] | None = None,
    sock: socket.socket | None = None,
) -> ProxyRun:
    """The books and the (not yet started) engine for ``settings``.

    ``on_running`` is called once the engine's listener is bound; ``sock``: a listening socket
    to serve on instead of the settings' address (the direct replay server only).
    """
    s = settings
    listen = (s.listen_host, s.listen_port)
    if s.mode == "replay":
        fill = None if s.remote is None else replay_fill(s.remote, s.store, s.lock)
        book = ReplayBook.open(s.lock, s.store, s.log, sandbox=s.sandbox, fill=fill)
        replayer = Replayer(book, VerifiedBlobs(s.store), s.rules)
        if s.direct:
            try:
                contexts = HostContexts(load_ca(s.confdir))
            except BaseException:
                replayer.book.close()
                raise
            engine: Engine = ReplayServer(
                replayer,
                contexts,
                listen=listen,
                sock=sock,
                only_client_ports=s.only_client_ports,
                on_running=on_running,
            )
            return ProxyRun(s, engine, replayer=replayer)
        from fetchproxy.addons.replay import Replay  # noqa: PLC0415 -- loads mitmproxy

        try:
            engine = _mitmproxy(s, Replay(replayer), on_running)
        except BaseException:
            replayer.book.close()
            raise
        return ProxyRun(s, engine, replayer=replayer)
    from fetchproxy.addons.record import Record  # noqa: PLC0415 -- loads mitmproxy

    own = host_addresses() if s.origins.guard_host else ()
    upload = None if s.remote is None else RemoteUpload(s.remote, s.store)
    record = RecordBook.open(s.lock, s.store, s.log, keep=s.keep, upload=upload)
    try:  # an engine that cannot be made (a bad --upstream-ca) leaves no journal open
        addon = Record(
            record,
            store=s.store,
            rules=s.rules,
            origins=s.origins,
            own_addresses=own,
            keep_headers=s.keep_headers,
        )
        return ProxyRun(s, _mitmproxy(s, addon, on_running), record=record)
    except BaseException:
        record.close()
        raise


def host_addresses() -> list[IPAddress]:
    """The addresses of this (the host's) network namespace, which a build must not reach."""
    with Rtnetlink() as netlink:
        return netlink.addresses()


def _mitmproxy(
    settings: ProxySettings, addon: Record | Replay, on_running: Callable[[], None] | None
) -> Engine:
    from fetchproxy.addons.embed import MitmproxyEngine  # noqa: PLC0415 -- loads mitmproxy

    return MitmproxyEngine(
        addon,
        confdir=settings.confdir,
        listen=(settings.listen_host, settings.listen_port),
        upstream_ca=settings.upstream_ca,
        http2=settings.http2,
        only_client_ports=settings.only_client_ports,
        on_running=on_running,
        extra_options=settings.extra_options,
    )

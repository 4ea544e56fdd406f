"""A TCP relay: accept on a listening socket we were handed, pipe each connection to an address.

The unprivileged sandbox (:class:`~fetchproxy.sandbox.UserSandbox`) hands out a socket listening
on the build's own loopback; mitmproxy cannot serve on a socket it is given, so
:class:`Relay` accepts there and copies each connection, byte for byte in both directions, to
the proxy's ordinary listener on the host's loopback.

Flow control is the transports' own: when one side's write buffer passes :data:`WRITE_LIMIT`,
reading from the other side pauses until it drains, so a connection holds at most about
``2 * (WRITE_LIMIT + 256 KiB)`` (one read) however fast one side sends and however slowly the
other reads. A half-close (EOF) is passed on as a half-close; when both directions are done,
both sockets close. A reset or error on one side resets the other.

A client's bytes wait until its connection to the target is made: its reading is paused from
the start. asyncio before Python 3.11.4 (Debian 12's 3.11.2 among them) ignores a pause made in
``connection_made`` (CPython gh-103607) and reads anyway, so what such a transport reads before
the target is connected is kept and written first (at most a read or two: the pause is made
again at once, and now holds), and an early EOF is passed on after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import cast

WRITE_LIMIT = 256 * 1024
"""Bytes buffered for one direction of one connection before reading from its source pauses."""
_STOP_TURNS = 100


_LINGER_NONE = struct.pack("ii", 1, 0)


def _reset(transport: asyncio.Transport) -> None:
    """Close with a TCP reset (not a FIN), so the other end sees the failure as one."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NONE)
    transport.abort()


class _Side(asyncio.Protocol):
    """One socket of a relayed connection; what it receives is written to its peer."""

    def __init__(self, pair: _Pair) -> None:
        self.pair = pair
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False
        self.lost = False
        self.early: list[bytes] = []
        """What was read before the peer's connection was made, to be written to it first."""
        self._paused: set[str] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self.transport.set_write_buffer_limits(high=WRITE_LIMIT)
        if self._paused:
            self.transport.pause_reading()
        self.pair.made(self)

    def _writable_peer(self) -> asyncio.Transport | None:
        if self.peer is None or self.peer.transport is None or self.peer.transport.is_closing():
            return None
        return self.peer.transport

    def _peer_pending(self) -> bool:
        """The peer's connection is still being made."""
        return self.peer is not None and self.peer.transport is None and not self.peer.lost

    def data_received(self, data: bytes) -> None:
        peer = self._writable_peer()
        if peer is not None:
            peer.write(data)
        elif self._peer_pending():  # read while paused: the asyncio of gh-103607
            self.early.append(data)
            self._pause_again()

    def _pause_again(self) -> None:
        """Make the pause hold: the transport thinks it is paused, but its reader is registered
        (its pause came before the reader was), so resume and pause it once more."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        if self._peer_pending():  # passed on once the peer is connected, after self.early
            return True
        peer = self._writable_peer()
        if peer is None:
            return False  # close this side
        assert self.peer is not None
        if self.peer.eof:  # both directions are done
            self.pair.close()
        elif peer.can_write_eof():
            peer.write_eof()
        return True  # keep this side open: the other direction may still flow

    def pause_writing(self) -> None:
        """Our write buffer is over the limit: stop reading what fills it."""
        if self.peer is not None:
            self.peer.pause_reading("backpressure")

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading("backpressure")

    def pause_reading(self, reason: str) -> None:
        if self.transport is not None and not self._paused and not self.transport.is_closing():
            self.transport.pause_reading()
        self._paused.add(reason)

    def resume_reading(self, reason: str) -> None:
        was_paused = bool(self._paused)
        self._paused.discard(reason)
        if self.transport is None or self._paused or not was_paused:
            return
        if not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        peer = self._writable_peer()
        if peer is not None:
            if exc is None:
                peer.close()  # once what is buffered for it has been written
            else:
                _reset(peer)
        self.pair.forget()


class _Pair:
    """A client accepted on the listener, and its connection to the target."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.client = _Side(self)
        self.upstream = _Side(self)
        self.client.peer = self.upstream
        self.upstream.peer = self.client
        self.client.pause_reading("connecting")  # hold its data until the target is connected
        self.connecting: asyncio.Task[None] | None = None
        self.source: int | None = None

    def _release(self, source: int | None) -> None:
        if source is not None:
            self.relay.source_ports.discard(source)

    def made(self, side: _Side) -> None:
        if side is self.client:
            self.relay.pairs.add(self)
            self.connecting = asyncio.get_running_loop().create_task(self._connect())
            return
        assert side.transport is not None
        early, self.client.early = self.client.early, []
        for chunk in early:
            side.transport.write(chunk)
        if self.client.eof and side.transport.can_write_eof():
            side.transport.write_eof()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.relay.target
        source: int | None = None
        try:
            # Bind first, so the target can be told which source port is ours before the
            # connection arrives (see Relay.source_ports).
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.bind((host, 0))
                source = sock.getsockname()[1]
                self.source = source
                self.relay.source_ports.add(source)
                await loop.sock_connect(sock, (host, port))
                await loop.create_connection(lambda: self.upstream, sock=sock)
            except BaseException:
                sock.close()
                raise
        except OSError:
            self.relay.failed += 1
            self.connecting = None
            self._release(source)
            self.abort()
            return
        finally:
            self.connecting = None
            self.forget()
        if self.client.lost:  # the client left while we connected
            self.abort()
        else:
            self.client.resume_reading("connecting")

    def close(self) -> None:
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.close()

    def abort(self) -> None:
        if self.connecting is not None:
            self.connecting.cancel()
        for side in (self.client, self.upstream):
            if side.transport is not None and not side.lost:
                _reset(side.transport)
        self.forget()

    def forget(self) -> None:
        """Drop the pair from the relay once neither side is open or about to be."""
        upstream_done = self.upstream.lost or (
            self.upstream.transport is None and self.connecting is None
        )
        if self.client.lost and upstream_done:
            self.relay.pairs.discard(self)
            self._release(self.source)

    def buffered(self) -> int:
        return sum(
            side.transport.get_write_buffer_size()
            for side in (self.client, self.upstream)
            if side.transport is not None and not side.lost
        )


class Relay:
    """Accepts on ``listener`` and pipes every connection to ``target`` (host, port).

    :meth:`start` takes the listener over: :meth:`stop` closes it, and aborts every
    connection still open. ``accepted`` and ``failed`` (the target refused or was
    unreachable) count connections.
    """

    def __init__(
        self,
        listener: socket.socket,
        target: tuple[str, int],
        *,
        source_ports: set[int] | None = None,
    ) -> None:
        self.listener = listener
        self.target = target
        self.source_ports: set[int] = source_ports if source_ports is not None else set()
        """The local ports of the relay's open connections to the target, registered before
        each connection is made: the target can refuse every other client."""
        self.pairs: set[_Pair] = set()
        self.accepted = 0
        self.failed = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._new_client, sock=self.listener)

    def _new_client(self) -> asyncio.Protocol:
        self.accepted += 1
        return _Pair(self).client

    def buffered(self) -> int:
        """Bytes waiting in the relay's write buffers, over all connections."""
        return sum(pair.buffered() for pair in self.pairs)

    async def stop(self) -> None:
        """Stop accepting, close the listener, abort every open connection; idempotent."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for pair in list(self.pairs):
            connecting = pair.connecting
            pair.abort()
            if connecting is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await connecting
        for _ in range(_STOP_TURNS):  # connection_lost runs on a later turn of the loop
            if not self.pairs:
                break
            await asyncio.sleep(0)
        await server.wait_closed()

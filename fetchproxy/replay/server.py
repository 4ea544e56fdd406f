"""The direct replay server: answers from the lock and the store without mitmproxy's proxy core.

Replay needs no upstream, so it needs none of a general proxy's machinery: this server speaks
just enough HTTP/1.1 to be the proxy a build talks to. It accepts ``CONNECT host:port``,
terminates TLS inside the tunnel with a certificate for that host from fetchproxy's CA
(:mod:`fetchproxy.replay.certs`), reads HTTP/1.1 requests (or plain-HTTP proxy requests) and
hands what it saw to the :class:`~fetchproxy.replay.replayer.Replayer`, which makes the key
and decides: a hit with the recorded status, headers and bytes, or the refusal. It never opens
a connection of its own. Non-HTTP traffic inside a tunnel and websocket upgrades are refused.

Who does what: :mod:`~fetchproxy.replay.listener` accepts; this module is the engine (it
listens, caps the connections, runs the idle sweep and remembers keys and whole answers);
:mod:`~fetchproxy.replay.client` moves one connection's bytes and dispatches each request to the
Replayer; :mod:`~fetchproxy.replay.connection` is the HTTP/1.1 state machine (bytes in, events
out, no I/O) and :mod:`~fetchproxy.replay.tunnel` the TLS. It offers only HTTP/1.1 (ALPN);
replay with ``--http2`` runs the mitmproxy addon instead.

Limits, so that no client can make the server hold memory without bound:

- at most ``max_connections`` connections (:data:`MAX_CONNECTIONS`); one more is accepted and
  closed at once, and a warning says so at most once a second (with the count of the others);
- a request head of :data:`~fetchproxy.replay.http1.MAX_HEAD` (431 past it); a request body
  of ``max_body`` (:data:`~fetchproxy.replay.http1.MAX_BODY`, 1 MiB; 413 past it, counted as a
  refusal, and the rest is not read); :data:`~fetchproxy.replay.client.READ_AHEAD` bytes of
  pipelined requests while an answer is in progress (then reading pauses until it is sent);
- an answer is written only while the connection's send buffer is under
  :data:`~fetchproxy.replay.client.WRITE_HIGH` bytes, and a large body is read from the store
  :data:`~fetchproxy.replay.client.STREAM_CHUNK` bytes at a time as the client takes it: a
  client that stops reading costs a few chunks, not the body;
- out of file descriptors, the listener stops accepting for a tenth of a second and logs it at
  most once a second.

A connection on which nothing moved for ``idle_timeout`` (:data:`IDLE_TIMEOUT`, mitmproxy's own
ten minutes) while it waited for the client is closed by the idle sweep
(:meth:`ReplayServer.sweep`, run by a timer, or by hand in tests), so a long-running
``serve replay`` does not collect them.

Small verified bodies are answered synchronously from memory; first uses (verification), large
bodies (streamed from the store, the last chunk withheld until the blob's digest checks out)
take the slow path, one answer at a time per connection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

from fetchproxy.engine import Address, Engine, admitted, cannot_listen
from fetchproxy.keys.intercepted import NameBook, intercepted_authority, split_authority
from fetchproxy.keys.rules import RawRequest
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.client import IDLE_CHECKS, ClientConnection
from fetchproxy.replay.http1 import MAX_BODY, RequestHead
from fetchproxy.replay.listener import (
    Listener,
    LogThrottle,
    bind,
    original_destination,
    repeats,
)
from fetchproxy.replay.replayer import Hit, Lookup, Replayer

logger = logging.getLogger("fetchproxy.replay")

MAX_CONNECTIONS = 1024
"""Connections served at once by default. With the limits above a connection costs at most
about ``MAX_BODY`` + ``READ_AHEAD`` + a read while a request body arrives, and a few
``STREAM_CHUNK``s while it streams, so this bounds the server at about 1.5 GB in the worst
case and 200 MB for as many clients that all stopped reading. Common file-descriptor limits
(1,024) are reached first."""
IDLE_TIMEOUT = 600.0
"""Seconds a connection may wait for its client with no byte moving (mitmproxy's TCP_TIMEOUT)."""


class ReplayServer(Engine):
    """Serves one :class:`~fetchproxy.replay.replayer.Replayer` over HTTP/1.1: the direct
    replay engine. It listens at ``listen``, or on the listening socket ``sock`` (then owned
    here). ``sweep_timer=False`` leaves the idle sweep to the caller (:meth:`sweep`)."""

    def __init__(
        self,
        replayer: Replayer,
        contexts: HostContexts,
        *,
        listen: Address = ("127.0.0.1", 0),
        sock: socket.socket | None = None,
        only_client_ports: set[int] | None = None,
        on_running: Callable[[], None] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_body: int = MAX_BODY,
        idle_timeout: float = IDLE_TIMEOUT,
        sweep_timer: bool = True,
        transparent: Address | None = None,
        names: NameBook | None = None,
    ) -> None:
        super().__init__(on_running=on_running)
        self._transparent = transparent
        """``--intercept transparent``: where connections the edge redirected arrive."""
        self.names = names
        """The names the DNS stub handed addresses out for."""
        self.replayer = replayer
        self.blobs = replayer.blobs
        self.contexts = contexts
        self.listen = listen
        self._sock = sock
        self.only_client_ports = only_client_ports
        self.max_connections = max_connections
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self._sweep_timer = sweep_timer
        self._turned_away = 0
        self.over_capacity = 0
        """Connections closed at once because ``max_connections`` were open."""
        self._capacity_log = LogThrottle()
        self.listener: Listener | None = None
        self.transparent_listener: Listener | None = None
        self.connections: set[ClientConnection] = set()
        self._accepting: set[asyncio.Task[object]] = set()
        self._joining: set[int] = set()
        """Descriptors of accepted sockets whose connection is not made yet: counted against
        the cap until their :class:`ClientConnection` is in ``connections`` (never twice)."""
        self._keys: dict[tuple[str, ...], Known] = {}
        self._prepared_bytes = 0
        self._key_bytes = 0
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def turned_away(self) -> int:
        return self._turned_away

    async def _start(self) -> list[Address]:
        sock, self._sock = self._sock, None
        if sock is not None:
            sockets = [sock]
        else:
            try:
                sockets = bind(self.listen)
            except OSError as exc:
                in_use = exc.errno == errno.EADDRINUSE
                raise cannot_listen(self.listen, str(exc.strerror or exc), in_use=in_use) from None
        self.listener = Listener(sockets, self._accepted)
        self.listener.start()
        if self._transparent is not None:
            try:
                redirected = bind(self._transparent)
            except OSError as exc:
                self.listener.close()
                self.listener = None
                in_use = exc.errno == errno.EADDRINUSE
                reason = str(exc.strerror or exc)
                raise cannot_listen(self._transparent, reason, in_use=in_use) from None
            self.transparent_listener = Listener(redirected, self._accepted_transparent)
            self.transparent_listener.start()
        if self._sweep_timer:
            self._schedule_sweep()
        addresses = self.listener.addresses
        if self.transparent_listener is not None:
            addresses += self.transparent_listener.addresses
        return addresses

    async def _stop(self) -> None:
        """Stop listening and drop every connection (a stream in progress is cut off)."""
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        transparent, self.transparent_listener = self.transparent_listener, None
        if transparent is not None:
            transparent.close()

        if self._sweeper is not None:
            self._sweeper.cancel()
        for accepting in self._accepting:
            accepting.cancel()
        for connection in list(self.connections):
            connection.abort()
        tasks: list[asyncio.Task[object]] = list(self._accepting)
        tasks += [c.task for c in self.connections if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _accepted_transparent(self, sock: socket.socket, peer: object) -> None:
        self._accepted(sock, peer, intercepted=True)

    def intercepted_tunnel(self, sock: socket.socket) -> Address | None:
        """The tunnel a connection on the transparent listener stands for: its original
        destination, a synthetic address turned back into its name; None (said) when the
        connection was not redirected."""
        try:
            address, port = original_destination(sock)
        except OSError as exc:
            logger.warning("replay: a connection on the transparent listener was not "
                           "redirected there (%s); closed", exc.strerror or exc)  # fmt: skip
            return None
        return split_authority(intercepted_authority(address, port, self.names or _NO_NAMES))

    def _accepted(self, sock: socket.socket, peer: object, *, intercepted: bool = False) -> None:
        """A connection accepted: served, unless the client gate or the cap says otherwise."""
        if not self.admit(peer):
            sock.close()
            return
        if len(self.connections) + len(self._joining) >= self.max_connections:
            sock.close()
            self.over_capacity += 1
            left_out = self._capacity_log.allow(asyncio.get_running_loop().time())
            if left_out is not None:
                logger.warning(
                    "replay: %d connections are open, the most this server takes: closed a new "
                    "one at once%s",
                    self.max_connections,
                    repeats(left_out),
                )
            return
        if sock.family in (socket.AF_INET, socket.AF_INET6):  # asyncio skips a socket made
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # with proto 0
        loop = asyncio.get_running_loop()
        fd = sock.fileno()
        self._joining.add(fd)
        task: asyncio.Task[object] = loop.create_task(
            loop.connect_accepted_socket(
                lambda: ClientConnection(self, intercepted=intercepted, joining=fd), sock
            )
        )
        self._accepting.add(task)

        def done(task: asyncio.Task[object]) -> None:
            self._accepting.discard(task)
            if task.cancelled() or task.exception() is not None:
                self._joining.discard(fd)  # its connection was never made
                sock.close()  # the transport was never made, or failed

        task.add_done_callback(done)

    def joined(self, connection: ClientConnection, fd: int | None) -> None:
        """``connection`` is made: it counts against the cap as itself from now on."""
        self.connections.add(connection)
        if fd is not None:
            self._joining.discard(fd)

    def admit(self, peer: object) -> bool:
        """The client gate of the user sandbox: only the relay's source ports are served."""
        if admitted(peer, self.only_client_ports):
            return True
        self._turned_away += 1
        return False

    def _schedule_sweep(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(self.idle_timeout / IDLE_CHECKS, self._timed_sweep)

    def _timed_sweep(self) -> None:
        self.sweep()
        self._schedule_sweep()

    def sweep(self) -> None:
        """One idle sweep: a connection quiet for :data:`IDLE_CHECKS` sweeps in a row while it
        waited for its client is closed (the timer runs one every tenth of ``idle_timeout``)."""
        for connection in list(self.connections):
            connection.check_idle()

    def lookup(
        self,
        head: RequestHead,
        scheme: str,
        tunnel: Address | None,
        body: bytes,
        *,
        sni: str | None = None,
        intercepted: bool = False,
    ) -> Known:
        """The request's key and the lock entry it names, remembered for requests seen again
        (those without a body: the key is a function of the request line, the tunnel, the TLS
        server name and the headers it reads)."""
        cache_key = None
        if not body:
            values = head.by_name.get
            cache_key = (
                head.method,
                scheme,
                head.target,
                "\0".join(values("host", ())),
                "" if tunnel is None else f"{tunnel[0]}:{tunnel[1]}",
                "" if sni is None else sni,
                "i" if intercepted else "",
                "\0".join(values("accept", ())),
                "\0".join(values("git-protocol", ())),
            )
            found = self._keys.get(cache_key)
            if found is not None:
                return found
        authority = None
        if tunnel is not None:
            host, port = tunnel
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        request = RawRequest(
            head.method, scheme, authority, head.target, head.headers, body, sni, intercepted
        )
        found = Known(self.replayer.lookup(request))
        if cache_key is not None:
            key = found.lookup.key
            self._key_bytes += sum(map(len, cache_key)) + (len(key.url) if key else 0)
            if len(self._keys) >= _KEY_CACHE or self._key_bytes > _KEY_CACHE_BYTES:
                self._keys.clear()
                self._key_bytes = self._prepared_bytes = 0
            self._keys[cache_key] = found
        return found

    def prepare(self, known: Known, hit: Hit, whole: bytes) -> None:
        """Keep the whole answer to a request seen again (a verified small body, the whole of
        it: no Range), with the hit it answers, in budget."""
        if self._prepared_bytes + len(whole) <= _PREPARED_BYTES:
            known.prepared = (hit, whole)
            self._prepared_bytes += len(whole)


_KEY_CACHE = 65536
_KEY_CACHE_BYTES = 32 * 1024 * 1024
"""Request keys remembered by request line and selecting headers (cleared when either is
reached)."""
_PREPARED_BYTES = 32 * 1024 * 1024
"""Memory for whole answers kept ready for requests seen again (small bodies only)."""


class _NoNames:
    def name_of(self, address: str) -> None:
        return None


_NO_NAMES = _NoNames()


class Known:
    """What a request line and its selecting headers map to; once ``prepared``, the decision
    for such a request without a Range and the bytes of its whole answer (the same for every
    such request: a lock does not change during a run)."""

    __slots__ = ("lookup", "prepared")

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.prepared: tuple[Hit, bytes] | None = None

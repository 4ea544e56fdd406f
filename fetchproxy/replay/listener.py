"""Listening sockets and the accept loop of the direct replay server: :class:`Listener`.

asyncio's own server, out of file descriptors, logs ``socket.accept() out of system resource``
once per pending connection on every turn of the loop (21,851 lines in 10 s were seen) and
retries each a second later. Here a resource error stops accepting for :data:`ACCEPT_BACKOFF`
seconds (the connections wait in the listen backlog, and connections that close meanwhile free
descriptors), and is logged at most once a second, with the count of the repeats left out
(:class:`LogThrottle`). Whom to serve and how many at once is the server's decision, made in the
``on_accept`` callback for each accepted socket.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
from collections.abc import Callable

from fetchproxy.engine import Address

logger = logging.getLogger("fetchproxy.replay")

ACCEPT_BACKOFF = 0.1
"""Seconds without accepting after the system ran out of file descriptors or memory."""
ACCEPT_BATCH = 128
"""Connections accepted per turn of the event loop, at most."""
BACKLOG = 1024
_RESOURCE_ERRORS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))


class LogThrottle:
    """At most one log line per ``interval`` seconds for one kind of trouble, and how many
    were left out; the clock is the caller's (``now``), so tests step it by hand."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last: float | None = None
        self.suppressed = 0
        """Occurrences not logged since the last line."""

    def allow(self, now: float) -> int | None:
        """Whether to log this occurrence: None to stay quiet, else the number left out since
        the last line (then reset)."""
        if self._last is not None and now - self._last < self.interval:
            self.suppressed += 1
            return None
        self._last = now
        left_out, self.suppressed = self.suppressed, 0
        return left_out

    def left_out(self, now: float) -> int | None:
        """The occurrences left out, once a line may be logged again (then reset), for the
        line that says the trouble is over; None while none were, or it is too early."""
        if not self.suppressed or (self._last is not None and now - self._last < self.interval):
            return None
        self._last = now
        left_out, self.suppressed = self.suppressed, 0
        return left_out


def repeats(left_out: int) -> str:
    """`` (and N more since the last)``, for a line that stands for several."""
    return f" (and {left_out} more like it since the last)" if left_out else ""


def bind(listen: Address) -> list[socket.socket]:
    """Listening sockets for ``listen`` (a host name may stand for several addresses).

    Resolved in this thread, never in a worker: the sandboxed run binds the proxy with the
    event-loop thread inside the edge namespace, and a thread started then would stay there
    (an address needs no lookup at all; ``localhost`` is resolved from ``/etc/hosts``).
    Raises ``OSError`` with asyncio's message for an address that cannot be bound.
    """
    host, port = listen
    infos = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
        flags=socket.AI_PASSIVE | _numeric(host),
    )  # fmt: skip
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                strerror = (exc.strerror or str(exc)).lower()
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {strerror}"
                ) from None
            sock.listen(BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _numeric(host: str) -> int:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return 0
    return socket.AI_NUMERICHOST


class Listener:
    """Accepts connections on ``sockets`` (owned here) and hands each to ``on_accept``."""

    def __init__(
        self,
        sockets: list[socket.socket],
        on_accept: Callable[[socket.socket, object], None],
        *,
        backoff: float = ACCEPT_BACKOFF,
    ) -> None:
        self.sockets = sockets
        self._on_accept = on_accept
        self._backoff = backoff
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resume: asyncio.TimerHandle | None = None
        self._throttle = LogThrottle()
        self.resource_errors = 0
        """Accepts that failed for want of descriptors or memory, so far."""

    @property
    def addresses(self) -> list[Address]:
        return [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self.sockets]

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for sock in self.sockets:
            sock.setblocking(False)
        self._watch()

    def close(self) -> None:
        """Stop accepting and close the sockets."""
        self._unwatch()
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        for sock in self.sockets:
            sock.close()
        self._loop = None

    def _watch(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for sock in self.sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _unwatch(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for sock in self.sockets:
            if sock.fileno() >= 0:
                loop.remove_reader(sock.fileno())

    def _accept(self, listening: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = listening.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRORS:
                    logger.warning("replay: accept() failed: %s", exc)
                    return
                self._out_of_resources(exc)
                return
            if self._throttle.suppressed and self._loop is not None:
                left_out = self._throttle.left_out(self._loop.time())
                if left_out is not None:
                    logger.warning(
                        "replay: accepting connections again (%d more accepts failed since the "
                        "last message)",
                        left_out,
                    )
            self._on_accept(sock, peer)

    def _out_of_resources(self, exc: OSError) -> None:
        """Stop accepting for a while; say so at most once a second."""
        self.resource_errors += 1
        loop = self._loop
        assert loop is not None
        left_out = self._throttle.allow(loop.time())
        if left_out is not None:
            logger.error(
                "replay: cannot accept a connection: %s — waiting %.1f s before the next; "
                "raise the file-descriptor limit (ulimit -n) or lower the connection cap%s",
                exc.strerror or exc,
                self._backoff,
                repeats(left_out),
            )
        self._unwatch()
        self._resume = loop.call_later(self._backoff, self._resumed)

    def _resumed(self) -> None:
        self._resume = None
        self._watch()

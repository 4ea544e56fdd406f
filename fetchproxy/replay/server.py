"""The direct replay server: answers from the lock and the store without mitmproxy's proxy core.

Replay needs no upstream, so it needs none of a general proxy's machinery: this server speaks
just enough HTTP/1.1 to be the proxy a build talks to. It accepts ``CONNECT host:port``,
terminates TLS inside the tunnel with a certificate for that host from fetchproxy's CA
(:mod:`fetchproxy.leafcerts`), reads HTTP/1.1 requests (or plain-HTTP proxy requests), computes
each key with the same core as the mitmproxy addons (:mod:`fetchproxy.normalize`,
:mod:`fetchproxy.gitbody`) and answers with :mod:`fetchproxy.replaying`'s decisions: a hit with
the recorded status, headers and bytes; anything else with the refusal. It never opens a
connection of its own. Non-HTTP traffic inside a tunnel and websocket upgrades are refused.

Per request it costs tens of microseconds instead of mitmproxy's millisecond. It offers only
HTTP/1.1 (ALPN); replay with ``--http2`` runs the mitmproxy addon instead.

A connection on which nothing moved for ``IDLE_TIMEOUT`` (mitmproxy's own ten minutes) while
it waits for the client is closed, so a long-running ``serve replay`` does not collect them.

Small verified bodies are answered synchronously from memory; first uses (verification), large
bodies (streamed from the store with the connection's flow control, the last chunk withheld
until the blob's digest checks out) and request bodies still arriving take the slow path.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from contextlib import suppress

from fetchproxy.engine import Address, Engine, admitted, cannot_listen
from fetchproxy.keys.rules import RawRequest
from fetchproxy.lock.model import Fetch
from fetchproxy.replay.blobs import SMALL_BODY
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.decisions import Answer, Refusal
from fetchproxy.replay.http1 import (
    NO_BODY,
    ChunkedBody,
    Framing,
    HTTPParseError,
    RequestHead,
    body_framing,
    looks_like_http,
    next_head,
    response_head,
    split_authority,
)
from fetchproxy.replay.replayer import Hit, Lookup, Replayer
from fetchproxy.store import StoreError

logger = logging.getLogger("fetchproxy.replay")


_KEY_CACHE = 65536
_KEY_CACHE_BYTES = 32 * 1024 * 1024
"""Request keys remembered by request line and selecting headers (cleared when either is
reached)."""
_PREPARED_BYTES = 32 * 1024 * 1024
"""Memory for whole answers kept ready for requests seen again (small bodies only)."""
_BUSY_BUFFER = 1 << 20
"""Pipelined bytes buffered while a request is answered slowly before reading pauses."""
_READ = 256 * 1024
_CHUNK = 1 << 20
_TLS_HANDSHAKE = 0x16
_DISTRUST_ALERTS = ("unknown ca", "bad certificate", "certificate unknown")
"""TLS alerts a client sends when it does not trust the certificate it was shown."""
_CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"
IDLE_TIMEOUT = 600.0
"""Seconds a connection may wait for its client with no byte moving (mitmproxy's TCP_TIMEOUT)."""
_IDLE_CHECKS = 10
"""Sweeps per ``IDLE_TIMEOUT``: a quiet connection closes up to a tenth after the timeout."""
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class ReplayServer(Engine):
    """Serves one :class:`~fetchproxy.replay.replayer.Replayer` over HTTP/1.1: the direct
    replay engine. It listens at ``listen``, or on the listening socket ``sock`` (then owned
    here)."""

    def __init__(
        self,
        replayer: Replayer,
        contexts: HostContexts,
        *,
        listen: Address = ("127.0.0.1", 0),
        sock: socket.socket | None = None,
        only_client_ports: set[int] | None = None,
        on_running: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(on_running=on_running)
        self.replayer = replayer
        self.blobs = replayer.blobs
        self.contexts = contexts
        self.listen = listen
        self._sock = sock
        self.only_client_ports = only_client_ports
        self._turned_away = 0
        self._server: asyncio.Server | None = None
        self.connections: set[_Connection] = set()
        self._keys: dict[tuple[str, ...], _Known] = {}
        self._prepared_bytes = 0
        self._key_bytes = 0
        self.idle_timeout = IDLE_TIMEOUT
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def turned_away(self) -> int:
        return self._turned_away

    async def _start(self) -> list[Address]:
        loop = asyncio.get_running_loop()
        sock, self._sock = self._sock, None
        try:
            if sock is not None:
                self._server = await loop.create_server(lambda: _Connection(self), sock=sock)
            else:
                host, port = self.listen
                self._server = await loop.create_server(lambda: _Connection(self), host, port)
        except OSError as exc:
            if sock is not None:
                sock.close()
            in_use = exc.errno == errno.EADDRINUSE
            raise cannot_listen(self.listen, str(exc.strerror or exc), in_use=in_use) from None
        self._sweeper = loop.call_later(self.idle_timeout / _IDLE_CHECKS, self._sweep)
        return [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._server.sockets]

    async def _stop(self) -> None:
        """Stop listening and drop every connection (a stream in progress is cut off)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connection in list(self.connections):
            connection.abort()
        tasks = [c.task for c in self.connections if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            with suppress(Exception):
                await server.wait_closed()

    def _sweep(self) -> None:
        """Close the connections that waited for their client for ``idle_timeout``."""
        for connection in list(self.connections):
            connection.check_idle()
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(self.idle_timeout / _IDLE_CHECKS, self._sweep)

    def admit(self, peer: object) -> bool:
        """The client gate of the user sandbox: only the relay's source ports are served."""
        if admitted(peer, self.only_client_ports):
            return True
        self._turned_away += 1
        return False

    def lookup(self, head: RequestHead, scheme: str, tunnel: Address | None, body: bytes) -> _Known:
        """The request's key and the lock entry it names, remembered for requests seen again
        (those without a body: the key is a function of the request line, the tunnel and the
        headers it reads)."""
        cache_key = None
        if not body:
            cache_key = (
                head.method,
                scheme,
                head.target,
                "\0".join(head.values("host")),
                "" if tunnel is None else f"{tunnel[0]}:{tunnel[1]}",
                "\0".join(head.values("accept")),
                "\0".join(head.values("git-protocol")),
            )
            found = self._keys.get(cache_key)
            if found is not None:
                return found
        authority = None
        if tunnel is not None:
            host, port = tunnel
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        request = RawRequest(head.method, scheme, authority, head.target, head.headers, body)
        found = _Known(self.replayer.lookup(request))
        if cache_key is not None:
            key = found.lookup.key
            self._key_bytes += sum(map(len, cache_key)) + (len(key.url) if key else 0)
            if len(self._keys) >= _KEY_CACHE or self._key_bytes > _KEY_CACHE_BYTES:
                self._keys.clear()
                self._key_bytes = self._prepared_bytes = 0
            self._keys[cache_key] = found
        return found

    def prepare(self, known: _Known, whole: bytes) -> None:
        """Keep the whole answer to a request seen again (a verified small body), in budget."""
        if self._prepared_bytes + len(whole) <= _PREPARED_BYTES:
            known.whole = whole
            self._prepared_bytes += len(whole)


class _Known:
    """What a request line and its selecting headers map to; ``whole`` the answer's bytes."""

    __slots__ = ("lookup", "whole")

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.whole: bytes | None = None


class _Pending:
    """A request whose head is read; its body (if any) may still be arriving."""

    __slots__ = ("chunked", "framing", "head", "start")

    def __init__(self, head: RequestHead, framing: Framing, start: int) -> None:
        self.head = head
        self.framing = framing
        self.start = start
        """Where the body starts in the buffer."""
        self.chunked = ChunkedBody(start) if framing.chunked else None

    def body(self, buffer: bytes | bytearray) -> tuple[bytes, int] | None:
        """(body, end offset) once the buffer holds all of it, else None."""
        if self.chunked is not None:
            return self.chunked.feed(buffer)
        end = self.start + self.framing.length
        if len(buffer) < end:
            return None
        return (bytes(buffer[self.start : end]) if self.framing.length else b""), end

    def rebase(self, consumed: int) -> None:
        """The buffer lost its first ``consumed`` bytes."""
        self.start -= consumed
        if self.chunked is not None:
            self.chunked.rebase(consumed)


class _Connection(asyncio.Protocol):
    """One client connection: proxy requests, a CONNECT tunnel, TLS inside it, HTTP/1.1."""

    def __init__(self, server: ReplayServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self._buffer: bytes | bytearray = b""
        self._state = "proxy"  # proxy | tunnel | tls | closed
        self._scheme = "http"
        self._tunnel: Address | None = None
        self._tls: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._handshaken = False
        self._continued = False
        self._pending: _Pending | None = None
        """The request whose body is still arriving."""
        self._writable: asyncio.Future[None] | None = None
        self._answered = 0
        self._peer_done = False
        """The client will send no more (EOF, or TLS close_notify): close once answered."""
        self._moved = 0
        """Reads and writes so far: the idle sweep's sign of life (cheaper than a clock)."""
        self._moved_seen = 0
        self._quiet_sweeps = 0

    # ---------------------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.server.admit(transport.get_extra_info("peername")):
            self._state = "closed"
            transport.abort()
            return
        self.server.connections.add(self)
        transport.set_write_buffer_limits(high=4 * _CHUNK)

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = "closed"
        self.server.connections.discard(self)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # a stream in progress sees the closed state
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self.task is None and self._state != "closed" and self.transport is not None:
            self.transport.resume_reading()
            if self._buffer:
                self._process()
            self._close_if_done()

    def abort(self) -> None:
        self._state = "closed"
        if self.transport is not None:
            self.transport.abort()

    def check_idle(self) -> None:
        """One idle sweep: close after ``_IDLE_CHECKS`` in a row without a byte moving while
        the connection waited for its client (to send a request, or to read an answer)."""
        if self._moved != self._moved_seen:
            self._moved_seen = self._moved
            self._quiet_sweeps = 0
            return
        if self.task is not None and not self._write_blocked():
            self._quiet_sweeps = 0  # the server is busy answering (verifying a large blob)
            return
        self._quiet_sweeps += 1
        if self._quiet_sweeps >= _IDLE_CHECKS:
            logger.debug("replay: closing a connection idle for %.0f s", self.server.idle_timeout)
            transport = self.transport
            unsent = transport is not None and transport.get_write_buffer_size() > 0
            if unsent or self._state == "closed":
                self.abort()  # the client stopped reading: what is buffered will never flush
            else:
                self._close()

    def data_received(self, data: bytes) -> None:
        self._moved += 1
        state = self._state
        if state == "tls":
            data = self._decrypt(data)
            if not data:
                self._close_if_done()
                return
        elif state == "tunnel":
            if not self._enter_tunnel(data):
                return
            if self._state == "tls":
                return
        elif state == "closed":
            return
        buffer = self._buffer
        if not buffer:
            self._buffer = data
        elif isinstance(buffer, bytearray):
            buffer += data  # a request still arriving: no quadratic copying
        else:
            self._buffer = bytearray(buffer) + data
        if self.task is None and not self._write_blocked():
            self._process()
            self._close_if_done()
        elif len(self._buffer) > _BUSY_BUFFER and self.transport is not None:
            self.transport.pause_reading()  # until the answer in progress is sent

    def eof_received(self) -> bool:
        """The client closed its side: answer what it sent, then close ours."""
        self._peer_done = True
        self._close_if_done()
        return True

    def _close_if_done(self) -> None:
        if self._peer_done and self.task is None:
            self._close()

    # ---------------------------------------------------------------------------- tunnel, TLS

    def _enter_tunnel(self, data: bytes) -> bool:
        """First bytes inside a CONNECT tunnel: TLS, plain HTTP, or something to refuse."""
        assert self._tunnel is not None
        if data[0] == _TLS_HANDSHAKE:
            context = self.server.contexts.for_host_or_none(self._tunnel[0])
            if context is None:
                self.abort()
                return False
            self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
            self._state = "tls"
            self._scheme = "https"
            plain = self._decrypt(data)
            if plain:
                self._buffer += plain
                if self.task is None:
                    self._process()
            self._close_if_done()
            return True
        if looks_like_http(data):
            self._state = "plain"  # the scheme stays http
            return True
        self._refuse_raw()
        return False

    def _refuse_raw(self) -> None:
        self.server.replayer.refuse_raw(self._tunnel)
        self.abort()

    def _decrypt(self, data: bytes) -> bytes:
        tls = self._tls
        assert tls is not None
        self._incoming.write(data)
        if not self._handshaken:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush_tls()
                return b""
            except OSError as exc:
                self._flush_tls()
                self._handshake_failed(exc)
                self.abort()
                return b""
            self._handshaken = True
            self._flush_tls()
        parts = []
        try:
            while chunk := tls.read(_READ):
                parts.append(chunk)
            self._peer_done = True  # b"": the client sent its close_notify
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self._peer_done = True
        except OSError as exc:
            logger.info("replay: TLS error from a client of %s: %s", self._tunnel, exc)
            self.abort()
        self._flush_tls()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _handshake_failed(self, exc: Exception) -> None:
        host, port = self._tunnel or ("?", 0)
        reason = getattr(exc, "reason", None) or str(exc)
        if any(alert in reason.lower().replace("_", " ") for alert in _DISTRUST_ALERTS):
            logger.warning(
                "replay: a client refused the certificate for %s:%s (%s) — does it trust "
                "fetchproxy's CA? `fetchproxy ca path` names it (docs/clients.md)",
                host,
                port,
                reason,
            )
        else:
            logger.info("replay: TLS handshake for %s:%s failed: %s", host, port, reason)

    def _flush_tls(self) -> None:
        pending = self._outgoing.read()
        if pending and self.transport is not None and self._state != "closed":
            self.transport.write(pending)

    def _send(self, data: bytes | memoryview) -> None:
        if self._state == "closed" or self.transport is None:
            return
        self._moved += 1
        tls = self._tls
        if tls is None:
            self.transport.write(data)
            return
        view = memoryview(data)
        while view:
            view = view[tls.write(view) :]
        self.transport.write(self._outgoing.read())

    async def _drain(self) -> None:
        writable = self._writable
        if writable is not None and not writable.done():
            await writable

    def _close(self) -> None:
        """Close after what was written (with TLS, after a close_notify)."""
        if self._state == "closed" or self.transport is None:
            return
        if self._tls is not None and self._handshaken:
            with suppress(ssl.SSLError, OSError):
                self._tls.unwrap()
            self._flush_tls()
        self._state = "closed"
        self.transport.close()

    # ---------------------------------------------------------------------------- requests

    def _process(self) -> None:
        """Answer every complete request in the buffer, in order, until one must wait: for its
        body, for a slow answer, or for the client to read what was sent (backpressure)."""
        buffer = self._buffer
        pos = 0
        try:
            while (
                self.task is None
                and self._state in ("proxy", "tls", "plain")
                and not self._write_blocked()
            ):
                pending = self._pending
                if pending is None:
                    found_head = next_head(buffer, pos)
                    if found_head is None:
                        break
                    head, start = found_head
                    framing = body_framing(head) if head.method != "CONNECT" else NO_BODY
                    pending = _Pending(head, framing, start)
                    self._pending = pending
                found = pending.body(buffer)
                if found is None:
                    self._continue(pending.head)
                    break
                body, pos = found
                self._pending = None
                self._continued = False
                self._request(pending.head, body)
        except HTTPParseError as exc:
            self._fail(exc)
        except Exception:
            logger.exception("replay: internal error answering a request; connection closed")
            self.abort()
        rest = buffer[pos:] if pos else buffer
        self._buffer = b""
        if self._pending is not None:
            self._pending.rebase(pos)
        if self._state == "tunnel" and rest:
            self.data_received(bytes(rest))  # what followed the CONNECT in the same read
        elif self._state != "closed":
            self._buffer = rest
        if self._write_blocked() and self.transport is not None:
            self.transport.pause_reading()  # until the client reads what it was sent

    def _write_blocked(self) -> bool:
        return self._writable is not None and not self._writable.done()

    def _continue(self, head: RequestHead) -> None:
        """The body is still coming: tell a client that waits for it to go on."""
        if not self._continued and (head.get("expect") or "").lower() == "100-continue":
            self._continued = True
            self._send(_CONTINUE)

    def _fail(self, exc: HTTPParseError) -> None:
        """A request that is not HTTP/1.1: say so and close (inside a tunnel: not HTTP)."""
        if self._tunnel is not None and self._answered == 0:
            self.server.replayer.refuse_not_http(self._tunnel, str(exc))
        text = f"fetchproxy: bad request: {exc}\n".encode()
        self._send(
            response_head(
                "HTTP/1.1",
                exc.status,
                "Bad Request" if exc.status == 400 else "Error",
                (
                    ("content-type", "text/plain; charset=utf-8"),
                    ("content-length", str(len(text))),
                    ("connection", "close"),
                ),
            )
            + text
        )
        self._close()

    def _request(self, head: RequestHead, body: bytes) -> None:
        server = self.server
        self._answered += 1
        if head.method == "CONNECT":
            self._connect(head)
            return
        try:
            known = server.lookup(head, self._scheme, self._tunnel, body)
        except HTTPParseError as exc:
            known = _Known(Lookup(None, None, str(exc)))
        range_header = head.get("range")
        decision = server.replayer.decide(
            known.lookup,
            method=head.method,
            websocket=(head.get("upgrade") or "").lower() == "websocket",
            range_header=range_header,
        )
        if not isinstance(decision, Hit):
            self._write_answer(head, decision.answer, decision.text)
            return
        fetch = decision.fetch
        plain = range_header is None and head.keep_alive and head.version == "HTTP/1.1"
        whole = known.whole
        if whole is not None and plain:
            server.replayer.served(decision)
            self._send(whole)
            return
        if fetch.size <= SMALL_BODY:
            cached = server.blobs.cached(fetch.digest)
            if cached is not None and len(cached) == fetch.size:
                if plain:  # no Range: the whole body
                    whole = self._answer_bytes(head, decision.answer, cached)
                    server.prepare(known, whole)
                    server.replayer.served(decision)
                    self._send(whole)
                    return
                self._write_answer(head, decision.answer, cached, served=decision)
                return
        self.task = asyncio.get_running_loop().create_task(self._answer_slowly(head, decision))
        self.task.add_done_callback(self._slow_done)

    def _connect(self, head: RequestHead) -> None:
        if self._state != "proxy":
            self._fail(HTTPParseError("CONNECT inside a tunnel"))
            return
        try:
            host, port = split_authority(head.target)
        except HTTPParseError as exc:
            self._fail(exc)
            return
        if port is None or not host:
            self._fail(HTTPParseError(f"CONNECT {head.target[:100]!r}: no host:port"))
            return
        self._tunnel = (host, port)
        self._answered = 0  # requests inside the tunnel
        self._send(_CONNECTED)
        self._state = "tunnel"  # _process hands on whatever followed in the same read

    def _send_refusal(self, head: RequestHead, refused: Refusal) -> None:
        self._write_answer(head, refused.answer, refused.text)

    def _write_answer(
        self, head: RequestHead, answer: Answer, body: bytes, *, served: Hit | None = None
    ) -> None:
        """Send a whole answer with ``body`` (the blob; cut to the answer's range).

        With ``served``, count that hit as served before sending it: like a refusal's count and
        log line, it is in the books by the time a client has the answer.
        """
        out = self._answer_bytes(head, answer, body)
        if served is not None:
            self.server.replayer.served(served)
        self._send(out)
        if not head.keep_alive:
            self._close()

    @staticmethod
    def _answer_bytes(head: RequestHead, answer: Answer, body: bytes) -> bytes:
        out = _answer_head(head, answer)
        if answer.send_body and head.method != "HEAD":  # a refusal to a HEAD sends none either
            start, end = answer.span(len(body))
            out += body[start:end]  # the whole of a bytes object is itself, not a copy
        return out

    def _slow_done(self, task: asyncio.Task[None]) -> None:
        self.task = None
        if self.transport is not None and self._state != "closed":
            self.transport.resume_reading()
        if not task.cancelled() and task.exception() is not None:
            logger.error("replay: answering failed: %s", task.exception())
            self.abort()
            return
        if self._buffer and self._state not in ("closed", "tunnel"):
            self._process()
        self._close_if_done()

    async def _answer_slowly(self, head: RequestHead, hit: Hit) -> None:
        """First use of a blob (verify it), or a large body (stream it)."""
        replayer = self.server.replayer
        fetch, answer = hit.fetch, hit.answer
        refused = await replayer.verify(hit)
        if refused is not None:
            self._send_refusal(head, refused)
            return
        if fetch.size <= SMALL_BODY or not answer.send_body:  # HEAD sends no body
            try:
                body = b""
                if answer.send_body:
                    body = await self.server.blobs.small_body(fetch.digest, fetch.size)
            except StoreError as exc:
                self._send_refusal(head, replayer.store_failed(hit, exc))
                return
            self._write_answer(head, answer, body, served=hit)
            return
        start, end = answer.span(fetch.size)
        keep_alive = head.keep_alive
        replayer.served(hit)
        self._send(_answer_head(head, answer))
        try:
            await self._stream(fetch, start, end)
        except StoreError as exc:
            replayer.cut_off(hit, exc)
            self.abort()  # the client sees a body cut short, never a corrupt one whole
            return
        except ConnectionError:
            return
        if not keep_alive:
            self._close()

    async def _stream(self, fetch: Fetch, start: int, end: int) -> None:
        with await self.server.blobs.open_verified(fetch.digest, fetch.size, start, end) as blob:
            for part in blob:
                if self._state == "closed":
                    raise ConnectionResetError("the client went away")
                self._send(part)
                await self._drain()


def _answer_head(head: RequestHead, answer: Answer) -> bytes:
    """The status line and headers of ``answer`` to ``head``, in its HTTP version."""
    headers = _with_connection(head, answer.headers)
    return response_head(head.version, answer.status, answer.reason, headers)


def _with_connection(
    head: RequestHead, headers: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """The answer's headers plus what says whether the connection stays open, when needed."""
    if not head.keep_alive:
        return (*headers, ("connection", "close"))
    if head.version == "HTTP/1.0":
        return (*headers, ("connection", "keep-alive"))
    return headers

"""One client connection of the direct replay server, as asyncio sees it: :class:`ClientConnection`.

It moves bytes between the transport, TLS (:mod:`~fetchproxy.replay.tunnel`) and the HTTP/1.1
state machine (:mod:`~fetchproxy.replay.connection`), hands each complete request to the
:class:`~fetchproxy.replay.replayer.Replayer`, and writes the answer it gets: from memory when
it can, else on the slow path (verify the blob, or stream it from the store). What it is at any
moment — HTTP to the proxy, a tunnel's first bytes, HTTP inside TLS or plain inside the tunnel,
lingering, closed — is its :class:`Layer`, and :data:`LAYER_STEPS` lists every change.

Backpressure both ways: nothing more is written while the send buffer is over
:data:`WRITE_HIGH` (a streamed body is read from the store only as the client takes it), and
reading pauses while the client does not read its answers or pipelines more than
:data:`READ_AHEAD` bytes behind one in progress.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING

from fetchproxy.engine import Address
from fetchproxy.lock.model import Fetch
from fetchproxy.replay.blobs import SMALL_BODY
from fetchproxy.replay.connection import (
    NEED_DATA,
    EndOfMessage,
    H1Connection,
    Request,
    State,
    answer_bytes,
)
from fetchproxy.replay.decisions import INVALID_REQUEST, NOT_HTTP, Answer, Refusal
from fetchproxy.replay.http1 import (
    BodyTooLargeError,
    HTTPParseError,
    RequestHead,
    looks_like_http,
    split_authority,
)
from fetchproxy.replay.replayer import Hit, Lookup
from fetchproxy.replay.tunnel import TLSFailedError, TLSTunnel
from fetchproxy.store import StoreError

if TYPE_CHECKING:
    from fetchproxy.replay.server import ReplayServer

logger = logging.getLogger("fetchproxy.replay")

WRITE_HIGH = 16 * 1024
"""Bytes in a connection's send buffer (what the kernel did not take) above which nothing
more is written to it, until all of it is sent (:data:`WRITE_LOW`). The kernel's own socket
buffer keeps a fast client busy meanwhile, so this costs no throughput."""
WRITE_LOW = 0
STREAM_CHUNK = 64 * 1024
"""Bytes read from the store at a time for a streamed body. A client that stopped reading
holds about two and a half of them (the one the send buffer keeps, and the store reader's
withheld next one): about 180 kB a connection in ``bench/replay_load.py``, 250 kB with TLS.
Smaller chunks cost throughput (32 KiB: a fifth of it over plain HTTP), larger ones memory."""
READ_AHEAD = 64 * 1024
"""Pipelined bytes buffered while an answer is in progress before reading pauses."""
IDLE_CHECKS = 10
"""Sweeps per ``idle_timeout``: a quiet connection closes up to a tenth after the timeout."""
LINGER = 2.0
"""Seconds a connection closed while its client may still be sending keeps reading (and
dropping) what comes, so that the client reads its answer instead of a reset."""
_TLS_HANDSHAKE = 0x16
_DISTRUST_ALERTS = ("unknown ca", "bad certificate", "certificate unknown")
"""TLS alerts a client sends when it does not trust the certificate it was shown."""


class Layer(enum.Enum):
    """What the bytes of a client connection are, in the order they can change."""

    PROXY = "proxy"
    """HTTP to the proxy itself: plain-HTTP proxy requests, or a CONNECT."""
    TUNNEL = "tunnel"
    """A CONNECT was accepted: the first bytes inside say what follows."""
    TLS = "tls"
    """HTTP inside TLS inside the tunnel."""
    PLAIN = "plain"
    """HTTP inside the tunnel, without TLS."""
    LINGER = "linger"
    """Our side is closed; what the client still sends is read and dropped until it closes."""
    CLOSED = "closed"

    __hash__ = object.__hash__  # members are singletons: Enum's own hash is a Python call


LAYER_STEPS: dict[Layer, frozenset[Layer]] = {
    Layer.PROXY: frozenset((Layer.TUNNEL, Layer.LINGER, Layer.CLOSED)),
    Layer.TUNNEL: frozenset((Layer.TLS, Layer.PLAIN, Layer.CLOSED)),
    Layer.TLS: frozenset((Layer.LINGER, Layer.CLOSED)),
    Layer.PLAIN: frozenset((Layer.LINGER, Layer.CLOSED)),
    Layer.LINGER: frozenset((Layer.CLOSED,)),
    Layer.CLOSED: frozenset((Layer.CLOSED,)),
}
"""Every change of layer a connection can make."""
_SERVING = frozenset((Layer.PROXY, Layer.TLS, Layer.PLAIN))
"""The layers in which HTTP requests are read."""


class ClientConnection(asyncio.Protocol):
    """One client connection: moves its bytes between the transport, TLS and the HTTP/1.1
    state machine, and hands each request to the Replayer."""

    def __init__(
        self, server: ReplayServer, *, intercepted: bool = False, joining: int | None = None
    ) -> None:
        self.server = server
        self._joining = joining
        """The accepted socket's descriptor, counted against the cap until this is made."""
        self.intercepted = intercepted
        """Accepted on the transparent listener: a tunnel from the start, to the server its
        original destination stands for (``--intercept transparent``)."""
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        """The answer in progress on the slow path."""
        self.layer = Layer.PROXY
        self.http = H1Connection(max_body=server.max_body)
        self.tunnel: Address | None = None
        self.tls: TLSTunnel | None = None
        self._scheme = "http"
        self._sni: str | None = None
        self._sni_known = False
        """Whether :attr:`_sni` holds the TLS server name (a session has one: no renegotiation)."""
        self.write_blocked = False
        """The send buffer is over its high-water mark: the client is not reading."""
        self._writable: asyncio.Future[None] | None = None
        """Done when the send buffer drained (what a stream waits for)."""
        self._linger: asyncio.TimerHandle | None = None
        self._moved = 0
        """Reads and writes so far: the idle sweep's sign of life (cheaper than a clock)."""
        self._moved_seen = 0
        self._quiet_sweeps = 0

    def _enter(self, layer: Layer) -> None:
        if layer not in LAYER_STEPS[self.layer]:
            raise RuntimeError(f"a connection cannot go from {self.layer.value} to {layer.value}")
        self.layer = layer

    # ---------------------------------------------------------------------------- transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.joined(self, self._joining)
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        if self.intercepted:
            tunnel = self.server.intercepted_tunnel(transport.get_extra_info("socket"))
            if tunnel is None:
                self.abort()
                return
            self.tunnel = tunnel
            self._enter(Layer.TUNNEL)  # the CONNECT its client did not send

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(Layer.CLOSED)
        self.server.connections.discard(self)
        if self._linger is not None:
            self._linger.cancel()
        self.write_blocked = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)  # a stream in progress sees the closed layer
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.write_blocked = True
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self.write_blocked = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self.task is None:
            self._serve()

    def abort(self) -> None:
        self._enter(Layer.CLOSED)
        if self.transport is not None:
            self.transport.abort()

    def check_idle(self) -> None:
        """One idle sweep: close after ``IDLE_CHECKS`` in a row without a byte moving while
        the connection waited for its client (to send a request, or to read an answer)."""
        if self._moved != self._moved_seen:
            self._moved_seen = self._moved
            self._quiet_sweeps = 0
            return
        if self.task is not None and not self.write_blocked:
            self._quiet_sweeps = 0  # the server is busy answering (verifying a large blob)
            return
        self._quiet_sweeps += 1
        if self._quiet_sweeps >= IDLE_CHECKS:
            logger.debug("replay: closing a connection idle for %.0f s", self.server.idle_timeout)
            transport = self.transport
            unsent = transport is not None and transport.get_write_buffer_size() > 0
            if unsent or self.layer not in _SERVING:
                self.abort()  # the client stopped reading: what is buffered will never flush
            else:
                self._close(linger=False)

    def data_received(self, data: bytes) -> None:
        self._moved += 1
        layer = self.layer
        if layer is Layer.TLS:
            data = self._decrypt(data)
        elif layer is Layer.TUNNEL:
            self._open_tunnel(data)
            return
        elif layer is not Layer.PROXY and layer is not Layer.PLAIN:
            return  # lingering, or closed: dropped
        if data:
            self.http.receive_data(data)
        self._serve()

    def eof_received(self) -> bool:
        """The client closed its side: answer what it sent, then close ours."""
        if self.layer not in _SERVING:
            return False  # lingering, or no request yet in a tunnel: close
        self.http.receive_eof()
        self._serve()
        return True

    def _serve(self) -> None:
        """Handle what the client sent, unless an answer is in progress or waits to be read;
        stop reading while pipelined bytes pile up behind one."""
        if self.layer not in _SERVING:
            return
        if self.task is None and not self.write_blocked:
            if self.transport is not None:
                self.transport.resume_reading()
            self._pump()
        blocked = self.write_blocked
        busy = self.task is not None and self.http.buffered > READ_AHEAD
        if (blocked or busy) and self.transport is not None:
            self.transport.pause_reading()

    def _pump(self) -> None:
        """Take the connection's events and answer each complete request, in order, until it
        needs more bytes, an answer is slow, or the client must read first (backpressure)."""
        http = self.http
        while self.task is None and self.layer in _SERVING and not self.write_blocked:
            try:
                event = http.next_event()
            except HTTPParseError as exc:
                self._malformed(exc)
                return
            if type(event) is EndOfMessage:
                head = http.head
                assert head is not None
                try:
                    self._request(head, event.body)
                except Exception:
                    logger.exception("replay: internal error answering a request; closed")
                    self.abort()
                    return
            elif type(event) is Request:
                continue  # the head alone decides nothing: the body may be keyed
            elif event is NEED_DATA:
                # (only a body can be waited for: between requests, no property to ask)
                if http.their_state is State.SEND_BODY and http.client_waits_for_continue:
                    self._send(http.send_continue())
                break
            else:
                break  # PAUSED, or ConnectionClosed
        if self.layer is Layer.TUNNEL:
            rest = http.trailing_data()
            if rest:
                self._open_tunnel(rest)  # what followed the CONNECT in the same read
        elif http.our_state is State.MUST_CLOSE and self.task is None:
            self._close()

    # ---------------------------------------------------------------------------- tunnel, TLS

    def _open_tunnel(self, data: bytes) -> None:
        """First bytes inside a CONNECT tunnel: TLS, plain HTTP, or something to refuse."""
        assert self.tunnel is not None
        if data[0] == _TLS_HANDSHAKE:
            context = self.server.contexts.for_host_or_none(self.tunnel[0])
            if context is None:
                self.abort()
                return
            self.tls = TLSTunnel(context)
            self._scheme = "https"
            self.http = H1Connection(max_body=self.server.max_body)
            self._enter(Layer.TLS)
            data = self._decrypt(data)
        elif looks_like_http(data):
            self.http = H1Connection(max_body=self.server.max_body)
            self._enter(Layer.PLAIN)  # the scheme stays http
        else:
            self.server.replayer.refuse_raw(self.tunnel)
            self.abort()
            return
        if data:
            self.http.receive_data(data)
        self._serve()

    def _decrypt(self, data: bytes) -> bytes:
        """The plaintext in ``data``; the handshake's answers are sent on the way."""
        tls = self.tls
        assert tls is not None
        try:
            plain, out = tls.receive(data)
        except TLSFailedError as exc:
            self._write(tls.pending())  # the alert that says why
            if exc.handshake:
                self._handshake_failed(exc.reason)
            else:
                logger.info("replay: TLS error from a client of %s: %s", self.tunnel, exc.reason)
            self.abort()
            return b""
        if out:  # the handshake's records (nothing, once it is done)
            self._write(out)
        if tls.peer_closed:
            self.http.receive_eof()
        return plain

    def _handshake_failed(self, reason: str) -> None:
        host, port = self.tunnel or ("?", 0)
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

    def _write(self, ciphertext: bytes) -> None:
        if ciphertext and self.transport is not None and self.layer is not Layer.CLOSED:
            self.transport.write(ciphertext)

    def _send(self, data: bytes | memoryview) -> None:
        if self.layer is Layer.CLOSED or self.layer is Layer.LINGER or self.transport is None:
            return
        self._moved += 1
        tls = self.tls
        self.transport.write(data if tls is None else tls.send(data))

    def _close(self, *, linger: bool = True) -> None:
        """Close after what was written (with TLS, after a close_notify). A client that may
        still be sending gets ``LINGER`` seconds to read the answer before it is reset."""
        transport = self.transport
        if self.layer not in _SERVING or transport is None:
            if self.layer is Layer.TUNNEL:
                self.abort()
            return
        if self.tls is not None:
            self._write(self.tls.close())
        if linger and self.http.may_still_send and transport.can_write_eof():
            self._enter(Layer.LINGER)
            transport.write_eof()
            transport.resume_reading()
            self._linger = asyncio.get_running_loop().call_later(LINGER, self.abort)
            return
        self._enter(Layer.CLOSED)
        transport.close()

    # ---------------------------------------------------------------------------- requests

    def _malformed(self, exc: HTTPParseError) -> None:
        """A request that is not HTTP/1.1, or too large to read: answer and close."""
        http = self.http
        replayer = self.server.replayer
        if isinstance(exc, BodyTooLargeError):  # a request, refused: in the books
            lookup = Lookup(None, None, str(exc), INVALID_REQUEST, status=413)
            refused = replayer.decide(lookup, method=exc.head.method, range_header=None)
            assert isinstance(refused, Refusal)  # no key: never a hit
            answer = refused.answer
            self._send(http.refuse(answer.status, answer.headers, refused.text))
        else:
            reason = INVALID_REQUEST
            if self.tunnel is not None and http.requests == 0:
                replayer.refuse_not_http(self.tunnel, str(exc))  # the tunnel's first bytes
                reason = NOT_HTTP
            self._send(http.refuse_malformed(exc, reason))
        self._close()

    def _request(self, head: RequestHead, body: bytes) -> None:
        server = self.server
        http = self.http
        if head.method == "CONNECT":
            self._connect(head)
            return
        sni = self._sni
        if not self._sni_known and self.tls is not None:
            sni = self._sni = server.contexts.server_name(self.tls.session)
            self._sni_known = True
        known = server.lookup(
            head, self._scheme, self.tunnel, body, sni=sni, intercepted=self.intercepted
        )
        values = head.by_name.get  # (head.get, without a call per header: a hit's hot path)
        ranges, upgrades = values("range"), values("upgrade")
        plain = ranges is None and http.takes_prepared
        prepared = known.prepared
        if prepared is not None and plain and upgrades is None:
            hit, whole = prepared
            server.replayer.served(hit)  # decided when it was prepared
            http.sent_prepared()
            self._send(whole)
            return
        range_header = ranges[0] if ranges else None
        decision = server.replayer.decide(
            known.lookup,
            method=head.method,
            websocket=upgrades is not None and upgrades[0].lower() == "websocket",
            range_header=range_header,
        )
        if not isinstance(decision, Hit):
            self._write_answer(head, decision.answer, decision.text)
            return
        fetch = decision.fetch
        if fetch.size <= SMALL_BODY:
            cached = server.blobs.cached(fetch.digest)
            if cached is not None and len(cached) == fetch.size:
                if plain:  # no Range: the whole body
                    answer = decision.answer
                    whole = answer_bytes(
                        answer.status, answer.reason, answer.headers, _body(head, answer, cached)
                    )
                    server.prepare(known, decision, whole)
                    server.replayer.served(decision)
                    http.sent_prepared()
                    self._send(whole)
                    return
                self._write_answer(head, decision.answer, cached, served=decision)
                return
        self.task = asyncio.get_running_loop().create_task(self._answer_slowly(head, decision))
        self.task.add_done_callback(self._slow_done)

    def _connect(self, head: RequestHead) -> None:
        if self.layer is not Layer.PROXY:
            self._malformed(HTTPParseError("CONNECT inside a tunnel"))
            return
        try:
            host, port = split_authority(head.target)
        except HTTPParseError as exc:
            self._malformed(exc)
            return
        if port is None or not host:
            self._malformed(HTTPParseError("CONNECT without a port (host:port expected)"))
            return
        self.tunnel = (host, port)
        self._send(self.http.accept_tunnel())
        self._enter(Layer.TUNNEL)  # _pump hands on whatever followed in the same read

    def _write_answer(
        self, head: RequestHead, answer: Answer, body: bytes, *, served: Hit | None = None
    ) -> None:
        """Send a whole answer with ``body`` (the blob; cut to the answer's range).

        With ``served``, count that hit as served before sending it: like a refusal's count and
        log line, it is in the books by the time a client has it.
        """
        out = self.http.whole(
            answer.status, answer.reason, answer.headers, _body(head, answer, body)
        )
        if served is not None:
            self.server.replayer.served(served)
        self._send(out)

    def _slow_done(self, task: asyncio.Task[None]) -> None:
        self.task = None
        if not task.cancelled() and task.exception() is not None:
            logger.error("replay: answering failed: %s", task.exception())
            self.abort()
            return
        self._serve()

    async def _answer_slowly(self, head: RequestHead, hit: Hit) -> None:
        """First use of a blob (verify it), or a large body (stream it)."""
        replayer = self.server.replayer
        fetch, answer = hit.fetch, hit.answer
        refused = await replayer.verify(hit)
        if refused is not None:
            self._write_answer(head, refused.answer, refused.text)
            return
        if fetch.size <= SMALL_BODY or not answer.send_body:  # HEAD sends no body
            try:
                body = b""
                if answer.send_body:
                    body = await self.server.blobs.small_body(fetch.digest, fetch.size)
            except StoreError as exc:
                refused = replayer.store_failed(hit, exc)
                self._write_answer(head, refused.answer, refused.text)
                return
            self._write_answer(head, answer, body, served=hit)
            return
        start, end = answer.span(fetch.size)
        replayer.served(hit)
        self._send(self.http.respond(answer.status, answer.reason, answer.headers))
        try:
            await self._stream(fetch, start, end)
        except StoreError as exc:
            replayer.cut_off(hit, exc)
            self.abort()  # the client sees a body cut short, never a corrupt one whole
            return
        except ConnectionError:
            return
        self.http.end()

    async def _stream(self, fetch: Fetch, start: int, end: int) -> None:
        """Bytes ``start`` to ``end`` of the blob, read only as fast as the client takes them."""
        blobs = self.server.blobs
        with await blobs.open_verified(
            fetch.digest, fetch.size, start, end, chunk_size=STREAM_CHUNK
        ) as blob:
            parts = iter(blob)
            while (part := next(parts, None)) is not None:
                if self.layer is Layer.CLOSED:
                    raise ConnectionResetError("the client went away")
                self._send(part)
                del part  # the transport has what it did not send: hold no second copy
                if self.write_blocked and self._writable is not None:
                    await self._writable


def _body(head: RequestHead, answer: Answer, blob: bytes) -> bytes:
    """What of ``blob`` the answer to ``head`` carries (a refusal to a HEAD sends none either)."""
    if not answer.send_body or head.method == "HEAD":
        return b""
    start, end = answer.span(len(blob))
    return blob[start:end]  # the whole of a bytes object is itself, not a copy

"""One HTTP/1.1 connection, server side, without I/O: bytes in, events out (after h11).

The server feeds what it reads to :meth:`H1Connection.receive_data` (and the client's end of
stream to :meth:`~H1Connection.receive_eof`), then takes events from
:meth:`~H1Connection.next_event` until it returns :data:`NEED_DATA` (read more) or
:data:`PAUSED` (answer first): for a request with a body, :class:`Request` when its head is read
and :class:`EndOfMessage` with the whole body when it is complete; a request without one is
complete with its head, one :class:`EndOfMessage` (its head is :attr:`H1Connection.head`);
:class:`ConnectionClosed` once the client closed and nothing it sent is left. A request that is
not valid HTTP/1.1 raises :class:`~fetchproxy.replay.http1.HTTPParseError` — the only exception
any input can raise — and the server answers it with :meth:`~H1Connection.refuse`. Answers go
out through the methods that return their bytes (:meth:`~H1Connection.respond`,
:meth:`~H1Connection.whole`, :meth:`~H1Connection.send_continue`,
:meth:`~H1Connection.accept_tunnel`, ...).

Both sides' states, the events and every transition are the tables of
:mod:`fetchproxy.replay.h1state`: a step they do not hold is a bug in the caller and raises
:class:`LocalProtocolError`. Pipelined requests wait in the receive buffer until the answer
before them is done; keep-alive follows the request's version and ``Connection`` header; a
``CONNECT`` the server accepts switches the connection to a tunnel, and what the client sent
after it is the tunnel's (:meth:`~H1Connection.trailing_data`).
"""

from __future__ import annotations

import enum
from typing import Final

from fetchproxy.replay.decisions import REFUSED_HEADER
from fetchproxy.replay.h1state import (
    NEED_DATA,
    OUR_STEPS,
    PAUSED,
    READ_WHOLE,
    SETTLED,
    THEIR_STEPS,
    ConnectionClosed,
    EndOfMessage,
    Event,
    LocalProtocolError,
    Request,
    Sent,
    State,
    Wait,
)
from fetchproxy.replay.http1 import (
    MAX_BODY,
    MAX_HEAD,
    NO_BODY,
    BodyTooLargeError,
    Framing,
    HTTPParseError,
    RequestHead,
    body_framing,
    parse_head,
    parse_trailer,
    reason_phrase,
    response_head,
    with_connection,
)
from fetchproxy.replay.receivebuffer import ReceiveBuffer

MAX_CHUNK_LINE = 1024
"""The longest chunk-size line (size and extensions)."""
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_CONNECTED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"


_NO_BODY: Final = EndOfMessage(b"")
__all__ = [
    "NEED_DATA",
    "PAUSED",
    "ConnectionClosed",
    "EndOfMessage",
    "Event",
    "H1Connection",
    "LocalProtocolError",
    "Request",
    "State",
    "Wait",
    "answer_bytes",
]


class _Chunk(enum.Enum):
    SIZE = "size line"
    DATA = "data"
    DATA_END = "CRLF after the data"
    TRAILERS = "trailer section"


class _Body:
    """A request body as it arrives, ``length`` bytes or chunked, at most ``most`` bytes."""

    __slots__ = ("chunk", "head", "left", "most", "parts", "size", "trailers")

    def __init__(self, head: RequestHead, framing: Framing, most: int) -> None:
        self.head = head
        self.most = most
        self.parts: list[bytes] = []
        self.size = 0
        self.chunk = _Chunk.SIZE if framing.chunked else None
        self.left = framing.length
        """Bytes of the body (chunked: of the current chunk) still to come."""
        self.trailers = 0

    def read(self, buffer: ReceiveBuffer) -> bytes | None:
        """The whole body once it is here (consumed from ``buffer``), else None."""
        if self.chunk is None:
            return self._body() if self._take(buffer) else None
        return self._read_chunked(buffer)

    def _read_chunked(self, buffer: ReceiveBuffer) -> bytes | None:
        while True:
            if self.chunk is _Chunk.SIZE:
                line = buffer.maybe_extract_line(MAX_CHUNK_LINE, "chunk size line")
                if line is None:
                    return None
                self.left = _chunk_size(line)
                if self.size + self.left > self.most:
                    raise BodyTooLargeError(self.head, None, self.most)
                self.chunk = _Chunk.DATA if self.left else _Chunk.TRAILERS
            elif self.chunk is _Chunk.DATA:
                if not self._take(buffer):
                    return None
                self.chunk = _Chunk.DATA_END
            elif self.chunk is _Chunk.DATA_END:
                if len(buffer) < 2:
                    return None
                if buffer.maybe_extract(2) != b"\r\n":
                    raise HTTPParseError("chunk not followed by CRLF")
                self.chunk = _Chunk.SIZE
            else:
                return self._body() if self._read_trailers(buffer) else None

    def _read_trailers(self, buffer: ReceiveBuffer) -> bool:
        """Read the trailer section (checked, then dropped); whether all of it is read."""
        while True:
            line = buffer.maybe_extract_line(MAX_HEAD, "trailer line")
            if line is None:
                if len(buffer) + self.trailers > MAX_HEAD:
                    raise HTTPParseError("chunked trailers too large", 431)
                return False
            if not line:
                return True
            self.trailers += len(line) + 2
            if self.trailers > MAX_HEAD:
                raise HTTPParseError("chunked trailers too large", 431)
            parse_trailer(line)

    def _take(self, buffer: ReceiveBuffer) -> bool:
        """Take what is here of the ``left`` bytes; whether all of them are taken."""
        while self.left:
            piece = buffer.maybe_extract(self.left)
            if piece is None:
                return False
            self.parts.append(piece)
            self.left -= len(piece)
            self.size += len(piece)
        return True

    def _body(self) -> bytes:
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _chunk_size(line: bytes) -> int:
    size, _, extensions = line.partition(b";")
    size = size.rstrip(b" \t")
    if not 0 < len(size) <= 15 or size.strip(b"0123456789abcdefABCDEF"):
        raise HTTPParseError("invalid chunk size line")
    if b"\r" in extensions:
        raise HTTPParseError("a bare CR in a chunk size line")
    return int(size, 16)


def answer_bytes(
    status: int,
    reason: str,
    headers: tuple[tuple[str, str], ...],
    body: bytes | memoryview = b"",
    *,
    version: str = "HTTP/1.1",
    keep_alive: bool = True,
) -> bytes:
    """An answer's bytes: head (with what it needs to say about keep-alive) and ``body``."""
    headers = with_connection(headers, version=version, keep_alive=keep_alive)
    out = response_head(version, status, reason, headers)
    return out + body if body else out


class H1Connection:
    """The server's side of one HTTP/1.1 connection (or of HTTP inside a ``CONNECT`` tunnel).

    ``max_body`` is the largest request body read (413 past it).
    """

    def __init__(self, *, max_body: int = MAX_BODY) -> None:
        self.their_state = State.IDLE
        self.our_state = State.IDLE
        self.keep_alive = True
        """False once either side said the connection closes after this request."""
        self.head: RequestHead | None = None
        """The head of the request being read or answered."""
        self.requests = 0
        """Requests read whole so far."""
        self.max_body = max_body
        self._buffer = ReceiveBuffer()
        self._eof = False
        self._body: _Body | None = None
        self._continue = False
        """The client waits for ``100 Continue`` before it sends the body."""

    # -------------------------------------------------------------------------------- input

    def receive_data(self, data: bytes) -> None:
        """Bytes the client sent."""
        self._buffer.append(data)

    def receive_eof(self) -> None:
        """The client closed its side: what it sent is all there will be."""
        self._eof = True

    @property
    def buffered(self) -> int:
        """Bytes received and not parsed yet (pipelined requests, or a body arriving)."""
        return len(self._buffer)

    @property
    def may_still_send(self) -> bool:
        """Whether the client may be sending bytes no one will read: it was cut off
        mid-request, or sent more than was answered."""
        return not self._eof and (
            self.their_state in (State.SEND_BODY, State.ERROR) or len(self._buffer) > 0
        )

    def next_event(self) -> Event | Wait:
        """The next event from what was received, or why there is none.

        Raises :class:`~fetchproxy.replay.http1.HTTPParseError` (or its
        :class:`~fetchproxy.replay.http1.BodyTooLargeError`) for what is not HTTP/1.1; the
        client's state is then ERROR, and the server should :meth:`refuse` it.
        """
        state = self.their_state
        try:
            if state is State.IDLE:
                if self.our_state is not State.IDLE:
                    return PAUSED
                return self._read_head()
            if state is State.SEND_BODY:
                return self._read_body()
        except HTTPParseError:
            self.their_state = State.ERROR
            self.keep_alive = False
            self._continue = False
            raise
        if state is State.CLOSED:
            return ConnectionClosed()
        if state is State.ERROR:
            raise HTTPParseError("the request before was not HTTP/1.1")
        if state is State.MUST_CLOSE and self._eof:
            self._step_theirs(ConnectionClosed)
            return ConnectionClosed()
        return PAUSED  # DONE: answer first; MUST_CLOSE, SWITCHED: nothing more to read

    def _read_head(self) -> Event | Wait:
        buffer = self._buffer
        raw = buffer.maybe_extract_head(MAX_HEAD)
        if raw is None:
            if not self._eof:
                return NEED_DATA
            if len(buffer):
                raise HTTPParseError("the client closed the connection within a request head")
            event = ConnectionClosed()
            self._step_theirs(ConnectionClosed)
            return event
        head = parse_head(raw)
        self.head = head
        framing = NO_BODY if head.method == "CONNECT" else body_framing(head, self.max_body)
        self.keep_alive = self.keep_alive and head.keep_alive
        if framing is NO_BODY:  # the head is the whole request: both steps at once
            self._body = None
            self._continue = False
            self.requests += 1
            self.their_state, self.our_state = READ_WHOLE[self.keep_alive]
            return _NO_BODY
        self._body = _Body(head, framing, self.max_body)
        self._continue = head.expects_continue
        self._step_theirs(Request)
        return Request(head)

    def _read_body(self) -> Event | Wait:
        body = b""
        reader = self._body
        if reader is not None:
            before = len(self._buffer)
            found = reader.read(self._buffer)
            if len(self._buffer) != before:
                self._continue = False  # it sends the body without waiting
            if found is None:
                if self._eof:
                    raise HTTPParseError("the client closed the connection within a request body")
                return NEED_DATA
            body = found
            self._body = None
        self.requests += 1
        self._step_theirs(EndOfMessage)
        return EndOfMessage(body) if body else _NO_BODY

    # ------------------------------------------------------------------------------- output

    @property
    def client_waits_for_continue(self) -> bool:
        """Whether the client holds its body back until it is told ``100 Continue``."""
        return self._continue and self.our_state is State.SEND_RESPONSE

    def send_continue(self) -> bytes:
        """``100 Continue``, for a client that waits for it (see
        :attr:`client_waits_for_continue`)."""
        self._step_ours(Sent.CONTINUE)
        self._continue = False
        return _CONTINUE

    def respond(self, status: int, reason: str, headers: tuple[tuple[str, str], ...]) -> bytes:
        """The head of the answer, its body to follow (then :meth:`end`)."""
        out = answer_bytes(
            status, reason, headers, version=self._version, keep_alive=self.keep_alive
        )
        self._step_ours(Sent.HEAD)
        return out

    def end(self) -> None:
        """The body of the answer begun with :meth:`respond` is all sent."""
        self._step_ours(Sent.END)

    def whole(
        self,
        status: int,
        reason: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes | memoryview = b"",
    ) -> bytes:
        """A whole answer: head and ``body``."""
        out = answer_bytes(
            status, reason, headers, body, version=self._version, keep_alive=self.keep_alive
        )
        self._step_ours(Sent.WHOLE)
        return out

    @property
    def takes_prepared(self) -> bool:
        """Whether an answer made by :func:`answer_bytes` with its defaults (HTTP/1.1, kept
        alive) fits this request as it is: see :meth:`sent_prepared`."""
        head = self.head
        return self.keep_alive and (head is None or head.version == "HTTP/1.1")

    def sent_prepared(self) -> None:
        """A whole answer made earlier by :func:`answer_bytes` was sent (when
        :attr:`takes_prepared`)."""
        self._step_ours(Sent.WHOLE)

    def accept_tunnel(self) -> bytes:
        """The ``200`` to a ``CONNECT``: the connection becomes a tunnel (see
        :meth:`trailing_data`)."""
        if self.head is None or self.head.method != "CONNECT":
            raise LocalProtocolError("only a CONNECT request opens a tunnel")
        self._step_ours(Sent.TUNNEL)
        return _CONNECTED

    def trailing_data(self) -> bytes:
        """What the client sent after the ``CONNECT`` it was answered: the tunnel's bytes."""
        if self.their_state is not State.SWITCHED:
            raise LocalProtocolError("no tunnel was accepted")
        return self._buffer.extract_all()

    def refuse(self, status: int, headers: tuple[tuple[str, str], ...], body: bytes = b"") -> bytes:
        """An answer after which the connection closes, whatever state the request is in
        (one that is not HTTP/1.1, or cut off: a body over the limit); nothing more is read."""
        self.keep_alive = False
        out = answer_bytes(status, reason_phrase(status), headers, body, keep_alive=False)
        self._step_ours(Sent.REFUSAL)
        self._buffer.clear()
        return out

    def refuse_malformed(self, error: HTTPParseError, reason: str) -> bytes:
        """The answer to a request that is not HTTP/1.1: ``error``'s status, the
        ``x-fetchproxy-refused`` header naming ``reason``, and a line saying what was wrong."""
        text = f"fetchproxy: bad request: {error}\n".encode()
        headers = (
            (REFUSED_HEADER, reason),
            ("content-type", "text/plain; charset=utf-8"),
            ("content-length", str(len(text))),
        )
        return self.refuse(error.status, headers, text)

    @property
    def _version(self) -> str:
        head = self.head
        return head.version if head is not None else "HTTP/1.1"

    # ---------------------------------------------------------------------------- the tables

    def _step_theirs(self, event: type[Event]) -> None:
        try:
            theirs = THEIR_STEPS[self.their_state][event]
        except KeyError:
            raise LocalProtocolError(
                f"the client cannot send {event.__name__} in state {self.their_state.value}"
            ) from None
        self.their_state, self.our_state = SETTLED[theirs, self.our_state, self.keep_alive]

    def _step_ours(self, sent: Sent) -> None:
        try:
            ours = OUR_STEPS[self.our_state][sent]
        except KeyError:
            raise LocalProtocolError(
                f"cannot send {sent.value} in state {self.our_state.value}"
            ) from None
        self.their_state, self.our_state = SETTLED[self.their_state, ours, self.keep_alive]

"""A local HTTPS origin for end-to-end tests: its own CA, 127.0.0.1 on port 0, HTTP/1.1 and 2.

:func:`make_pki` writes a CA and a server certificate (``cryptography``) for ``127.0.0.1`` and
``localhost``. :class:`Origin` serves a :data:`Site` (path -> handler) in threads: HTTP/1.1
with ``h11`` and, when the client offers it in ALPN, HTTP/2 with ``h2``. It counts every TCP
connection it accepts, so a replay test can assert that the origin saw none, and keeps every
request it answered. :func:`standard_site` is the content the proxy tests fetch.
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import hashlib
import itertools
import json
import random
import selectors
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Self, overload

import h2.config  # type: ignore[import-untyped,unused-ignore]
import h2.connection  # type: ignore[import-untyped,unused-ignore]
import h2.events  # type: ignore[import-untyped,unused-ignore]
import h2.exceptions  # type: ignore[import-untyped,unused-ignore]
import h11

from fetchproxy.ca import generate_ca

# ----------------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class OriginPKI:
    """Where the origin's CA certificate and its server certificate and key are."""

    ca_cert: Path
    cert: Path
    key: Path


def make_pki(directory: Path, names: Sequence[str] = ("127.0.0.1", "localhost")) -> OriginPKI:
    """A fresh CA and a certificate it signed for ``names`` (127.0.0.1 and localhost), as PEM.

    Made with fetchproxy's own CA code, a different CA from the proxy's: the origin's.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = generate_ca("fetchproxy test origin CA", lifetime=datetime.timedelta(days=2))
    cert_pem, key_pem = ca.issue_server_certificate(list(names))
    pki = OriginPKI(
        ca_cert=directory / "origin-ca.pem",
        cert=directory / "origin-cert.pem",
        key=directory / "origin-key.pem",
    )
    pki.ca_cert.write_bytes(ca.cert_pem)
    pki.cert.write_bytes(cert_pem)
    pki.key.write_bytes(key_pem)
    return pki


# ---------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Request:
    """A request the origin received."""

    protocol: str  # "HTTP/1.1" or "HTTP/2"
    method: str
    target: str  # path and query, as sent
    headers: tuple[tuple[str, str], ...]  # names lowercase
    body: bytes
    base_url: str  # "https://127.0.0.1:PORT"

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    @overload
    def header(self, name: str) -> str | None: ...
    @overload
    def header(self, name: str, default: str) -> str: ...
    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (lowercase), or ``default``."""
        return next((value for key, value in self.headers if key == name), default)


Body = bytes | Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class Reply:
    """An answer: ``body`` is bytes or a factory of a chunk stream (give its content-length)."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: Body = b""
    chunked: bool = False
    """No content-length: chunked transfer coding on HTTP/1.1, a bare DATA stream on HTTP/2."""

    def chunks(self) -> Iterator[bytes]:
        if isinstance(self.body, bytes):
            if self.body:
                yield self.body
        else:
            yield from self.body()

    def head(self) -> list[tuple[str, str]]:
        """The header fields to send, with the framing ones added."""
        headers = list(self.headers)
        names = {name.lower() for name, _ in headers}
        if self.chunked:
            return headers
        if "content-length" not in names:
            if not isinstance(self.body, bytes):
                raise ValueError("a streamed body needs its content-length header")
            headers.append(("content-length", str(len(self.body))))
        return headers


Handler = Callable[[Request], Reply]
Site = Mapping[str, Handler]
"""Handlers by path (without the query)."""

NOT_FOUND = Reply(404, (("content-type", "text/plain"),), b"no such file on the test origin\n")

# ------------------------------------------------------------------------------------------ server


@dataclass
class _Counters:
    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: int = 0
    requests: list[Request] = field(default_factory=list)


class Origin:
    """The test origin; ``with Origin(site, pki) as origin: ... origin.url("/x")``."""

    def __init__(
        self,
        site: Site,
        pki: OriginPKI,
        *,
        http2: bool = True,
        address: tuple[str, int] = ("127.0.0.1", 0),
        name: str | None = None,
    ) -> None:
        """``address``: where it listens (IPv4 or IPv6); ``name``: the host its URLs name (the
        address's)."""
        self.site = site
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(pki.cert, pki.key)
        self._context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(address)
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        shown = f"{name or address[0]}" + ("" if self.port == 443 else f":{self.port}")
        self.base_url = f"https://{shown}"
        self._counters = _Counters()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept_loop, name="origin", daemon=True)
        self.errors: list[BaseException] = []

    def url(self, target: str) -> str:
        return self.base_url + target

    @property
    def connections(self) -> int:
        """TCP connections accepted since the start or the last :meth:`reset`."""
        with self._counters.lock:
            return self._counters.connections

    @property
    def requests(self) -> list[Request]:
        """Requests answered since the start or the last :meth:`reset`."""
        with self._counters.lock:
            return list(self._counters.requests)

    def reset(self) -> None:
        with self._counters.lock:
            self._counters.connections = 0
            self._counters.requests.clear()

    def __enter__(self) -> Self:
        self._acceptor.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stopping.set()
        if self._acceptor.is_alive():
            self._acceptor.join()
        self._listener.close()
        with self._counters.lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=10)

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if not selector.select(timeout=0.05):
                    continue
                try:
                    sock, _ = self._listener.accept()
                except OSError:
                    continue
                with self._counters.lock:
                    self._counters.connections += 1
                    self._sockets.add(sock)
                thread = threading.Thread(
                    target=self._connection, args=(sock,), name="origin-conn", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _connection(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(30)
            with self._context.wrap_socket(raw, server_side=True) as tls:
                with self._counters.lock:
                    self._sockets.add(tls)
                if tls.selected_alpn_protocol() == "h2":
                    self._serve_h2(tls)
                else:
                    self._serve_h11(tls)
        except (OSError, h11.ProtocolError, h2.exceptions.ProtocolError):
            pass  # clients (and the proxy) hang up as they like
        except Exception as exc:  # noqa: BLE001 -- a bug in a handler: tests read origin.errors
            self.errors.append(exc)
        finally:
            raw.close()

    def _answer(self, request: Request) -> Reply:
        with self._counters.lock:
            self._counters.requests.append(request)
        handler = self.site.get(request.path)
        return NOT_FOUND if handler is None else handler(request)

    # ------------------------------------------------------------------------------ HTTP/1.1

    def _serve_h11(self, sock: ssl.SSLSocket) -> None:
        conn = h11.Connection(h11.SERVER)

        def next_event() -> object:
            while (event := conn.next_event()) is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            return event

        def send(event: h11.Event) -> None:
            sock.sendall(conn.send(event) or b"")

        while True:
            event = next_event()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed, or a client that stopped mid-request
            body = bytearray()
            while not isinstance(part := next_event(), h11.EndOfMessage):
                if not isinstance(part, h11.Data):
                    return
                body += part.data
            request = Request(
                protocol="HTTP/1.1",
                method=event.method.decode(),
                target=event.target.decode(),
                headers=tuple((n.decode().lower(), v.decode()) for n, v in event.headers),
                body=bytes(body),
                base_url=self.base_url,
            )
            reply = self._answer(request)
            headers = reply.head()
            if reply.chunked:
                headers.append(("transfer-encoding", "chunked"))
            response = h11.Response(
                status_code=reply.status, headers=headers, reason=HTTPStatus(reply.status).phrase
            )
            send(response)
            if request.method != "HEAD":
                for chunk in reply.chunks():
                    send(h11.Data(data=chunk))
            send(h11.EndOfMessage())
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()

    # -------------------------------------------------------------------------------- HTTP/2

    def _serve_h2(self, sock: ssl.SSLSocket) -> None:
        conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        incoming: dict[int, tuple[list[tuple[str, str]], bytearray]] = {}
        outgoing: dict[int, _H2Body] = {}
        while True:
            _pump(conn, outgoing)
            sock.sendall(conn.data_to_send())
            data = sock.recv(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    incoming[event.stream_id] = (_text_headers(event.headers), bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    incoming[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    headers, body = incoming.pop(event.stream_id)
                    self._answer_h2(conn, event.stream_id, headers, bytes(body), outgoing)
                elif isinstance(event, h2.events.StreamReset):
                    outgoing.pop(event.stream_id, None)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    sock.sendall(conn.data_to_send())
                    return

    def _answer_h2(
        self,
        conn: h2.connection.H2Connection,
        stream_id: int,
        fields: list[tuple[str, str]],
        body: bytes,
        outgoing: dict[int, _H2Body],
    ) -> None:
        pseudo = {name: value for name, value in fields if name.startswith(":")}
        request = Request(
            protocol="HTTP/2",
            method=pseudo[":method"],
            target=pseudo[":path"],
            headers=tuple((n.lower(), v) for n, v in fields if not n.startswith(":")),
            body=body,
            base_url=self.base_url,
        )
        reply = self._answer(request)
        headers = [(":status", str(reply.status)), *reply.head()]
        bodiless = request.method == "HEAD"
        conn.send_headers(stream_id, headers, end_stream=bodiless)
        if not bodiless:
            outgoing[stream_id] = _H2Body(reply.chunks())


class _H2Body:
    """A reply body waiting for HTTP/2 flow-control credit."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.pending = b""
        self.finished = False

    def take(self, limit: int) -> bytes | None:
        """Up to ``limit`` bytes; ``None`` once the body is exhausted."""
        while not self.pending:
            chunk = next(self.chunks, None)
            if chunk is None:
                return None
            self.pending = chunk
        piece, self.pending = self.pending[:limit], self.pending[limit:]
        return piece


def _pump(conn: h2.connection.H2Connection, outgoing: dict[int, _H2Body]) -> None:
    """Send as much of every waiting body as the flow-control windows allow."""
    for stream_id in list(outgoing):
        body = outgoing[stream_id]
        while True:
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                break
            piece = body.take(window)
            if piece is None:
                conn.end_stream(stream_id)
                del outgoing[stream_id]
                break
            conn.send_data(stream_id, piece)


# ------------------------------------------------------------------------------------- the content

SMALL = b"a small file from the test origin\n" * 30
MEDIUM = random.Random(3).randbytes(1024 * 1024 + 17)  # larger than replay's in-memory limit
GZIP_TEXT = b"gzip-encoded text, compressed by the origin whatever the client asked for\n" * 50
GZIP_WIRE = gzip.compress(GZIP_TEXT, mtime=0)
CHUNKS = [b"first chunk\n", b"second chunk, a little longer\n", b"third\n" * 500]
JSON_BODY = b'{"representation": "json"}\n'
HTML_BODY = b"<!doctype html><p>representation: html</p>\n"
SECRET_TOKEN = "tok-5ecret-query-value-8c1f"
SECRET_AUTH = "Bearer auth-5ecret-header-value-77ad"
SECRET_BODY = b"the protected file (no secrets in here)\n"
LARGE_SIZE = 200 * 1000 * 1000
_BLOCK = random.Random(7).randbytes(1 << 20)


def large_chunks(size: int = LARGE_SIZE) -> Iterator[bytes]:
    """``size`` deterministic pseudo-random bytes, made on the fly in 1 MiB chunks."""
    sent, index = 0, 0
    while sent < size:
        shift = (index * 4099) % len(_BLOCK)
        chunk = (_BLOCK[shift:] + _BLOCK[:shift])[: size - sent]
        yield chunk
        sent += len(chunk)
        index += 1


def upload_pack_body(*wants: str, agent: str = "git/2.39.5") -> bytes:
    """A protocol v2 ``git-upload-pack`` fetch request (pkt-lines)."""
    packets = [b"command=fetch\n", f"agent={agent}\n".encode(), b"object-format=sha1\n", None]
    packets += [f"want {want}\n".encode() for want in wants]
    packets += [b"done\n"]
    out = bytearray()
    for packet in packets:
        out += b"0001" if packet is None else b"%04x" % (len(packet) + 4) + packet
    return bytes(out + b"0000")


def upload_pack_answer(body: bytes) -> bytes:
    """What the origin answers to an upload-pack request: depends on the wanted objects."""
    lines = body.decode().replace("0001", "\n").split("\n")
    wants = sorted(line.split()[1] for line in lines if "want " in line)
    return ("packfile for " + ",".join(wants) + "\n").encode()


def _text(status: int, body: bytes, *extra: tuple[str, str]) -> Reply:
    return Reply(status, (("content-type", "text/plain"), *extra), body)


def _negotiated(request: Request) -> Reply:
    accept = request.header("accept") or ""
    if "application/json" in accept:
        return Reply(200, (("content-type", "application/json"), ("vary", "accept")), JSON_BODY)
    return Reply(200, (("content-type", "text/html"), ("vary", "accept")), HTML_BODY)


def _protected(request: Request) -> Reply:
    if request.header("authorization") != SECRET_AUTH or f"token={SECRET_TOKEN}" not in (
        request.query
    ):
        return _text(401, b"unauthorized\n")
    return Reply(
        200,
        (("content-type", "application/octet-stream"), ("set-cookie", "session=cookie-5ecret")),
        SECRET_BODY,
    )


def _upload_pack(request: Request) -> Reply:
    if request.method != "POST":
        return _text(405, b"POST only\n")
    return Reply(
        200,
        (("content-type", "application/x-git-upload-pack-result"),),
        upload_pack_answer(request.body),
    )


def echo_answer(body: bytes) -> bytes:
    """What ``POST /api/echo`` answers: depends on every byte of the body."""
    return f"POST of {len(body)} bytes: {hashlib.sha256(body).hexdigest()}\n".encode()


def _echo_post(request: Request) -> Reply:
    return _text(200, echo_answer(request.body))


def _seen_encoding(request: Request) -> Reply:
    return _text(200, json.dumps({"accept-encoding": request.header("accept-encoding")}).encode())


def standard_site() -> dict[str, Handler]:
    """Everything the proxy tests fetch (the speed targets' list)."""
    counter = itertools.count(1)
    return {
        "/small.txt": lambda _: _text(200, SMALL),
        "/medium.bin": lambda _: Reply(
            200,
            (
                ("content-type", "application/octet-stream"),
                ("content-disposition", 'attachment; filename="medium.bin"'),
                ("etag", '"medium-1"'),
                ("accept-ranges", "bytes"),
            ),
            MEDIUM,
        ),
        "/large.bin": lambda _: Reply(
            200,
            (("content-type", "application/octet-stream"), ("content-length", str(LARGE_SIZE))),
            large_chunks,
        ),
        "/redirect/start": lambda _: _text(302, b"", ("location", "/redirect/middle")),
        "/redirect/middle": lambda r: _text(
            301, b"moved\n", ("location", r.base_url + "/redirect/end")
        ),
        "/redirect/end": lambda _: _text(200, b"the end of the redirect chain\n"),
        "/gzip.txt": lambda _: Reply(
            200, (("content-type", "text/plain"), ("content-encoding", "gzip")), GZIP_WIRE
        ),
        "/chunked.txt": lambda _: Reply(
            200, (("content-type", "text/plain"),), lambda: iter(CHUNKS), chunked=True
        ),
        "/negotiate": _negotiated,
        "/protected.bin": _protected,
        "/repo.git/git-upload-pack": _upload_pack,
        "/api/echo": _echo_post,
        "/seen-encoding": _seen_encoding,
        "/unstable": lambda _: _text(200, f"answer number {next(counter)}\n".encode()),
        "/server-error": lambda _: _text(503, b"try again later\n"),
    }


def _text_headers(headers: object) -> list[tuple[str, str]]:
    """h2's received headers, as text (decoded already with ``header_encoding``; h2 4.4 types
    them as bytes or text, 4.1 leaves them untyped)."""
    assert isinstance(headers, list)
    return [
        (k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
        for k, v in headers
    ]

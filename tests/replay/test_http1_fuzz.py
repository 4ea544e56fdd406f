"""Fuzzing the HTTP/1.1 connection and the server around it with hypothesis.

Three properties: no input makes the connection raise anything but its own
:class:`~fetchproxy.replay.http1.HTTPParseError`; a request stream split at any byte parses
exactly as it does whole; and the real server answers whatever it is sent with answers whose
errors carry ``x-fetchproxy-refused``, then closes — never a hang, never a traceback.

The examples are derandomized (the same ones every run, as CI needs). For a longer run with
fresh random examples, say how many::

    FETCHPROXY_FUZZ_EXAMPLES=20000 python -m pytest tests/replay/test_http1_fuzz.py
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fetchproxy.replay.connection import (
    ConnectionClosed,
    EndOfMessage,
    H1Connection,
    Request,
    State,
    Wait,
)
from fetchproxy.replay.http1 import HTTPParseError, RequestHead
from tests.replay.serving import HOST, SMALL, WAIT, Client, ServerThread, get, make_files

_LONG = int(os.environ.get("FETCHPROXY_FUZZ_EXAMPLES", "0") or 0)
FUZZ = settings(
    derandomize=not _LONG,
    max_examples=_LONG or 300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SPLITS = settings(FUZZ, max_examples=_LONG or 60)
SERVED = settings(FUZZ, max_examples=_LONG // 10 or 120)


# --- requests, nearly right ----------------------------------------------------------------

LATIN = st.text(st.characters(max_codepoint=0xFF), max_size=12)


def mostly(values: list[str]) -> st.SearchStrategy[str]:
    """One of ``values`` nine times in ten, else any short Latin-1 text."""
    return st.integers(0, 9).flatmap(lambda n: LATIN if n == 0 else st.sampled_from(values))


METHODS = mostly(["GET", "GET", "POST", "POST", "HEAD", "CONNECT", "get", "G(T", "PUT"])
TARGETS = mostly(
    [
        f"http://{HOST}/plain",
        f"http://{HOST}/plain",
        f"http://{HOST}/a?token=x",
        "/a",
        f"{HOST}:8080",
        f"{HOST}:443",
        "*",
        "/a\x00",
        "ftp://h/x",
        "",
    ]
)
VERSIONS = mostly(["HTTP/1.1"] * 6 + ["HTTP/1.0", "HTTP/1.0", "HTTP/2.0", "http/1.1", ""])
EOLS = st.sampled_from(["\r\n", "\n", "\r", "\r\r\n", "\n\r"])
NAMES = mostly(
    [
        "Host",
        "Host",
        "Content-Length",
        "Content-Length",
        "Transfer-Encoding",
        "Transfer-Encoding",
        "Connection",
        "Expect",
        "Upgrade",
        "Range",
        "X",
        "Bad Name",
        " Host",
        "Host ",
        "",
    ]
)
VALUES = mostly(
    [
        HOST,
        HOST,
        "0",
        "5",
        "12",
        "2, 2",
        "chunked",
        "chunked",
        "gzip, chunked",
        "chunked, gzip",
        "close",
        "keep-alive",
        "100-continue",
        "websocket",
        "-1",
        "99999999999",
        "bytes=0-3",
        "a\x00b",
        "",
    ]
)


@st.composite
def chunked(draw: st.DrawFn) -> bytes:
    """A chunked body, right or subtly wrong."""
    out = b""
    for piece in draw(st.lists(st.binary(max_size=20), max_size=3)):
        size = draw(st.sampled_from([len(piece), len(piece), len(piece) + 1, 0]))
        out += b"%x" % size + draw(st.sampled_from([b"", b";ext=1", b" ", b";a\rb"]))
        out += draw(st.sampled_from([b"\r\n"] * 5 + [b"\n"])) + piece + b"\r\n"
    out += b"0\r\n" + draw(st.sampled_from([b"", b"X-T: 1\r\n", b"bad\r\n"])) + b"\r\n"
    return out


@st.composite
def request(draw: st.DrawFn) -> bytes:
    """A request: most have every line end in CRLF, the others any line ends."""
    clean = draw(st.integers(0, 9)) < 8

    def eol() -> str:
        return "\r\n" if clean else draw(EOLS)

    line = f"{draw(METHODS)} {draw(TARGETS)} {draw(VERSIONS)}"
    headers = draw(st.lists(st.tuples(NAMES, VALUES), max_size=5))
    text = line + eol() + "".join(f"{n}: {v}{eol()}" for n, v in headers) + eol()
    body = draw(st.one_of(st.just(b""), st.binary(max_size=30), chunked()))
    return text.encode("latin-1") + body


@st.composite
def valid_request(draw: st.DrawFn) -> bytes:
    """A well-formed request, with a body framed by length or chunked, or none."""
    method = draw(st.sampled_from(["GET", "POST", "HEAD", "DELETE"]))
    target = draw(st.sampled_from([f"http://{HOST}/plain", "/a?b=c", f"http://{HOST}/x"]))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]))
    extra = st.tuples(st.sampled_from(["Accept", "X-A", "Expect"]), VALUES)
    headers = [("Host", HOST), *draw(st.lists(extra, max_size=2))]
    headers = [(n, v) for n, v in headers if "\x00" not in v and "\r" not in v and "\n" not in v]
    body = draw(st.binary(max_size=40))
    framing = draw(st.sampled_from(["none", "length", "chunked"]))
    if framing == "length" or (framing == "chunked" and version == "HTTP/1.0"):
        headers.append(("Content-Length", str(len(body))))
        wire = body
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        cut = draw(st.integers(0, len(body)))
        wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:cut], body[cut:]) if p)
        wire += b"0\r\n\r\n"
    else:
        wire = b""
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return (head + "\r\n").encode("latin-1") + wire


REQUESTS = st.lists(request(), min_size=1, max_size=3).map(b"".join)
VALID = st.lists(valid_request(), min_size=1, max_size=3).map(b"".join)
STREAMS = VALID | REQUESTS | st.binary(max_size=300)


# --- the connection alone ------------------------------------------------------------------


def drive(pieces: list[bytes], *, eof: bool) -> list[object]:
    """Feed ``pieces`` to a connection as the server would, answering every request; what
    came out: events (as plain values), the error, and the final states."""
    connection = H1Connection(max_body=256)
    out: list[object] = []
    queue: list[bytes | None] = [*pieces, None] if eof else list(pieces)
    for _ in range(10_000):  # every loop takes an event or a piece: it must end well before
        try:
            event = connection.next_event()
        except HTTPParseError as exc:
            out.append(("error", exc.status, str(exc)))
            connection.refuse_malformed(exc, "invalid-request")
            break
        if event is Wait.NEED_DATA and queue:
            if connection.client_waits_for_continue:
                connection.send_continue()
            piece = queue.pop(0)
            if piece is None:
                connection.receive_eof()
            else:
                connection.receive_data(piece)
            continue
        out.append(seen(event, connection.head))
        if not isinstance(event, Request | EndOfMessage):
            break  # closed, paused, or waiting for what never comes
        if isinstance(event, EndOfMessage):
            if connection.head is not None and connection.head.method == "CONNECT":
                connection.accept_tunnel()  # the rest is the tunnel's, however it came
                rest = b"".join(p for p in queue if p is not None)
                out.append(("tunnel", connection.trailing_data() + rest))
                break
            connection.whole(200, "OK", (("content-length", "0"),))
    else:
        pytest.fail("the connection never came to rest")
    out.append((connection.their_state, connection.our_state))
    return out


def seen(
    event: Request | EndOfMessage | ConnectionClosed | Wait, head: RequestHead | None
) -> object:
    """An event as a plain value; a request's end with its head (a request without a body is
    that one event)."""
    if isinstance(event, Request):
        head = event.head
        return ("request", head.method, head.target, head.version, head.headers)
    if isinstance(event, EndOfMessage):
        assert head is not None
        return ("end", head.method, head.target, head.version, head.headers, event.body)
    return "closed" if isinstance(event, ConnectionClosed) else event.value


@FUZZ
@given(STREAMS, st.data())
def test_no_input_raises_anything_but_the_parser_s_own_error(
    data: bytes, draw: st.DataObject
) -> None:
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=4)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    result = drive([p for p in pieces if p], eof=draw.draw(st.booleans()))
    final = result[-1]
    assert isinstance(final, tuple)
    assert all(isinstance(state, State) for state in final)


@SPLITS
@given(STREAMS)
def test_a_stream_split_at_any_byte_parses_as_it_does_whole(data: bytes) -> None:
    whole = drive([data], eof=True)
    for cut in range(1, len(data)):
        assert drive([data[:cut], data[cut:]], eof=True) == whole, cut
    if len(data) <= 120:
        assert drive([data[i : i + 1] for i in range(len(data))], eof=True) == whole


def test_the_splits_of_a_known_stream_agree() -> None:
    """One stream by hand, so that the property above is known to look at real requests."""
    data = (
        b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    whole = drive([data], eof=True)
    assert [e[0] for e in whole[:-1] if isinstance(e, tuple)] == ["request", "end", "end"]
    assert ("end", "POST", "/p", "HTTP/1.1", [("Transfer-Encoding", "chunked")], b"abc") in whole
    assert ("end", "GET", "/a", "HTTP/1.1", [("Host", "x")], b"") in whole  # all head
    for cut in range(1, len(data)):
        assert drive([data[:cut], data[cut:]], eof=True) == whole


# --- through the server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    running = ServerThread(make_files(tmp_path_factory.mktemp("fuzz"))).start()
    yield running
    running.stop()


_HEAD_RE = re.compile(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n")


def answers(raw: bytes) -> list[tuple[int, dict[str, str]]]:
    """The status and headers of every answer head in ``raw`` (a HEAD's answer has a length
    and no body, so heads are found where they are rather than skipped to by length)."""
    assert not raw or raw.startswith(b"HTTP/1."), raw[:200]
    found = []
    for match in _HEAD_RE.finditer(raw):
        lines = match.group(2).decode("latin-1").split("\r\n")[:-1]
        found.append((int(match.group(1)), dict(line.lower().split(": ", 1) for line in lines)))
    assert found or not raw, raw[:200]
    return found


@SERVED
@given(VALID | REQUESTS, st.booleans())
def test_the_server_answers_anything_with_refusals_that_say_so_then_closes(
    server: ServerThread, caplog: pytest.LogCaptureFixture, data: bytes, tunnel: bool
) -> None:
    caplog.clear()
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        if tunnel:  # HTTP inside a tunnel, without TLS
            sock.sendall(f"CONNECT {HOST}:8080 HTTP/1.1\r\n\r\n".encode())
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # all there is: the server must answer, or close
        raw = b""
        try:
            while chunk := sock.recv(65536):  # times out (fails) if the server hangs
                raw += chunk
        except ConnectionResetError:
            pass  # a close too (a tunnel of something that is not HTTP is reset)
    if tunnel and raw.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n"):
        raw = raw.removeprefix(b"HTTP/1.1 200 Connection established\r\n\r\n")
    for status, headers in answers(raw):
        if status >= 400:
            assert "x-fetchproxy-refused" in headers, (status, headers)
    internal = [r for r in caplog.records if r.exc_info or "internal error" in r.getMessage()]
    assert internal == []
    client = Client(server)  # and it still serves
    client.send(get(f"http://{HOST}/plain", host=HOST))
    assert client.answer()[2] == SMALL
    client.sock.close()
    server.clients.remove(client)


def test_a_malformed_request_through_the_server_is_refused_with_the_header(
    server: ServerThread,
) -> None:
    """One by hand, so that the property above is known to see refusals at all."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
        sock.sendall(b"GET http://files.example/plain HTTP/1.1\r\nBad Name: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    ((status, headers),) = answers(raw)
    assert (status, headers["x-fetchproxy-refused"]) == (400, "invalid-request")

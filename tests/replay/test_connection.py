"""The HTTP/1.1 connection without I/O: bytes in, events out, one state table.

Every test here feeds bytes to :class:`H1Connection` (and its :class:`ReceiveBuffer`)
directly and reads the events and states; no socket, no clock.
"""

from __future__ import annotations

import pytest

from fetchproxy.replay.connection import (
    ConnectionClosed,
    EndOfMessage,
    Event,
    H1Connection,
    LocalProtocolError,
    Request,
    State,
    Wait,
    answer_bytes,
)
from fetchproxy.replay.h1state import JOINT_STEPS, OUR_STEPS, SETTLED, THEIR_STEPS
from fetchproxy.replay.http1 import MAX_HEAD, BodyTooLargeError, HTTPParseError
from fetchproxy.replay.receivebuffer import ReceiveBuffer

GET = b"GET /a HTTP/1.1\r\nHost: files.example\r\n\r\n"
OK = ("200", (("content-length", "2"),))


def events(connection: H1Connection) -> list[Event | Wait]:
    """Events until the connection needs data or pauses (that last, too)."""
    got: list[Event | Wait] = []
    while True:
        event = connection.next_event()
        got.append(event)
        if isinstance(event, Wait | ConnectionClosed):
            return got


def kinds(got: list[Event | Wait]) -> list[str]:
    return [e.value if isinstance(e, Wait) else type(e).__name__ for e in got]


def answer(connection: H1Connection, body: bytes = b"ok") -> bytes:
    return connection.whole(200, "OK", (("content-length", str(len(body))),), body)


def waits(connection: H1Connection) -> bool:
    return connection.client_waits_for_continue


def states(connection: H1Connection) -> tuple[State, State]:
    return connection.their_state, connection.our_state


# --- the receive buffer --------------------------------------------------------------------


def test_the_buffer_hands_out_a_head_once_whole_and_keeps_what_follows() -> None:
    buffer = ReceiveBuffer()
    buffer.append(b"GET / HTTP/1.1\r\nHo")
    assert buffer.maybe_extract_head(MAX_HEAD) is None
    buffer.append(b"st: x\r\n\r\nNEXT")
    assert buffer.maybe_extract_head(MAX_HEAD) == b"GET / HTTP/1.1\r\nHost: x"
    assert len(buffer) == 4
    assert buffer.maybe_extract(10) == b"NEXT"
    assert not buffer


def test_bytes_that_arrive_whole_are_not_copied() -> None:
    buffer = ReceiveBuffer()
    data = b"hello world"
    buffer.append(data)
    assert buffer.maybe_extract(100) is data


def test_a_head_split_at_every_byte_is_found_with_one_scan_per_piece() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    buffer = ReceiveBuffer()
    found = None
    for byte in head:
        assert found is None
        buffer.append(bytes([byte]))
        found = buffer.maybe_extract_head(MAX_HEAD)
    assert found == head[:-4]


def test_a_bare_lf_is_refused_as_soon_as_it_arrives() -> None:
    buffer = ReceiveBuffer()
    buffer.append(b"GET / HTTP/1.1\n")  # no end of head: it would wait forever
    with pytest.raises(HTTPParseError, match="a bare LF"):
        buffer.maybe_extract_head(MAX_HEAD)
    lines = ReceiveBuffer()
    lines.append(b"5\n")
    with pytest.raises(HTTPParseError, match="a bare LF in a chunk size line"):
        lines.maybe_extract_line(1024, "chunk size line")


def test_a_head_too_long_is_431_whether_it_ended_or_not() -> None:
    for data in (b"GET /" + b"a" * MAX_HEAD, b"GET /" + b"a" * MAX_HEAD + b"\r\n\r\n"):
        buffer = ReceiveBuffer()
        buffer.append(data)
        with pytest.raises(HTTPParseError) as caught:
            buffer.maybe_extract_head(MAX_HEAD)
        assert caught.value.status == 431


# --- requests in, events out ---------------------------------------------------------------


def test_a_request_without_a_body_is_its_end_then_a_pause_until_it_is_answered() -> None:
    connection = H1Connection()
    connection.receive_data(GET + GET)
    got = events(connection)
    assert kinds(got) == ["EndOfMessage", "paused"]  # the head is the whole request
    assert isinstance(got[0], EndOfMessage)
    assert got[0].body == b""
    assert connection.head is not None
    assert (connection.head.method, connection.head.target) == ("GET", "/a")
    assert states(connection) == (State.DONE, State.SEND_RESPONSE)
    assert answer(connection).startswith(b"HTTP/1.1 200 OK\r\n")
    assert states(connection) == (State.IDLE, State.IDLE)  # kept alive: the next cycle
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]  # pipelined
    answer(connection)
    assert kinds(events(connection)) == ["need data"]
    assert connection.requests == 2


def test_a_head_with_an_empty_line_before_it_is_read() -> None:
    connection = H1Connection()
    connection.receive_data(b"\r\n" + GET)
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]


@pytest.mark.parametrize(
    ("request_bytes", "keep_alive"),
    [
        (GET, True),
        (b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n", False),
        (b"GET /a HTTP/1.0\r\n\r\n", False),
        (b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
    ],
)
def test_keep_alive_by_version_and_connection_header(
    request_bytes: bytes, *, keep_alive: bool
) -> None:
    connection = H1Connection()
    connection.receive_data(request_bytes + GET)
    events(connection)
    out = answer(connection)
    assert connection.keep_alive is keep_alive
    if keep_alive:
        assert states(connection) == (State.IDLE, State.IDLE)
        assert b"connection: close" not in out
    else:
        assert states(connection) == (State.MUST_CLOSE, State.MUST_CLOSE)
        assert out.endswith(b"connection: close\r\n\r\nok")
        assert kinds(events(connection)) == ["paused"]  # what was pipelined is never read
    if request_bytes.startswith(b"GET /a HTTP/1.0") and keep_alive:
        assert out.startswith(b"HTTP/1.0 200 OK\r\n")
        assert b"connection: keep-alive" in out


def test_a_content_length_body_arrives_in_pieces_and_comes_out_whole() -> None:
    connection = H1Connection()
    connection.receive_data(b"POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\n01234")
    assert kinds(events(connection)) == ["Request", "need data"]
    assert states(connection) == (State.SEND_BODY, State.SEND_RESPONSE)
    connection.receive_data(b"56789GET")
    got = events(connection)
    assert kinds(got) == ["EndOfMessage", "paused"]
    end = got[0]
    assert isinstance(end, EndOfMessage)
    assert end.body == b"0123456789"
    assert connection.buffered == 3  # the next request's first bytes wait


def test_a_chunked_body_is_decoded_however_it_is_split() -> None:
    wire = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
    head = b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    for cut in range(len(wire) + 1):
        connection = H1Connection()
        connection.receive_data(head + wire[:cut])
        got = events(connection)
        connection.receive_data(wire[cut:])
        got += events(connection)
        ends = [e for e in got if isinstance(e, EndOfMessage)]
        assert [e.body for e in ends] == [b"Wikipedia"], cut


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"zz\r\n", "invalid chunk size line"),
        (b"2\r\nabX\r\n", "chunk not followed by CRLF"),
        (b"2 x\r\n", "invalid chunk size line"),
        (b"-2\r\n", "invalid chunk size line"),
        (b"2;a\rb\r\n", "a bare CR in a chunk size line"),
        (b"1\r\nx\r\n0\r\nbad trailer\r\n\r\n", "a trailer line is not a header line"),
        (b"1" * 2000, "chunk size line too long"),
    ],
)
def test_broken_chunked_bodies_are_errors(wire: bytes, message: str) -> None:
    connection = H1Connection()
    connection.receive_data(b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + wire)
    assert isinstance(connection.next_event(), Request)
    with pytest.raises(HTTPParseError, match=message):
        connection.next_event()
    assert connection.their_state is State.ERROR


def test_endless_trailers_are_431() -> None:
    connection = H1Connection()
    connection.receive_data(
        b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
        + b"x-t: aaaaaaaa\r\n" * 5000
    )
    connection.next_event()
    with pytest.raises(HTTPParseError, match="chunked trailers too large") as caught:
        connection.next_event()
    assert caught.value.status == 431


def test_a_body_over_the_limit_is_refused_before_it_is_read() -> None:
    connection = H1Connection(max_body=100)
    connection.receive_data(b"POST /p HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
    with pytest.raises(BodyTooLargeError) as caught:
        connection.next_event()
    assert caught.value.head.target == "/p"
    chunked = H1Connection(max_body=100)
    chunked.receive_data(b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunked.receive_data(b"40\r\n" + b"x" * 64 + b"\r\n")
    assert kinds(events(chunked)) == ["Request", "need data"]
    chunked.receive_data(b"40\r\n")  # this chunk would pass the limit: refused unread
    with pytest.raises(BodyTooLargeError):
        chunked.next_event()
    out = chunked.refuse(413, (("content-length", "0"),))
    assert out.startswith(b"HTTP/1.1 413 ")
    assert chunked.our_state is State.MUST_CLOSE
    assert chunked.may_still_send  # the client may still be uploading: linger before closing


def test_100_continue_is_sent_once_and_only_to_a_client_that_waits() -> None:
    connection = H1Connection()
    connection.receive_data(
        b"POST /p HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    )
    assert kinds(events(connection)) == ["Request", "need data"]
    assert waits(connection)
    assert connection.send_continue() == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert not waits(connection)
    connection.receive_data(b"abc")
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]
    eager = H1Connection()  # sends the body without waiting: no 100 Continue
    eager.receive_data(b"POST /p HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\na")
    events(eager)
    assert not waits(eager)


def test_connect_switches_to_a_tunnel_and_hands_on_what_followed() -> None:
    connection = H1Connection()
    connection.receive_data(b"CONNECT files.example:443 HTTP/1.1\r\n\r\n\x16\x03\x01rest")
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]
    assert connection.accept_tunnel() == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert states(connection) == (State.SWITCHED, State.SWITCHED)
    assert connection.trailing_data() == b"\x16\x03\x01rest"
    assert kinds(events(connection)) == ["paused"]
    old = H1Connection()  # HTTP/1.0 clients CONNECT too, without keep-alive
    old.receive_data(b"CONNECT files.example:443 HTTP/1.0\r\n\r\n")
    events(old)
    old.accept_tunnel()
    assert states(old) == (State.SWITCHED, State.SWITCHED)


def test_only_a_connect_opens_a_tunnel() -> None:
    connection = H1Connection()
    connection.receive_data(GET)
    events(connection)
    with pytest.raises(LocalProtocolError, match="only a CONNECT"):
        connection.accept_tunnel()
    with pytest.raises(LocalProtocolError, match="no tunnel"):
        connection.trailing_data()


def test_the_client_closing_after_its_requests_gets_them_answered_then_closed() -> None:
    connection = H1Connection()
    connection.receive_data(GET + GET)
    connection.receive_eof()
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]
    answer(connection)
    assert kinds(events(connection)) == ["EndOfMessage", "paused"]
    answer(connection)
    assert kinds(events(connection)) == ["ConnectionClosed"]
    assert states(connection) == (State.CLOSED, State.MUST_CLOSE)


def test_the_client_closing_in_the_middle_of_a_request_is_an_error() -> None:
    for partial in (b"GET /a HTTP/1.1\r\nHo", b"POST /p HTTP/1.1\r\nContent-Length: 9\r\n\r\nab"):
        connection = H1Connection()
        connection.receive_data(partial)
        connection.receive_eof()
        with pytest.raises(HTTPParseError, match="the client closed the connection within"):
            events(connection)


def test_a_malformed_request_is_refused_with_the_header_and_closes() -> None:
    connection = H1Connection()
    connection.receive_data(b"GET /a HTTP/1.1\r\nbad header\r\n\r\n" + GET)
    with pytest.raises(HTTPParseError) as caught:
        connection.next_event()
    out = connection.refuse_malformed(caught.value, "invalid-request")
    assert out == (
        b"HTTP/1.1 400 Bad Request\r\nx-fetchproxy-refused: invalid-request\r\n"
        b"content-type: text/plain; charset=utf-8\r\ncontent-length: 73\r\n"
        b"connection: close\r\n\r\n"
        b"fetchproxy: bad request: line 2 of the request head is not a header line\n"
    )
    assert connection.our_state is State.MUST_CLOSE
    assert connection.buffered == 0  # what followed is never read
    with pytest.raises(HTTPParseError):
        connection.next_event()


def test_steps_the_table_does_not_hold_are_the_server_s_bugs() -> None:
    connection = H1Connection()
    with pytest.raises(LocalProtocolError, match="cannot send an answer's head in state idle"):
        connection.respond(200, "OK", ())
    connection.receive_data(GET)
    events(connection)
    connection.respond(200, "OK", (("content-length", "0"),))
    with pytest.raises(LocalProtocolError, match="cannot send a whole answer"):
        answer(connection)
    connection.end()
    assert states(connection) == (State.IDLE, State.IDLE)


def test_a_prepared_answer_fits_only_a_kept_alive_http_1_1_request() -> None:
    connection = H1Connection()
    connection.receive_data(GET)
    events(connection)
    assert connection.takes_prepared
    prepared = answer_bytes(200, "OK", (("content-length", "2"),), b"ok")
    other = H1Connection()
    other.receive_data(GET)
    events(other)
    assert answer(other) == prepared  # the same bytes the connection would make
    connection.sent_prepared()
    assert states(connection) == (State.IDLE, State.IDLE)
    closing = H1Connection()
    closing.receive_data(b"GET /a HTTP/1.0\r\n\r\n")
    events(closing)
    assert not closing.takes_prepared


def test_the_tables_use_every_state_and_have_no_dead_end() -> None:
    """From the first state, every step the tables allow (with and without keep-alive) leads
    to states the connection can leave again, unless it is closing; and every state is met."""
    closing = {State.MUST_CLOSE, State.CLOSED, State.SWITCHED, State.ERROR}
    seen: set[tuple[tuple[State, State], bool]] = set()
    stepped_to: set[tuple[State, State]] = set()
    todo = [((State.IDLE, State.IDLE), alive) for alive in (True, False)]
    while todo:
        (theirs, ours), alive = todo.pop()
        if ((theirs, ours), alive) in seen:
            continue
        seen.add(((theirs, ours), alive))
        raw = [(after, ours) for after in THEIR_STEPS[theirs].values()]
        raw += [(theirs, after) for after in OUR_STEPS.get(ours, {}).values()]
        stepped_to.update(raw)
        nexts = [SETTLED[pair[0], pair[1], alive] for pair in raw]
        nexts = [n for n in nexts if n != (theirs, ours)]
        if not {theirs, ours} & closing:
            assert nexts, f"stuck in {theirs.value}/{ours.value}"
        todo += [(n, alive) for n in nexts]
    met = {state for (pair, _) in seen for state in pair}
    assert met == set(State) - {State.ERROR}  # ERROR is set by a parse error, not a step
    assert ((State.IDLE, State.IDLE), True) in seen
    assert set(JOINT_STEPS) <= stepped_to  # every joint rule is one some step needs

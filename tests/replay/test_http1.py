"""HTTP/1.1 messages for the direct replay server: request heads, body framing, answer heads."""

from __future__ import annotations

import http

import pytest

from fetchproxy.replay.http1 import (
    MAX_BODY,
    NO_BODY,
    BodyTooLargeError,
    Framing,
    HTTPParseError,
    RequestHead,
    body_framing,
    looks_like_http,
    parse_head,
    parse_trailer,
    reason_phrase,
    response_head,
    shown_target,
    split_authority,
    with_connection,
)


def head(*headers: tuple[str, str], target: str = "/a", version: str = "HTTP/1.1") -> RequestHead:
    return RequestHead.of("GET", target, version, list(headers))


def test_a_head_is_split_into_method_target_version_and_headers_in_order() -> None:
    parsed = parse_head(
        b"GET /pkg/a.tar.gz?x=1 HTTP/1.1\r\nHost: files.example\r\nAccept:  */*  \r\n"
        b"accept: text/html"
    )
    assert (parsed.method, parsed.target, parsed.version) == (
        "GET",
        "/pkg/a.tar.gz?x=1",
        "HTTP/1.1",
    )
    assert parsed.headers == [("Host", "files.example"), ("Accept", "*/*"), ("accept", "text/html")]
    assert parsed.get("accept") == "*/*"
    assert parsed.values("accept") == ["*/*", "text/html"]
    assert parsed.get("range") is None
    built = head(("Accept", "*/*"), ("ACCEPT", "x"))  # made by hand: looked up alike
    assert built.values("accept") == ["*/*", "x"]


REQUEST_LINE = "not an HTTP/1.1 request line ({} fields; METHOD SP TARGET SP HTTP/1.1 expected)"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GET /a", 400, REQUEST_LINE.format(2)),
        (b"GET  /a?token=SECRET HTTP/1.1", 400, REQUEST_LINE.format(4)),
        (b"G(T /a HTTP/1.1", 400, REQUEST_LINE.format(3)),
        (b"GET /a HTTP/2.0", 505, "unsupported HTTP version HTTP/2.0 (HTTP/1.1 or 1.0 expected)"),
        (b"GET /a HTTP/1.1\r\nno colon", 400, "line 2 of the request head is not a header line"),
        (
            b"GET /a HTTP/1.1\r\nA: 1\r\n folded: x",
            400,
            "line 3 of the request head is not a header line",
        ),
        (
            b"GET /a HTTP/1.1\r\nAuthorization Bearer SECRET",
            400,
            "line 2 of the request head is not a header line",
        ),
        (b"GET /a HTTP/1.1\r\nHost : x", 400, "line 2 of the request head is not a header line"),
        (
            b"GET /a HTTP/1.1\nHost: x",
            400,
            "a bare LF in the request head (lines end in CRLF)",
        ),
        (b"GET /a HTTP/1.1\r\nHost: x\ry: z", 400, "a bare CR in the request head"),
        (
            b"GET /a HTTP/1.1\r\nHost: x\r\nX: a\0b",
            400,
            "line 3 of the request head has a NUL in its value",
        ),
        (b"GET /a\x01b HTTP/1.1", 400, "a control character in the request target"),
        (b"GET /a\tb HTTP/1.1", 400, "a control character in the request target"),
        # a bare CR or LF is named before what it breaks (two readers split such a head
        # into different lines), wherever it is
        (b"GET /a\nb HTTP/1.1", 400, "a bare LF in the request head (lines end in CRLF)"),
        (b"GET /a\rb HTTP/1.1", 400, "a bare CR in the request head"),
        (b"GET /a HTTP/1.1\r\nHo\nst: x", 400, "a bare LF in the request head (lines end in CRLF)"),
        (b"GET /a HTTP/2.0\r\nHost: x\r", 400, "a bare CR in the request head"),
        (b"GET /a HTTP/1.1\r\nX: \0\r\nY: \r", 400, "a bare CR in the request head"),
    ],
)
def test_what_is_not_http_1_1_is_an_error_with_a_status(
    raw: bytes, status: int, message: str
) -> None:
    with pytest.raises(HTTPParseError) as caught:
        parse_head(raw)
    assert (caught.value.status, str(caught.value)) == (status, message)


def test_keep_alive_follows_the_version_and_the_connection_header() -> None:
    assert head().keep_alive
    assert not head(("Connection", "keep-alive, Close")).keep_alive
    assert not head(version="HTTP/1.0").keep_alive
    assert head(("connection", "Keep-Alive"), version="HTTP/1.0").keep_alive
    assert not head(("connection", "keep-alive, close"), version="HTTP/1.0").keep_alive


def test_expect_100_continue_is_honoured_for_http_1_1_only() -> None:
    assert head(("Expect", "100-Continue")).expects_continue
    assert not head(("Expect", "100-continue"), version="HTTP/1.0").expects_continue
    assert not head(("Expect", "something-else")).expects_continue


def test_body_framing() -> None:
    assert body_framing(head()) is NO_BODY
    assert body_framing(head(("Content-Length", "0"))) is NO_BODY
    assert body_framing(head(("Content-Length", "12"), ("content-length", "12"))) == Framing(12)
    assert body_framing(head(("Transfer-Encoding", "chunked"))) == Framing(chunked=True)
    for bad, status in [
        ((("Content-Length", "12"), ("Content-Length", "13")), 400),
        ((("Content-Length", "-1"),), 400),
        ((("Content-Length", str(MAX_BODY + 1)),), 413),
        ((("Transfer-Encoding", "gzip, chunked"),), 501),
        ((("Transfer-Encoding", "chunked, gzip"),), 400),  # the length cannot be known
        ((("Transfer-Encoding", ""),), 400),
    ]:
        with pytest.raises(HTTPParseError) as caught:
            body_framing(head(*bad))
        assert caught.value.status == status, bad


def test_a_body_over_the_limit_is_refused_by_its_length_and_the_limit_is_said() -> None:
    with pytest.raises(BodyTooLargeError) as caught:
        body_framing(head(("Content-Length", "2000000"), target="/up?token=SECRET"))
    assert str(caught.value) == (
        "GET /up?…: request body of 2,000,000 bytes over the 1,048,576-byte limit"
    )
    assert caught.value.status == 413
    assert body_framing(head(("Content-Length", "2000000")), most=2_000_000) == Framing(2_000_000)


def test_transfer_encoding_in_http_1_0_is_refused() -> None:
    chunked = head(("Transfer-Encoding", "chunked"), version="HTTP/1.0")
    with pytest.raises(HTTPParseError, match=r"transfer-encoding in an HTTP/1\.0 request"):
        body_framing(chunked)


def test_framing_that_mitmproxy_refuses_is_refused() -> None:
    both = head(("Transfer-Encoding", "chunked"), ("Content-Length", "3"))
    with pytest.raises(HTTPParseError, match="both transfer-encoding and content-length"):
        body_framing(both)
    for digits in ("²", "١٢", "+3", " "):  # str.isdigit() would take the first two
        with pytest.raises(HTTPParseError, match="invalid content-length"):
            body_framing(head(("Content-Length", digits)))
    for authority in ("files.example:²³", "[::1]:²"):
        with pytest.raises(HTTPParseError, match="invalid authority"):
            split_authority(authority)


def test_trailer_lines_follow_the_rules_of_header_lines() -> None:
    assert parse_trailer(b"X-Checksum: abc") == ("X-Checksum", "abc")
    for bad in (b"no colon", b"X : y", b"X: a\rb", b"X: a\0b"):
        with pytest.raises(HTTPParseError):
            parse_trailer(bad)


def test_authorities() -> None:
    assert split_authority("files.example:443") == ("files.example", 443)
    assert split_authority("files.example") == ("files.example", None)
    assert split_authority("[::1]:8443") == ("::1", 8443)
    assert split_authority("[::1]") == ("::1", None)
    for bad in ("files.example:x", ":443", "[::1", "[::1]x", "a:b:443"):
        with pytest.raises(HTTPParseError, match="invalid authority"):
            split_authority(bad)


def test_looks_like_http() -> None:
    assert looks_like_http(b"GET / HTTP/1.1\r\n")
    assert looks_like_http(b"OPTIONS")
    assert not looks_like_http(b"\x16\x03\x01")
    assert not looks_like_http(b"SSH-2.0-OpenSSH_9.2\r\n")
    assert not looks_like_http(b"get / HTTP/1.1")


def test_a_response_head_keeps_header_order_and_bytes() -> None:
    assert response_head("HTTP/1.1", 200, "OK", (("b", "1"), ("a", "é"))) == (
        "HTTP/1.1 200 OK\r\nb: 1\r\na: é\r\n\r\n".encode()
    )


def test_a_header_value_with_a_line_break_is_never_written() -> None:
    with pytest.raises(ValueError, match="has a line break or NUL"):
        response_head("HTTP/1.1", 200, "OK", (("content-type", "text/plain\r\nSet-Cookie: x"),))


@pytest.mark.parametrize("status", [400, 413, 431, 501, 505])
def test_error_statuses_carry_their_standard_reason_phrase(status: int) -> None:
    assert reason_phrase(status) == http.HTTPStatus(status).phrase
    assert reason_phrase(status) not in ("", "Error")
    assert reason_phrase(299) == ""


def test_what_an_answer_says_about_the_connection() -> None:
    headers = (("content-length", "0"),)
    assert with_connection(headers, version="HTTP/1.1", keep_alive=True) == headers
    assert with_connection(headers, version="HTTP/1.1", keep_alive=False)[-1] == (
        "connection",
        "close",
    )
    assert with_connection(headers, version="HTTP/1.0", keep_alive=True)[-1] == (
        "connection",
        "keep-alive",
    )


def test_messages_never_quote_a_query_or_a_header_value() -> None:
    assert shown_target("/repo.tar.gz?token=SECRET") == "/repo.tar.gz?…"
    assert shown_target("/" + "a" * 200) == "/" + "a" * 99 + "?…"
    for raw in (
        b"GET /a HTTP/1.1\r\nAuthorization Bearer SECRET",
        b"GET /a HTTP/1.1\r\nX-Token: SECRET\0",
        b"GET /a?token=SECRET HTTP/3",
    ):
        with pytest.raises(HTTPParseError) as caught:
            parse_head(raw)
        assert "SECRET" not in str(caught.value)

"""HTTP/1.1 request parsing for the direct replay server: heads, bodies, the request's URL."""

from __future__ import annotations

import bz2
import gzip
import importlib
import zlib

import pytest

from fetchproxy.replay.http1 import (
    MAX_BODY,
    NO_BODY,
    ChunkedBody,
    Framing,
    HTTPParseError,
    RequestHead,
    body_framing,
    decode_content,
    looks_like_http,
    parse_head,
    read_chunked,
    request_url,
    response_head,
    shown_target,
    split_authority,
)


def head(*headers: tuple[str, str], target: str = "/a", version: str = "HTTP/1.1") -> RequestHead:
    return RequestHead("GET", target, version, list(headers))


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


REQUEST_LINE = "not an HTTP/1.1 request line ({} fields; METHOD SP TARGET SP HTTP/1.1 expected)"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GET /a", 400, REQUEST_LINE.format(2)),
        (b"GET  /a?token=SECRET HTTP/1.1", 400, REQUEST_LINE.format(4)),
        (b"G(T /a HTTP/1.1", 400, REQUEST_LINE.format(3)),
        (b"GET /a HTTP/2.0", 505, "unsupported HTTP version 'HTTP/2.0'"),
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
    ]:
        with pytest.raises(HTTPParseError) as caught:
            body_framing(head(*bad))
        assert caught.value.status == status


def test_chunked_bodies_are_decoded_once_complete() -> None:
    wire = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\nNEXT"
    assert read_chunked(wire, 0) == (b"Wikipedia", len(wire) - 4)
    for cut in range(len(wire) - 4):
        assert read_chunked(wire[:cut], 0) is None, cut
    with pytest.raises(HTTPParseError, match="invalid chunk size line"):
        read_chunked(b"zz\r\n", 0)
    with pytest.raises(HTTPParseError, match="chunk not followed by CRLF"):
        read_chunked(b"2\r\nabX\r\n", 0)


def test_request_bodies_lose_their_content_encoding_like_the_recorder_sees_them() -> None:
    body = b"0032want 1234\n" * 10
    assert decode_content(gzip.compress(body), "gzip") == body
    assert decode_content(zlib.compress(body), "deflate") == body
    assert decode_content(body, None) == body
    assert decode_content(b"not gzip", "gzip") == b"not gzip"  # as it came, like mitmproxy
    brotli = importlib.import_module("brotli")  # mitmproxy's dependency (it has no types)
    assert decode_content(brotli.compress(body), "br") == body
    assert decode_content(b"not brotli", "br") == b"not brotli"
    assert decode_content(body, "compress") == body  # not one mitmproxy decodes either


def test_zstd_request_bodies_are_decoded_with_what_mitmproxy_brings() -> None:
    body = b"0032want 1234\n" * 10
    for name in ("compression.zstd", "backports.zstd", "zstandard"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        wire = module.compress(body)
        break
    else:
        pytest.fail("no zstd module: mitmproxy depends on one")
    assert decode_content(wire, "zstd") == body


def test_authorities() -> None:
    assert split_authority("files.example:443") == ("files.example", 443)
    assert split_authority("files.example") == ("files.example", None)
    assert split_authority("[::1]:8443") == ("::1", 8443)
    assert split_authority("[::1]") == ("::1", None)
    for bad in ("files.example:x", ":443", "[::1", "[::1]x", "a:b:443"):
        with pytest.raises(HTTPParseError, match="invalid authority"):
            split_authority(bad)


def test_the_url_of_a_request_in_a_tunnel_takes_the_tunnel_port_and_the_host_header() -> None:
    tunnel = ("10.0.0.1", 8443)
    assert request_url(head(target="/p?q"), scheme="https", tunnel=tunnel) == (
        "https://10.0.0.1:8443/p?q",
        "/p?q",
    )
    named = head(("Host", "Files.Example:8443"), target="/p")
    assert request_url(named, scheme="https", tunnel=tunnel)[0] == "https://Files.Example:8443/p"
    v6 = head(("Host", "[::1]:8443"))
    assert request_url(v6, scheme="https", tunnel=tunnel)[0] == "https://[::1]:8443/a"


def test_the_url_of_a_proxy_request_is_its_absolute_target() -> None:
    absolute = head(target="http://files.example/p?q")
    assert request_url(absolute, scheme="http", tunnel=None) == (
        "http://files.example/p?q",
        "/p?q",
    )
    origin_form = head(("Host", "files.example:8080"), target="/p")  # as mitmproxy takes it
    assert request_url(origin_form, scheme="http", tunnel=None)[0] == "http://files.example:8080/p"
    bare = head(target="http://user@files.example:8080?q")
    assert request_url(bare, scheme="http", tunnel=None) == ("http://files.example:8080/?q", "/?q")
    for bad, message in [
        (
            head(target="/p"),
            "no absolute URL, CONNECT tunnel or Host header: the destination is unknown",
        ),
        (head(target="ftp://files.example/p"), "not an http(s) URL"),
        (head(target="files.example/p"), "not an absolute URL"),
    ]:
        with pytest.raises(HTTPParseError) as caught:
            request_url(bad, scheme="http", tunnel=None)
        assert str(caught.value).endswith(message)


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


def test_a_chunked_body_is_parsed_once_however_it_arrives() -> None:
    wire = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
    decoder = ChunkedBody(0)
    got = None
    for end in range(1, len(wire) + 1):
        got = decoder.feed(wire[:end])
        assert (got is None) == (end < len(wire)), end
    assert got == (b"Wikipedia", len(wire))
    endless = b"1\r\nx\r\n0\r\n" + b"x-t: aaaaaaaa\r\n" * 5000
    with pytest.raises(HTTPParseError, match="chunked trailers too large") as caught:
        ChunkedBody(0).feed(endless)
    assert caught.value.status == 431


def test_messages_never_quote_a_query_or_a_header_value() -> None:
    assert shown_target("/repo.tar.gz?token=SECRET") == "/repo.tar.gz?…"
    assert shown_target("/" + "a" * 200) == "/" + "a" * 99 + "?…"
    for bad in (head(target="/p?token=SECRET"), head(target="ftp://h/p?access_token=SECRET")):
        with pytest.raises(HTTPParseError) as caught:
            request_url(bad, scheme="http", tunnel=None)
        assert "SECRET" not in str(caught.value)


def test_the_host_header_names_host_and_port_as_mitmproxy_pretty_url_does() -> None:
    tunnel = ("files.example", 8443)
    assert request_url(head(("Host", "files.example")), scheme="https", tunnel=tunnel)[0] == (
        "https://files.example/a"  # the default port, not the tunnel's 8443; left out
    )
    assert request_url(head(("Host", "files.example:9999")), scheme="https", tunnel=tunnel)[0] == (
        "https://files.example:9999/a"
    )
    absolute = head(("Host", "other.example"), target="http://files.example:8080/a")
    assert request_url(absolute, scheme="http", tunnel=None)[0] == "http://other.example/a"


def test_request_bodies_are_decoded_by_mitmproxy_s_rules() -> None:
    body = b"0032want 1234\n" * 10
    assert decode_content(gzip.compress(body), "x-gzip") == gzip.compress(body)  # as mitmproxy
    assert decode_content(bz2.compress(body), "bz2") == body  # mitmproxy falls back to codecs
    assert decode_content(gzip.compress(body), "gzip, identity") == gzip.compress(body)


def test_a_header_value_with_a_line_break_is_never_written() -> None:
    with pytest.raises(ValueError, match="has a line break or NUL"):
        response_head("HTTP/1.1", 200, "OK", (("content-type", "text/plain\r\nSet-Cookie: x"),))

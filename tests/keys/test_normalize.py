"""Pins every rule of fetchproxy.normalize (docs/normalization.md) with tables and properties."""

from __future__ import annotations

import ipaddress
import itertools
import re
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fetchproxy.digest import digest_bytes
from fetchproxy.errors import FetchproxyError
from fetchproxy.keys.request import (
    SECRET_HEADERS,
    InvalidMethodError,
    RequestKey,
    normalize_accept,
    normalize_request,
)
from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS, InvalidURLError, normalize_url, redact_url

PROPERTIES = settings(derandomize=True, max_examples=300, deadline=None)

URL_CASES = [
    # scheme and host
    ("HTTP://EXAMPLE.ORG/", "http://example.org/"),
    ("HtTpS://Example.Org/Path/File.TXT", "https://example.org/Path/File.TXT"),
    ("http://example.org", "http://example.org/"),
    ("http://example.org?a=1", "http://example.org/?a=1"),
    ("http://example.org./", "http://example.org./"),
    ("http://my_host.internal/", "http://my_host.internal/"),
    ("http://alice:s3cret@example.org/", "http://example.org/"),
    ("http://alice@example.org/", "http://example.org/"),
    ("http://a@b@example.org/", "http://example.org/"),
    # ports
    ("http://example.org:80/", "http://example.org/"),
    ("https://example.org:443/", "https://example.org/"),
    ("http://example.org:443/", "http://example.org:443/"),
    ("https://example.org:80/", "https://example.org:80/"),
    ("http://example.org:8080/", "http://example.org:8080/"),
    ("http://example.org:/", "http://example.org/"),
    ("http://example.org:0080/", "http://example.org/"),
    ("http://example.org:08080/", "http://example.org:8080/"),
    ("http://example.org:65535/", "http://example.org:65535/"),
    # IDNA
    ("http://bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
    ("http://XN--BCHER-KVA.example/", "http://xn--bcher-kva.example/"),
    ("http://b%C3%BCcher.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--zca.example/", "http://xn--zca.example/"),
    ("http://例え.テスト/", "http://xn--r8jz45g.xn--zckzah/"),
    ("http://example。org/", "http://example.org/"),
    ("http://\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.org/", "http://example.org/"),
    ("http://exa%4Dple.org/", "http://exampl" + "e.org/"),
    # IP literals
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/"),
    ("http://[::1]:8080/", "http://[::1]:8080/"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("https://[::1]:443/x", "https://[::1]/x"),
    ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"),
    ("http://[2001:DB8:0:0:1:0:0:A]/", "http://[2001:db8::1:0:0:a]/"),
    ("http://[::ffff:7f00:1]/", "http://[::ffff:127.0.0.1]/"),
    ("http://[::FFFF:127.0.0.1]:8080/", "http://[::ffff:127.0.0.1]:8080/"),
    # dot segments (RFC 3986 5.2.4)
    ("http://h/a/./b/../c", "http://h/a/c"),
    ("http://h/a/b/c/./../../g", "http://h/a/g"),
    ("http://h/../a", "http://h/a"),
    ("http://h/a/..", "http://h/"),
    ("http://h/a/b/..", "http://h/a/"),
    ("http://h/a/b/.", "http://h/a/b/"),
    ("http://h/a/%2E%2e/b", "http://h/b"),
    ("http://h/a//b", "http://h/a//b"),
    ("http://h/a//../b", "http://h/a/b"),
    ("http://h/..a/.b/c.", "http://h/..a/.b/c."),
    # percent-encoding in the path
    ("http://h/%7Euser/%41%62%2d%5F%2E", "http://h/~user/Ab-_."),
    ("https://registry.npmjs.org/@scope%2fname", "https://registry.npmjs.org/@scope%2Fname"),
    ("https://registry.npmjs.org/@scope/name", "https://registry.npmjs.org/@scope/name"),
    ("http://h/a%2fb%3a%40%3b", "http://h/a%2Fb%3A%40%3B"),
    ("http://h/a;b=c,d:e@f!$&'()*+", "http://h/a;b=c,d:e@f!$&'()*+"),
    ("http://h/a b", "http://h/a%20b"),
    ("http://h/ä", "http://h/%C3%A4"),
    ("http://h/%c3%a4", "http://h/%C3%A4"),
    ("http://h/100%", "http://h/100%25"),
    ("http://h/%zz%4", "http://h/%25zz%254"),
    ('http://h/a|b{c}^`"<>', "http://h/a%7Cb%7Bc%7D%5E%60%22%3C%3E"),
    ("http://h/a\\b", "http://h/a%5Cb"),
    ("http://h/%FF", "http://h/%FF"),
    ("http://h/\udcff", "http://h/%FF"),  # a raw byte as mitmproxy decodes it (surrogateescape)
    ("http://h/a\nb\x7f", "http://h/a%0Ab%7F"),
    # fragment and empty query
    ("http://h/a#frag", "http://h/a"),
    ("http://h/a?b#c?d", "http://h/a?b"),
    ("http://h/a?", "http://h/a"),
    ("http://h/a?&&", "http://h/a"),
    ("http://h/a#", "http://h/a"),
    # query
    ("http://h/?b=2&a=1", "http://h/?a=1&b=2"),
    ("http://h/?a=2&b=1&a=1", "http://h/?a=2&a=1&b=1"),
    ("http://h/?a=1&a&a=", "http://h/?a=1&a&a="),
    ("http://h/?b&a=", "http://h/?a=&b"),
    ("http://h/?b=1&B=1&a=1", "http://h/?B=1&a=1&b=1"),
    ("http://h/?x=1&&y=2&", "http://h/?x=1&y=2"),
    ("http://h/?q=a+b", "http://h/?q=a+b"),
    ("http://h/?q=a%20b", "http://h/?q=a%20b"),
    ("http://h/?q=a%2bb", "http://h/?q=a%2Bb"),
    ("http://h/?q=%7e%41", "http://h/?q=~A"),
    ("http://h/?%61=1", "http://h/?a=1"),
    ("http://h/?a=b=c", "http://h/?a=b=c"),
    ("http://h/?a=%26%3d", "http://h/?a=%26%3D"),
    ("http://h/?q=x/y?z:@", "http://h/?q=x/y?z:@"),
    ("http://h/?q=ä b", "http://h/?q=%C3%A4%20b"),
    ("http://h/?=v&a", "http://h/?=v&a"),
    # secrets
    ("http://h/f?token=abc&a=1", "http://h/f?a=1"),
    ("http://h/f?token=abc", "http://h/f"),
    ("http://h/f?token", "http://h/f"),
    ("http://h/f?%74oken=abc", "http://h/f"),
    ("http://h/f?tokens=1&my_token=2", "http://h/f?my_token=2&tokens=1"),
    (
        "https://bucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK"
        "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=60&X-Amz-Security-Token=st"
        "&X-Amz-SignedHeaders=host&X-Amz-Signature=ab12",
        "https://bucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host",
    ),
    (
        "http://h/?TOKEN=1&Access_Token=2&API_KEY=3&sig=4&Signature=5&x-amz-signature=6"
        "&x-amz-credential=7&X-Goog-Signature=8&x-goog-credential=9&client_secret=10"
        "&private_token=11&Account=fp&keep=12",
        "http://h/?keep=12",
    ),
]


@pytest.mark.parametrize(("url", "expected"), URL_CASES)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected
    assert normalize_url(expected) == expected


ERROR_CASES = [
    ("", "invalid URL '': not an absolute URL; expected http://HOST/PATH or https://HOST/PATH"),
    (
        "example.org/x",
        "invalid URL 'example.org/x': not an absolute URL; expected http://HOST/PATH or "
        "https://HOST/PATH",
    ),
    (
        "//example.org/x",
        "invalid URL '//example.org/x': not an absolute URL; expected http://HOST/PATH or "
        "https://HOST/PATH",
    ),
    (
        "ftp://example.org/f",
        "invalid URL 'ftp://example.org/f': scheme 'ftp' is not supported; "
        "fetchproxy records http and https",
    ),
    (
        "file:///etc/passwd",
        "invalid URL 'file:///etc/passwd': scheme 'file' is not supported; "
        "fetchproxy records http and https",
    ),
    (
        "localhost:8080/x",
        "invalid URL 'localhost:8080/x': scheme 'localhost' is not supported; "
        "fetchproxy records http and https",
    ),
    ("http:/x", "invalid URL 'http:/x': no host; expected http://HOST/PATH"),
    ("https:///x", "invalid URL 'https:///x': no host; expected https://HOST/PATH"),
    ("http://alice:pw@/x", "invalid URL 'http:///x': no host; expected http://HOST/PATH"),
    ("http://:8080/", "invalid URL 'http://:8080/': no host; expected http://HOST/PATH"),
    (
        "http://h:99999/",
        "invalid URL 'http://h:99999/': port '99999' is not a number from 1 to 65535",
    ),
    ("http://h:0/", "invalid URL 'http://h:0/': port '0' is not a number from 1 to 65535"),
    ("http://h:-1/", "invalid URL 'http://h:-1/': port '-1' is not a number from 1 to 65535"),
    ("http://h:8o/", "invalid URL 'http://h:8o/': port '8o' is not a number from 1 to 65535"),
    (
        "http://h:1234567890123/",
        "invalid URL 'http://h:1234567890123/': port '1234567890123' is not a number from 1 to "
        "65535",
    ),
    (
        "http://h:\uff18\uff10/",
        "invalid URL 'http://h:\uff18\uff10/': port '\uff18\uff10' is not a number from 1 to 65535",
    ),
    ("http://[::1/", "invalid URL 'http://[::1/': '[::1' is not a valid IPv6 address literal"),
    ("http://[::g]/", "invalid URL 'http://[::g]/': '[::g]' is not a valid IPv6 address literal"),
    (
        "http://[::1]x/",
        "invalid URL 'http://[::1]x/': '[::1]x' is not a valid IPv6 address literal",
    ),
    (
        "http://[fe80::1%25eth0]/",
        "invalid URL 'http://[fe80::1%25eth0]/': '[fe80::1%25eth0]' is not a valid IPv6 "
        "address literal",
    ),
    (
        "http://[v1.fe]/",
        "invalid URL 'http://[v1.fe]/': '[v1.fe]' is not a valid IPv6 address literal",
    ),
    (
        "http://1.2.3.256/",
        "invalid URL 'http://1.2.3.256/': '1.2.3.256' is not a valid IPv4 address",
    ),
    ("http://01.2.3.4/", "invalid URL 'http://01.2.3.4/': '01.2.3.4' is not a valid IPv4 address"),
    ("http://1.2.3/", "invalid URL 'http://1.2.3/': '1.2.3' is not a valid IPv4 address"),
    (
        "http://exa mple.org/",
        "invalid URL 'http://exa mple.org/': host 'exa mple.org' contains ' ', "
        "which a host name cannot contain",
    ),
    (
        "http://a!b.org/",
        "invalid URL 'http://a!b.org/': host 'a!b.org' contains '!', "
        "which a host name cannot contain",
    ),
    ("http://a..b/", "invalid URL 'http://a..b/': host 'a..b' has an empty label"),
    ("http://.a/", "invalid URL 'http://.a/': host '.a' has an empty label"),
    ("http://xn--a.org/", "invalid URL 'http://xn--a.org/': host label 'xn--a' is not valid IDNA"),
    (
        "http://a\ufffdb.org/",
        "invalid URL 'http://a\ufffdb.org/': host label 'a\ufffdb' is not valid IDNA",
    ),
    (
        "http://\U00018cd6.org/",
        "invalid URL 'http://\U00018cd6.org/': host label '\U00018cd6' is not valid IDNA",
    ),
    (
        "http://ex%ff.org/",
        "invalid URL 'http://ex%ff.org/': host 'ex%ff.org' is not valid percent-encoded UTF-8",
    ),
    (
        "http://ex%zz.org/",
        "invalid URL 'http://ex%zz.org/': host 'ex%zz.org' is not valid percent-encoded UTF-8",
    ),
    (
        f"http://{'a' * 64}.org/",
        f"invalid URL 'http://{'a' * 64}.org/': host label '{'a' * 64}' is longer than "
        "63 characters",
    ),
    (
        f"http://{'a' * 60}.{'b' * 60}.{'c' * 60}.{'d' * 60}.{'e' * 9}.org/",
        f"invalid URL 'http://{'a' * 60}.{'b' * 60}.{'c' * 60}.{'d' * 60}.{'e' * 9}.org/': "
        "host is longer than 253 characters",
    ),
    (
        "http://h/\ud800",
        "invalid URL 'http://h/%ED%A0%80': contains U+D800, a lone surrogate that cannot be "
        "encoded as UTF-8",
    ),
    (
        "http://tok:s3cret@exa mple.org/?token=abc&x=1#access_token=t",
        "invalid URL 'http://exa mple.org/?x=1': host 'exa mple.org' contains ' ', "
        "which a host name cannot contain",
    ),
]


@pytest.mark.parametrize(("url", "message"), ERROR_CASES)
def test_invalid_url_message(url: str, message: str) -> None:
    with pytest.raises(InvalidURLError) as caught:
        normalize_url(url)
    assert str(caught.value) == message
    assert isinstance(caught.value, FetchproxyError)
    assert isinstance(caught.value, ValueError)


def test_invalid_url_error_keeps_secrets_out() -> None:
    with pytest.raises(InvalidURLError) as caught:
        normalize_url("http://u:hunter2@h:99999/?api_key=hunter3&Sig=hunter4")
    assert "hunter" not in str(caught.value)
    assert caught.value.url == "http://h:99999/"
    assert caught.value.reason == "port '99999' is not a number from 1 to 65535"


def test_secret_params_are_configurable() -> None:
    url = "http://h/?session=1&token=2&SESSION=3"
    assert normalize_url(url, secret_params={"Session"}) == "http://h/?token=2"
    assert normalize_url(url, secret_params=DEFAULT_SECRET_PARAMS | {"session"}) == "http://h/"
    assert normalize_url(url, secret_params=()) == "http://h/?SESSION=3&session=1&token=2"
    assert normalize_url("http://h/?a%5Bb%5D=1&c=2", secret_params=["a[b]"]) == "http://h/?c=2"


def test_default_secret_lists() -> None:
    assert {"token", "access_token", "api_key", "signature", "sig"} <= DEFAULT_SECRET_PARAMS
    assert {"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token"} <= (
        DEFAULT_SECRET_PARAMS
    )
    assert {"authorization", "cookie", "set-cookie", "proxy-authorization"} == SECRET_HEADERS


ACCEPT_CASES = [
    (None, None),
    ("", None),
    ("  ", None),
    (", ,", None),
    ("*/*", None),
    (" */* ", None),
    ("*/*;q=0.8", None),
    ("*/*, */*", None),
    ("*", None),
    ("application/json", "application/json"),
    ("Application/JSON", "application/json"),
    ("b/b, a/a", "b/b, a/a"),
    ("application/json, */*", "application/json, */*"),
    ("application/json;charset=UTF-8", "application/json;charset=UTF-8"),
    (
        "text/html , application/xhtml+xml ;Q = 0.9 ,\t*/*;q=0.8",
        "text/html, application/xhtml+xml;q=0.9, */*;q=0.8",
    ),
    (
        "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*",
        "application/vnd.npm.install-v1+json;q=1.0, application/json;q=0.8, */*",
    ),
    ('text/plain; format="A, B;C" , x/y', 'text/plain;format="A, B;C", x/y'),
    ('text/plain;f="a\\"b,c"', 'text/plain;f="a\\"b,c"'),
]


@pytest.mark.parametrize(("value", "expected"), ACCEPT_CASES)
def test_normalize_accept(value: str | None, expected: str | None) -> None:
    assert normalize_accept(value) == expected


def test_normalize_request() -> None:
    digest = digest_bytes(b"body")
    key = normalize_request(
        "POST",
        "HTTP://Example.org:80/git/x.git/git-upload-pack",
        headers=[
            ("ACCEPT", "application/x-git-upload-pack-result"),
            ("Authorization", "Bearer hunter2"),
            ("Cookie", "a=b"),
        ],
        body_digest=digest,
    )
    assert key == RequestKey(
        method="POST",
        url="http://example.org/git/x.git/git-upload-pack",
        accept="application/x-git-upload-pack-result",
        body_digest=digest,
    )
    assert key.host == "example.org"


@pytest.mark.parametrize("method", ["get", "Get", "pOST"])
def test_methods_are_case_sensitive_and_a_lock_holds_uppercase_ones(method: str) -> None:
    """RFC 9110: a method is case-sensitive, so ``get`` is not ``GET``; a lock holds uppercase
    methods only, so anything else is refused rather than served as its uppercase cousin."""
    with pytest.raises(InvalidMethodError, match="methods are case-sensitive"):
        normalize_request(method, "http://h/")


def test_normalize_request_headers() -> None:
    plain = normalize_request("GET", "http://h/")
    assert normalize_request("GET", "http://h/", headers=[("Accept", "*/*")]) == plain
    assert normalize_request("GET", "http://h/", headers=[("Cookie", "a=1")]) == plain
    combined = normalize_request("GET", "http://h/", headers=[("accept", "a/b"), ("Accept", "c/d")])
    assert combined.accept == "a/b, c/d"
    assert normalize_request("GET", "http://h/?TOKEN=1", secret_params=()).url == (
        "http://h/?TOKEN=1"
    )


def test_git_protocol_selects_the_answer_and_is_part_of_the_key() -> None:
    url = "https://h/repo.git/info/refs?service=git-upload-pack"
    v0 = normalize_request("GET", url)
    v2 = normalize_request("GET", url, headers=[("Git-Protocol", " version=2 ")])
    assert v2.git_protocol == "version=2"
    assert v0 != v2
    assert v0.sort_key() < v2.sort_key()
    assert normalize_request("GET", url, headers=[("git-protocol", "")]) == v0
    spaced = normalize_request("GET", url, headers=[("Git-Protocol", "version=2 : x=1")])
    assert spaced.git_protocol == "version=2:x=1"


@pytest.mark.parametrize(
    ("method", "message"),
    [
        (
            "GE T",
            "invalid method (not an HTTP token) for URL 'http://h/': a method is an HTTP token "
            "(letters, digits and !#$%&'*+-.^_`|~)",
        ),
        (
            "",
            "invalid method (not an HTTP token) for URL 'http://h/': a method is an HTTP token "
            "(letters, digits and !#$%&'*+-.^_`|~)",
        ),
    ],
)
def test_invalid_method(method: str, message: str) -> None:
    with pytest.raises(InvalidMethodError, match=f"^{re.escape(message)}$"):
        normalize_request(method, "http://u:p@h/?token=1")


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://example.org/", "example.org"),
        ("http://example.org:8080/x?y", "example.org:8080"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("https://[::1]/", "[::1]"),
    ],
)
def test_host(url: str, host: str) -> None:
    assert RequestKey(method="GET", url=url).host == host


def test_request_key_rejects_empty_strings() -> None:
    with pytest.raises(
        ValueError, match="accept, git_protocol and body_digest are None or non-empty"
    ):
        RequestKey(method="GET", url="http://h/", accept="")


def test_request_key_order() -> None:
    digest = digest_bytes(b"x")
    ordered = [
        RequestKey(method="GET", url="http://a/"),
        RequestKey(method="HEAD", url="http://a/"),
        RequestKey(method="POST", url="http://a/"),
        RequestKey(method="POST", url="http://a/", body_digest=digest),
        RequestKey(method="POST", url="http://a/", accept="a/b"),
        RequestKey(method="GET", url="http://a/x"),
        RequestKey(method="GET", url="http://b/"),
    ]
    for shuffled in itertools.permutations(ordered[:4]):
        assert sorted([*shuffled, *ordered[4:]]) == ordered
    assert ordered[0] < ordered[1] <= ordered[1]
    assert ordered[2] > ordered[1] >= ordered[1]
    assert RequestKey(method="GET", url="http://a/").__lt__("http://a/") is NotImplemented


REDACT_CASES = [
    ("http://u:p@h/x?a=1&TOKEN=2&x-amz-signature=3#access_token=4", "http://h/x?a=1"),
    ("http://h/x?token=1", "http://h/x"),
    ("HTTP://Example.ORG:80/a/../b?b&a", "HTTP://Example.ORG:80/a/../b?b&a"),
    ("http://h/x?%74oken=1&a=%ZZ", "http://h/x?a=%ZZ"),
    ("u:p@h/x", "u:h/x"),
    ("not a url\n", "not a url%0A"),
    ("http://h/\ud800\x00", "http://h/%ED%A0%80%00"),
    ("", ""),
]


@pytest.mark.parametrize(("url", "expected"), REDACT_CASES)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


# --- properties -------------------------------------------------------------------------

_UNRESERVED = "abcXYZ019-._~"
_PATH_TOKENS = [*_UNRESERVED, *"!$&'()*+,;=:@", "%2F", "%25", "%3F", "%23", "%C3%A4", "%20"]
_NAME_TOKENS = [*_UNRESERVED, *"!$'()*+,;:@/?", "%26", "%3D", "%23", "%25", "%C3%A4", "%20"]
_IDN = [("bücher", "xn--bcher-kva"), ("пример", "xn--e1afmkfd"), ("例え", "xn--r8jz45g")]
_DEFAULT = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Parts:
    """A URL in canonical form, and the host spellings that mean the same."""

    scheme: str
    host: str
    host_spellings: tuple[str, ...]
    port: int | None
    segments: tuple[str, ...]
    params: tuple[tuple[str, str | None], ...]

    def url(self) -> str:
        port = "" if self.port is None else f":{self.port}"
        query = "&".join(n if v is None else f"{n}={v}" for n, v in self.params)
        path = "/" + "/".join(self.segments)
        return f"{self.scheme}://{self.host}{port}{path}{'?' if query else ''}{query}"


def _tokens(tokens: list[str], min_size: int = 0) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(tokens), min_size=min_size, max_size=6).map("".join)


_reg_hosts = (
    st.lists(st.text("abz09-_", min_size=1, max_size=6), min_size=1, max_size=3)
    .map(".".join)
    .filter(lambda host: not re.fullmatch(r"[0-9.]+", host))
    .map(lambda host: (host, (host,)))
)
_idn_hosts = st.sampled_from(_IDN).map(
    lambda p: (f"{p[1]}.example", (f"{p[0]}.example", f"{p[1]}.example"))
)
_ipv4_hosts = st.ip_addresses(v=4).map(lambda a: (str(a), (str(a),)))
_ipv6_hosts = (
    st.ip_addresses(v=6)
    .filter(lambda a: isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is None)
    .map(lambda a: (f"[{a.compressed}]", (f"[{a.compressed}]", f"[{a.exploded}]")))
)


@st.composite
def canonical_parts(draw: st.DrawFn) -> Parts:
    scheme = draw(st.sampled_from(["http", "https"]))
    host, spellings = draw(st.one_of(_reg_hosts, _idn_hosts, _ipv4_hosts, _ipv6_hosts))
    port = draw(st.none() | st.integers(1, 65535).filter(lambda p: p != _DEFAULT[scheme]))
    segments = draw(st.lists(_tokens(_PATH_TOKENS).filter(lambda s: s not in {".", ".."})))
    names = _tokens(_NAME_TOKENS, min_size=1).filter(lambda n: n.lower() not in _SECRETS)
    values = st.none() | _tokens([*_NAME_TOKENS, "="])
    params = draw(st.lists(st.tuples(names, values), max_size=5))
    params.sort(key=lambda param: param[0])
    return Parts(scheme, host, spellings, port, tuple(segments), tuple(params))


_SECRETS = {name.lower() for name in DEFAULT_SECRET_PARAMS}


def _random_case(data: st.DataObject, text: str) -> str:
    flips = data.draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips, strict=True))


def _respell_escapes(data: st.DataObject, text: str) -> str:
    """Percent-encode some unreserved characters and lower-case some escapes' hex."""
    out = []
    for token in re.findall(r"%[0-9A-F]{2}|.", text, flags=re.DOTALL):
        if len(token) == 3:
            out.append(token.lower() if data.draw(st.booleans()) else token)
        elif token in _UNRESERVED and data.draw(st.booleans()):
            escape = f"%{ord(token):02X}"
            out.append(escape.lower() if data.draw(st.booleans()) else escape)
        else:
            out.append(token)
    return "".join(out)


def respell(data: st.DataObject, parts: Parts) -> str:
    """An equivalent spelling of ``parts.url()``, as clients and servers may write it."""
    scheme = _random_case(data, parts.scheme)
    userinfo = data.draw(st.sampled_from(["", "alice@", "alice:s3cret@"]))
    host = _random_case(data, data.draw(st.sampled_from(parts.host_spellings)))
    default = _DEFAULT[parts.scheme]
    if parts.port is None:
        port = data.draw(st.sampled_from(["", ":", f":{default}", f":0{default}"]))
    else:
        port = data.draw(st.sampled_from([f":{parts.port}", f":0{parts.port}"]))
    segments: list[str] = []
    for segment in parts.segments:
        dots: list[list[str]] = [[], ["."], ["zz", ".."], [".", "q", "%2e%2E"]]
        segments += data.draw(st.sampled_from(dots))
        segments.append(_respell_escapes(data, segment))
    empty_path = not segments and data.draw(st.booleans())
    path = "" if empty_path else "/" + "/".join(segments)
    groups: dict[str, list[str]] = {}
    for name, value in parts.params:
        field = _respell_escapes(data, name)
        if value is not None:
            field += "=" + _respell_escapes(data, value)
        groups.setdefault(name, []).append(field)
    fields: list[str] = []
    while groups:  # interleave the names; equal names keep their order
        name = data.draw(st.sampled_from(sorted(groups)))
        fields.append(groups[name].pop(0))
        if not groups[name]:
            del groups[name]
        extra = ["", "token=hunter2", "X-AMZ-SIGNATURE=ab", "Sig", ""]
        fields.append(data.draw(st.sampled_from(extra)))
    query = "&".join(fields)
    fragment = data.draw(st.sampled_from(["", "#", "#frag?x=1&token=t"]))
    question = "?" if query or data.draw(st.booleans()) else ""
    return f"{scheme}://{userinfo}{host}{port}{path}{question}{query}{fragment}"


@PROPERTIES
@given(canonical_parts(), st.data())
def test_equivalent_spellings_give_equal_keys(parts: Parts, data: st.DataObject) -> None:
    canonical = parts.url()
    assert normalize_url(canonical) == canonical
    spelling = respell(data, parts)
    assert normalize_url(spelling) == canonical
    method = "GET"  # methods are case-sensitive: no other spelling is the same request
    accept = data.draw(st.sampled_from([[], [("Accept", "*/*")], [("accept", " */* ;q=0.1")]]))
    key = normalize_request(method, spelling, headers=accept)
    assert key == RequestKey(method="GET", url=canonical)


@PROPERTIES
@given(canonical_parts(), canonical_parts(), st.data())
def test_different_resources_give_different_keys(
    first: Parts, second: Parts, data: st.DataObject
) -> None:
    assume(first.url() != second.url())
    assert normalize_url(respell(data, first)) != normalize_url(respell(data, second))


_NASTY = st.sampled_from(
    [
        "%",
        "%2",
        "%2f",
        "%E2%82",
        "\ud800",
        "\udcff",
        "..",
        ".",
        "/",
        "?",
        "#",
        "&",
        "=",
        "@",
        ":",
        "[",
        "]",
        " ",
        "\n",
        "ä",
        "。",
        "\u200d",
    ]
)
_url_text = st.one_of(
    st.text(),
    st.lists(st.one_of(_NASTY, st.text(max_size=3))).map("".join),
    st.builds(
        lambda scheme, host, rest: f"{scheme}://{host}{rest}",
        st.sampled_from(["http", "HTTPS", "hTtP"]),
        st.sampled_from(
            ["example.org", "[::1]:80", "ÄÖ.de", "1.2.3.4:443", "u:p@h:08", "xn--bcher-kva.de"]
        ),
        st.lists(st.one_of(_NASTY, st.text(max_size=3))).map("".join),
    ),
)


@PROPERTIES
@given(_url_text)
def test_normalize_url_is_idempotent_or_says_why(url: str) -> None:
    try:
        normalized = normalize_url(url)
    except InvalidURLError as error:
        message = str(error)
    else:
        message = ""
    if message:
        assert message.startswith(f"invalid URL '{redact_url(url)}': ")
        return
    assert normalize_url(normalized) == normalized
    assert normalized.isascii()
    assert "#" not in normalized


@PROPERTIES
@given(_url_text)
def test_redact_url_never_raises_and_drops_secrets(url: str) -> None:
    redacted = redact_url(url + ("&" if "?" in url else "?") + "token=hunter2&x=1")
    assert "hunter2" not in redacted
    assert "\n" not in redacted


@PROPERTIES
@given(
    st.one_of(
        st.text(),
        st.lists(
            st.sampled_from([",", ";", '"', "\\", "=", " ", "\t", "*/*", "A/b", "q=1", "*"])
        ).map("".join),
    )
)
def test_normalize_accept_is_idempotent(value: str) -> None:
    normalized = normalize_accept(value)
    assert normalize_accept(normalized) == normalized
    assert normalized != ""


_media = st.tuples(
    st.sampled_from(["text/html", "application/json", "*/*", "image/*"]),
    st.lists(st.sampled_from(["q=0.5", "level=1", "charset=UTF-8"]), max_size=2),
)


@PROPERTIES
@given(st.lists(_media, min_size=1, max_size=4), st.data())
def test_accept_spellings_give_equal_values(
    ranges: list[tuple[str, list[str]]], data: st.DataObject
) -> None:
    def spell(compact: bool) -> str:
        space = "" if compact else data.draw(st.sampled_from([" ", "\t", "  "]))
        return f"{space},{space}".join(
            f"{space};{space}".join([_random_case(data, media) if not compact else media, *params])
            for media, params in ranges
        )

    assert normalize_accept(spell(compact=False)) == normalize_accept(spell(compact=True))
    if all(media == "*/*" for media, _ in ranges):
        assert normalize_accept(spell(compact=True)) is None


_keys = st.builds(
    RequestKey,
    method=st.sampled_from(["GET", "HEAD", "POST"]),
    url=st.sampled_from(["http://a/", "http://a/x", "http://b/", "https://a/"]),
    accept=st.sampled_from([None, "a/b", "c/d"]),
    body_digest=st.sampled_from([None, digest_bytes(b"1"), digest_bytes(b"2")]),
)


@PROPERTIES
@given(st.lists(_keys, max_size=8))
def test_order_is_total_and_follows_sort_key(keys: list[RequestKey]) -> None:
    ordered = sorted(keys)
    assert [key.sort_key() for key in ordered] == sorted(key.sort_key() for key in keys)
    for a, b in itertools.product(keys, repeat=2):
        assert [a < b, a == b, a > b].count(True) == 1
        assert (a < b) == (a.sort_key() < b.sort_key())
        assert (a == b) == (a.sort_key() == b.sort_key())
        assert (a <= b) == (a < b or a == b)
        assert (a >= b) == (a > b or a == b)

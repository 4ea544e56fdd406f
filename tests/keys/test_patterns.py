"""Origin and URL patterns (one grammar), and the keys made where URL patterns match."""

from __future__ import annotations

import pytest

from fetchproxy.keys.patterns import OriginPattern, OriginPatternError, URLPattern, URLPatternError
from fetchproxy.keys.request import ANY_ACCEPT, normalize_accept
from fetchproxy.keys.rules import KeyRules, RawRequest


@pytest.mark.parametrize(
    ("pattern", "url", "matches"),
    [
        ("crates.example.org", "https://crates.example.org/config.json", True),
        ("crates.example.org", "http://crates.example.org:8080/x", True),
        ("crates.example.org", "https://other.example.org/config.json", False),
        ("Crates.Example.ORG", "https://crates.example.org/", True),
        ("crates.example.org.", "https://crates.example.org/", False),  # as URLs key it
        ("crates.example.org:8443", "https://crates.example.org:8443/a", True),
        ("crates.example.org:8443", "https://crates.example.org/a", False),
        ("crates.example.org:443", "https://crates.example.org/a", True),
        ("crates.example.org:80", "http://crates.example.org/a", True),
        ("crates.example.org:80", "https://crates.example.org/a", False),
        ("*.example.org", "https://index.example.org/a", True),
        ("*.example.org", "https://example.org/a", False),
        ("*.example.org", "https://badexample.org/a", False),
        ("crates.example.org/index/", "https://crates.example.org/index/fp/he/fphello", True),
        ("crates.example.org/index", "https://crates.example.org/index", True),
        ("crates.example.org/index", "https://crates.example.org/index?x=1", True),
        ("crates.example.org/index", "https://crates.example.org/indexes/a", False),
        ("crates.example.org/a%7eb", "https://crates.example.org/a~b/c", True),
        ("127.0.0.44", "https://127.0.0.44/index/config.json", True),
        ("[::1]:8443/v2", "https://[::1]:8443/v2/x", True),
        ("bücher.example", "https://xn--bcher-kva.example/a", True),
    ],
)
def test_a_pattern_names_a_host_a_port_and_a_path(pattern: str, url: str, matches: bool) -> None:
    assert URLPattern.parse(pattern).matches(url) is matches


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            "https://crates.example.org/",
            "URL pattern 'https://crates.example.org/': give host[:port][/path] without a "
            "scheme, query, fragment or user, e.g. crates.example.org or *.example.net/index/",
        ),
        (
            "a..b",
            "URL pattern 'a..b': host 'a..b' has an empty label — give host[:port][/path], e.g. "
            "crates.example.org or *.example.net/index/",
        ),
        ("*.[::1]", "URL pattern '*.[::1]': *. goes with names, not addresses"),
        (
            "h/p?q=1",
            "URL pattern 'h/p?…': give host[:port][/path] without a scheme, query, "
            "fragment or user, e.g. crates.example.org or *.example.net/index/",
        ),
    ],
)
def test_a_bad_pattern_says_what_a_good_one_is(pattern: str, message: str) -> None:
    with pytest.raises(URLPatternError) as caught:
        URLPattern.parse(pattern)
    assert str(caught.value) == message


def request(url: str, *headers: tuple[str, str]) -> RawRequest:
    return RawRequest(method="GET", scheme="https", authority=None, target=url, headers=headers)


def test_where_accept_selects_nothing_every_accept_gives_one_key_that_says_so() -> None:
    """cargo 1.65 asks its sparse index with ``*/*``, cargo 1.95 with ``text/plain``."""
    rules = KeyRules(accept_selects_nothing=[URLPattern.parse("crates.example.org/index/")])
    url = "https://crates.example.org/index/fp/he/fphello"
    keys = {
        rules.key(request(url, ("Accept", "text/plain"))),
        rules.key(request(url, ("Accept", "*/*"))),
        rules.key(request(url)),
    }
    assert len(keys) == 1
    (key,) = keys
    assert key.accept == ANY_ACCEPT == "*"
    # elsewhere Accept is part of the key as before
    crate = "https://crates.example.org/crates/fphello/fphello-1.0.0.crate"
    assert rules.key(request(crate, ("Accept", "text/plain"))).accept == "text/plain"
    assert rules.key(request(crate, ("Accept", "*/*"))).accept is None
    # no request's own Accept is ever spelled like that
    assert normalize_accept("*") is None
    assert normalize_accept("*;q=0.2") is None
    assert repr(rules).endswith("accept_selects_nothing=['crates.example.org/index/'])")


@pytest.mark.parametrize(
    "text",
    [
        "files.example.org",
        "Files.Example.ORG:8443",
        "files.example.org:80",
        "*.example.org",
        "*.example.org:443",
        "127.0.0.44",
        "127.0.0.44:18443",
        "[::1]:8443",
        "[::FFFF:127.0.0.1]",
        "bücher.example",
    ],
)
def test_origin_and_url_patterns_read_a_host_and_port_alike(text: str) -> None:
    """One grammar: what an origin pattern names, a URL pattern without a path names too."""
    origin = OriginPattern.parse(text)
    assert URLPattern.parse(text).origin == origin
    with_path = URLPattern.parse(text + "/a").origin
    assert (with_path.host, with_path.port, with_path.wildcard) == (
        origin.host,
        origin.port,
        origin.wildcard,
    )


@pytest.mark.parametrize(
    ("pattern", "host", "port", "matches"),
    [
        ("files.example.org", "files.example.org", 443, True),
        ("files.example.org", "files.example.org", 8080, True),
        ("files.example.org:8443", "files.example.org", 443, False),
        ("files.example.org:80", "files.example.org", 80, True),
        ("*.example.org", "a.b.example.org", 443, True),
        ("*.example.org", "example.org", 443, False),
        ("*.example.org", "badexample.org", 443, False),
        ("[::1]:8443", "[::1]", 8443, True),
        ("[0:0::1]", "[::1]", 1, True),
        ("bücher.example", "xn--bcher-kva.example", 443, True),
    ],
)
def test_an_origin_pattern_names_a_host_and_a_port(
    pattern: str, host: str, port: int, matches: bool
) -> None:
    assert OriginPattern.parse(pattern).matches(host, port) is matches


@pytest.mark.parametrize(
    ("pattern", "shown"),
    [
        ("https://files.example.org", "https://files.example.org"),  # not the host "https"
        ("files.example.org/pkg/", "files.example.org/pkg/"),  # not all of files.example.org
        ("user@files.example.org", "***@files.example.org"),
        ("files.example.org?x=1", "files.example.org?…"),
        ("files.example.org#top", "files.example.org#top"),
    ],
)
def test_an_origin_pattern_with_more_than_an_origin_is_refused_not_read_as_less(
    pattern: str, shown: str
) -> None:
    with pytest.raises(OriginPatternError) as caught:
        OriginPattern.parse(pattern)
    assert str(caught.value) == (
        f"origin pattern {shown!r}: give host, host:port or *.domain[:port] without a "
        "scheme, user, path or query, e.g. files.example.org or *.example.net:8443"
    )


@pytest.mark.parametrize("pattern", ["*.10.0.0.1", "*.[::1]", "*.10.0.0.1:8443"])
def test_a_wildcard_goes_with_names_in_both_kinds(pattern: str) -> None:
    with pytest.raises(OriginPatternError, match=r"\*\. goes with names, not addresses"):
        OriginPattern.parse(pattern)
    with pytest.raises(URLPatternError, match=r"\*\. goes with names, not addresses"):
        URLPattern.parse(pattern + "/index/")


def test_a_bad_origin_pattern_says_what_is_wrong_and_what_a_good_one_is() -> None:
    with pytest.raises(OriginPatternError) as caught:
        OriginPattern.parse("files.example.org:0")
    assert str(caught.value) == (
        "origin pattern 'files.example.org:0': port '0' is not a number from 1 to 65535 — give "
        "host, host:port or *.domain[:port], e.g. files.example.org or *.example.net:8443"
    )


@pytest.mark.parametrize("pattern", ["files.example.org:", "[::1]:", "*.example.org:"])
def test_an_empty_port_is_refused_not_read_as_port_80(pattern: str) -> None:
    with pytest.raises(OriginPatternError, match="an empty port — give host, host:port"):
        OriginPattern.parse(pattern)
    with pytest.raises(URLPatternError, match=r"an empty port — give host\[:port\]\[/path\]"):
        URLPattern.parse(pattern + "/index/")


@pytest.mark.parametrize(
    ("pattern", "shown"),
    [
        ("https://ci:ghp_s3cret@files.example.org", "https://***@files.example.org"),
        ("ci:ghp_s3cret@files.example.org:8443", "***@files.example.org:8443"),
        ("files.example.org/pkg?token=s3cret", "files.example.org/pkg?…"),
        ("https://u:p@files.example.org/a@b?x=s3cret", "https://***@files.example.org/a@b?…"),
    ],
)
def test_a_refused_pattern_is_never_repeated_with_its_credentials(pattern: str, shown: str) -> None:
    with pytest.raises(OriginPatternError) as origin:
        OriginPattern.parse(pattern)
    with pytest.raises(URLPatternError) as url:
        URLPattern.parse(pattern)
    for message in (str(origin.value), str(url.value)):
        assert "s3cret" not in message
        assert f"pattern {shown!r}: " in message


@pytest.mark.parametrize("pattern", ["files.example.org/", "*.example.org:8443/"])
def test_an_origin_pattern_may_end_in_a_slash_alone(pattern: str) -> None:
    """``files.example.org/`` names the host, as the URL ``http://files.example.org/`` does."""
    assert OriginPattern.parse(pattern) == OriginPattern.parse(pattern[:-1])

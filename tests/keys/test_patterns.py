"""URL patterns (``[fetchproxy] accept-selects-nothing``) and the keys made where they match."""

from __future__ import annotations

import pytest

from fetchproxy.keys.patterns import URLPattern, URLPatternError
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
            "URL pattern 'h/p?q=1': give host[:port][/path] without a scheme, query, "
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

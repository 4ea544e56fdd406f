"""Intercepted connections (``--intercept transparent``) key like the CONNECT their client did
not send: by its server name or Host, checked against the name its address was handed out for,
never by a synthetic address."""

from __future__ import annotations

from typing import ClassVar

import pytest

from fetchproxy.keys.intercepted import (
    SYNTHETIC_NETWORK,
    intercepted_authority,
    is_synthetic,
    split_authority,
)
from fetchproxy.keys.rules import (
    HostMismatchError,
    KeyRules,
    RawRequest,
    UnknownDestinationError,
    UnnamedServerError,
)
from fetchproxy.replay.decisions import unkeyable


class Book:
    """Two names handed out, as the DNS stub would."""

    names: ClassVar[dict[str, str]] = {
        "198.18.0.1": "files.example.test",
        "198.18.0.2": "api.example.test",
    }

    def name_of(self, address: str) -> str | None:
        return self.names.get(address)


RULES = KeyRules()


def intercepted(
    address: str,
    port: int,
    *,
    scheme: str = "https",
    host: str | None = None,
    sni: str | None = None,
    target: str = "/pkg.tar.gz",
) -> RawRequest:
    headers = [] if host is None else [("Host", host)]
    return RawRequest(
        method="GET",
        scheme=scheme,
        authority=intercepted_authority(address, port, Book()),
        target=target,
        headers=headers,
        sni=sni,
        intercepted=True,
    )


def test_a_synthetic_address_stands_for_the_name_it_was_handed_out_for() -> None:
    assert intercepted_authority("198.18.0.1", 443, Book()) == "files.example.test:443"
    assert intercepted_authority("198.18.0.2", 8443, Book()) == "api.example.test:8443"
    # never handed out, or not synthetic at all: the address itself, as CONNECT would name it
    assert intercepted_authority("198.19.255.1", 80, Book()) == "198.19.255.1:80"
    assert intercepted_authority("93.184.216.34", 443, Book()) == "93.184.216.34:443"
    assert intercepted_authority("2001:db8::1", 443, Book()) == "[2001:db8::1]:443"
    assert split_authority("[2001:db8::1]:443") == ("2001:db8::1", 443)
    assert split_authority("files.example.test:80") == ("files.example.test", 80)
    assert SYNTHETIC_NETWORK.num_addresses == 131072
    assert is_synthetic("198.18.0.0")
    assert is_synthetic("198.19.255.255")
    assert not is_synthetic("198.20.0.1")
    assert not is_synthetic("files.example.test")


def test_keyed_by_the_server_name_or_host_never_by_the_address() -> None:
    by_sni = RULES.key(intercepted("198.18.0.1", 443, sni="files.example.test"))
    by_host = RULES.key(intercepted("198.18.0.1", 443, host="files.example.test"))
    plain = RULES.key(intercepted("198.18.0.1", 80, scheme="http", host="FILES.example.test:80"))
    other_port = RULES.key(intercepted("198.18.0.2", 8443, host="api.example.test:8443"))
    assert by_sni.url == by_host.url == "https://files.example.test/pkg.tar.gz"
    assert plain.url == "http://files.example.test/pkg.tar.gz"
    assert other_port.url == "https://api.example.test:8443/pkg.tar.gz"
    # the same request through the explicit proxy keys alike: one lock for both modes
    explicit = RawRequest(
        method="GET",
        scheme="https",
        authority="files.example.test:443",
        target="/pkg.tar.gz",
        headers=[("Host", "files.example.test")],
        sni="files.example.test",
    )
    assert RULES.key(explicit) == by_sni


def test_a_literal_address_is_its_own_server() -> None:
    key = RULES.key(intercepted("93.184.216.34", 80, scheme="http", host="93.184.216.34"))
    assert key.url == "http://93.184.216.34/pkg.tar.gz"
    # a TLS server name says nothing against an address, as with CONNECT 93.184.216.34:443
    tls = RULES.key(intercepted("93.184.216.34", 443, sni="files.example.test"))
    assert tls.url == "https://93.184.216.34/pkg.tar.gz"


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        (
            intercepted("198.18.0.1", 443),
            "GET /pkg.tar.gz: intercepted on its way to files.example.test:443, and names no "
            "server: neither a TLS server name nor a Host header",
        ),
        (
            intercepted("93.184.216.34", 80, scheme="http"),
            "GET /pkg.tar.gz: intercepted on its way to 93.184.216.34:80, and names no server",
        ),
        (
            intercepted("198.19.255.1", 443, sni="files.example.test", host="files.example.test"),
            "GET /pkg.tar.gz: sent to 198.19.255.1:443, an address the sandbox's DNS stub did "
            "not hand out in this run, so it stands for no server",
        ),
    ],
)
def test_a_request_that_names_no_server_is_refused(request_: RawRequest, said: str) -> None:
    with pytest.raises(UnnamedServerError) as caught:
        RULES.key(request_)
    assert said in str(caught.value)
    assert isinstance(caught.value, UnknownDestinationError)
    assert unkeyable(caught.value) == ("no-server-name", 421)


@pytest.mark.parametrize(
    "request_",
    [
        intercepted("198.18.0.1", 443, sni="api.example.test"),
        intercepted("198.18.0.1", 443, sni="files.example.test", host="api.example.test"),
        intercepted("198.18.0.1", 80, scheme="http", host="api.example.test"),
        intercepted("198.18.0.1", 80, scheme="http", host="198.18.0.1"),
        intercepted("93.184.216.34", 80, scheme="http", host="files.example.test"),
    ],
)
def test_a_name_that_disagrees_with_the_address_is_refused(request_: RawRequest) -> None:
    """The client resolved one name and then named another: refused, as a CONNECT to one
    server with a Host naming another is, so the lock never names a server the client did
    not connect to."""
    with pytest.raises(HostMismatchError) as caught:
        RULES.key(request_)
    assert unkeyable(caught.value) == ("host-mismatch", 400)


def test_an_absolute_url_names_its_server_too() -> None:
    key = RULES.key(
        intercepted("198.18.0.1", 80, scheme="http", target="http://files.example.test/x")
    )
    assert key.url == "http://files.example.test/x"
    with pytest.raises(HostMismatchError):
        RULES.key(intercepted("198.18.0.1", 80, scheme="http", target="http://api.example.test/"))

"""The DNS stub's answers, message by message (its sockets are tested in the sandbox's
tests/sandbox/test_transparent.py, with real resolvers in tests/run/test_transparent.py)."""

from __future__ import annotations

import ipaddress
import socket
import struct

import pytest

from fetchproxy.keys.intercepted import intercepted_authority
from fetchproxy.run.dnsstub import SyntheticNames, answer

HEADER = struct.Struct("!HHHHHH")


def question(name: str, kind: int = 1, klass: int = 1) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".") if p)
    return labels + b"\0" + struct.pack("!HH", kind, klass)


def query(name: str, kind: int = 1, *, flags: int = 0x0100, opt: bool = False) -> bytes:
    extra = b"\0" + struct.pack("!HHIH", 41, 4096, 0, 0) if opt else b""
    return HEADER.pack(0x1234, flags, 1, 0, 0, 1 if opt else 0) + question(name, kind) + extra


def parse(reply: bytes) -> tuple[int, int, int, int, bytes]:
    """(flags, rcode, answers, additional, the answer's address or b"")."""
    _ident, flags, _qd, answers, _ns, additional = HEADER.unpack_from(reply)
    address = reply[-4:] if answers else b""
    if answers and additional:
        address = reply[-15:-11]
    return flags, flags & 0xF, answers, additional, address


def test_each_name_gets_one_address_of_its_own_case_aside() -> None:
    names = SyntheticNames()
    first = answer(query("Files.Example.TEST"), names)
    again = answer(query("files.example.test."), names)
    other = answer(query("api.example.test"), names)
    assert first is not None
    assert again is not None
    assert other is not None
    address = socket.inet_ntoa(parse(first)[4])
    assert address == socket.inet_ntoa(parse(again)[4]) == "198.18.0.1"
    assert socket.inet_ntoa(parse(other)[4]) == "198.18.0.2"
    assert names.name_of("198.18.0.1") == "files.example.test"
    assert names.name_of("198.18.0.3") is None
    assert intercepted_authority("198.18.0.2", 443, names) == "api.example.test:443"
    assert first[12 : 12 + len(question("Files.Example.TEST"))] == question("Files.Example.TEST")
    flags = parse(first)[0]
    assert flags & 0x8000  # a response
    assert flags & 0x0400  # authoritative
    assert flags & 0x0080  # recursion available: Go's resolver wants it


def test_other_types_get_no_answer_and_localhost_its_own() -> None:
    names = SyntheticNames()
    for kind in (28, 65, 15, 16, 12):  # AAAA, HTTPS, MX, TXT, PTR
        reply = answer(query("pypi.org", kind), names)
        assert reply is not None
        assert parse(reply)[1:3] == (0, 0)  # NOERROR, no answer
    local = answer(query("build.localhost"), names)
    assert local is not None
    assert parse(local)[4] == socket.inet_aton("127.0.0.1")
    assert len(names) == 0  # nothing was handed out


def test_edns_is_echoed() -> None:
    reply = answer(query("pypi.org", opt=True), SyntheticNames())
    assert reply is not None
    _flags, rcode, answers, additional, address = parse(reply)
    assert (rcode, answers, additional) == (0, 1, 1)
    assert socket.inet_ntoa(address) == "198.18.0.1"
    assert reply.endswith(b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0))  # the stub's OPT


@pytest.mark.parametrize(
    ("message", "rcode"),
    [
        (HEADER.pack(1, 0x0100, 2, 0, 0, 0) + question("a.test") * 2, 1),  # two questions
        (HEADER.pack(1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01", 1),  # compressed
        (HEADER.pack(1, 0x0100, 1, 0, 0, 0) + b"\x3fabc", 1),  # a label past the end
        (HEADER.pack(1, 0x0100, 1, 0, 0, 0) + b"\x01a" * 200 + b"\0\0\1\0\1", 1),  # too long
        (HEADER.pack(1, 0x1100, 1, 0, 0, 0) + question("a.test"), 4),  # opcode STATUS
        (HEADER.pack(1, 0x0100, 1, 0, 0, 0) + question("a.test", 1, 3), 4),  # class CHAOS
    ],
)
def test_what_it_cannot_answer_is_said(message: bytes, rcode: int) -> None:
    names = SyntheticNames()
    reply = answer(message, names)
    assert reply is not None
    assert parse(reply)[1] == rcode
    assert len(names) == 0


def test_responses_and_fragments_get_nothing() -> None:
    names = SyntheticNames()
    assert answer(query("a.test", flags=0x8100), names) is None  # no loops between stubs
    assert answer(b"\x12\x34\x01", names) is None


def test_the_pool_used_up_is_servfail() -> None:
    names = SyntheticNames(ipaddress.IPv4Network("198.18.0.0/30"))
    assert answer(query("one.test"), names) is not None
    assert answer(query("two.test"), names) is not None
    third = answer(query("three.test"), names)
    assert third is not None
    assert parse(third)[1] == 2
    assert names.exhausted
    again = answer(query("one.test"), names)
    assert again is not None
    assert parse(again)[4] == socket.inet_aton("198.18.0.1")  # the names handed out stay

"""The rtnetlink messages, byte by byte, and a veth made with them."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct

import pytest

from fetchproxy.sandbox import linux
from fetchproxy.sandbox.netns import in_new_thread
from fetchproxy.sandbox.rtnetlink import (
    IF_OPER_UP,
    IFLA_IFNAME,
    IFLA_INFO_DATA,
    IFLA_INFO_KIND,
    IFLA_LINKINFO,
    IFLA_NET_NS_FD,
    NLMSG_ERROR,
    RTM_NEWLINK,
    VETH_INFO_PEER,
    Rtnetlink,
    attribute,
    attributes,
    message,
    new_address_body,
    new_veth_body,
    parse_reply,
)
from tests.sandbox.conftest import needs_root, wait_for

IFINFOMSG_SIZE = 16


def test_attributes_are_padded_to_four_bytes() -> None:
    assert attribute(3, b"ab\0") == b"\x07\x00\x03\x00ab\0\0"
    assert attribute(3, b"abcd") == b"\x08\x00\x03\x00abcd"
    assert attributes(attribute(3, b"ab\0") + attribute(28, b"\x05\0\0\0")) == {
        3: b"ab\0",
        28: b"\x05\0\0\0",
    }


def test_a_message_has_its_length_type_flags_and_sequence() -> None:
    assert message(RTM_NEWLINK, 0x405, 7, b"xyzw") == struct.pack("=IHHII", 20, 16, 0x405, 7, 0) + (
        b"xyzw"
    )


def test_a_veth_request_names_both_ends_and_the_peers_namespace() -> None:
    body = new_veth_body("fp-sandbox", "fp-edge", 9)
    outer = attributes(body[IFINFOMSG_SIZE:])
    assert outer[IFLA_IFNAME] == b"fp-sandbox\0"
    info = attributes(outer[IFLA_LINKINFO])
    assert info[IFLA_INFO_KIND] == b"veth"
    peer = attributes(info[IFLA_INFO_DATA])[VETH_INFO_PEER]
    assert attributes(peer[IFINFOMSG_SIZE:]) == {
        IFLA_IFNAME: b"fp-edge\0",
        IFLA_NET_NS_FD: struct.pack("=I", 9),
    }


def test_an_address_request_carries_prefix_and_address() -> None:
    body = new_address_body(2, ipaddress.IPv4Interface("169.254.77.2/30"))
    assert body[:8] == struct.pack("=BBBBI", socket.AF_INET, 30, 0, 0, 2)
    assert set(attributes(body[8:]).values()) == {bytes([169, 254, 77, 2])}


def test_an_error_reply_raises_its_errno() -> None:
    error = struct.pack("=i", -errno.EEXIST) + message(RTM_NEWLINK, 0, 5, b"")
    reply = message(NLMSG_ERROR, 0, 5, error)
    with pytest.raises(FileExistsError):
        parse_reply(reply, 5)
    assert parse_reply(reply, 6) is None
    ack = message(NLMSG_ERROR, 0, 5, struct.pack("=i", 0) + message(RTM_NEWLINK, 0, 5, b""))
    assert parse_reply(ack, 5) == ack[16:]


@pytest.mark.root
def test_a_veth_pair_across_two_namespaces_comes_up() -> None:
    needs_root()

    def in_fresh_namespace() -> tuple[int, Rtnetlink]:
        linux.unshare(linux.CLONE_NEWNET)
        return linux.open_netns(), Rtnetlink()

    here_fd, here = in_new_thread(in_fresh_namespace)
    there_fd, there = in_new_thread(in_fresh_namespace)
    try:
        here.create_veth("a", "b", there_fd)
        with pytest.raises(FileExistsError):
            here.create_veth("a", "c", there_fd)
        a, b = here.link_index("a"), there.link_index("b")
        here.add_address(a, ipaddress.IPv4Interface("169.254.1.1/30"))
        here.set_up(a)
        there.set_up(b)
        with pytest.raises(OSError, match="No such device") as raised:
            here.link_index("b")
        assert raised.value.errno == errno.ENODEV
        for netlink, name in ((here, "a"), (there, "b")):

            def is_up(netlink: Rtnetlink = netlink, name: str = name) -> bool:
                return netlink.operstate(name) == IF_OPER_UP

            wait_for(is_up)
    finally:
        for closing in (here, there):
            closing.close()
        os.close(here_fd)
        os.close(there_fd)

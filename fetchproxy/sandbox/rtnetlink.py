"""A minimal rtnetlink client: create a veth pair, add an address and a route, bring a link up.

Why not ``ip``: it names a target namespace only by PID or by a name under
``/run/netns``, and the sandbox's namespaces have neither; rtnetlink takes the
namespace as a file descriptor (``IFLA_NET_NS_FD``) and costs no process.

A netlink socket acts on the network namespace its creating thread was in, so
one :class:`Rtnetlink` per namespace, opened while the thread is inside it.
Message building is pure (the ``*_message`` functions); only
:meth:`Rtnetlink.request` does I/O.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_GETADDR = 22
RTM_NEWROUTE = 24
NLMSG_DONE = 3
NLM_F_DUMP = 0x300
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
IFLA_LINKINFO = 18
IFLA_NET_NS_FD = 28
IFLA_INFO_KIND = 1
IFLA_INFO_DATA = 2
VETH_INFO_PEER = 1
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFF_UP = 0x1
IF_OPER_UP = 6
LOOPBACK_INDEX = 1  # the kernel registers lo first in every namespace

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
_RTATTR = struct.Struct("=HH")  # length, type
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst/src len, tos, table, protocol, scope, type
_RT_TABLE_MAIN = 254
_RTPROT_STATIC = 4
_RT_SCOPE_UNIVERSE = 0
_RTN_UNICAST = 1
_RTA_GATEWAY = 5
_RTA_OIF = 4
_NLMSGERR = struct.Struct("=i")  # -errno, followed by the request's header


def _align(length: int) -> int:
    return (length + 3) & ~3


def attribute(kind: int, payload: bytes) -> bytes:
    """One rtattr, padded to four bytes."""
    length = _RTATTR.size + len(payload)
    return _RTATTR.pack(length, kind) + payload + b"\0" * (_align(length) - length)


def _name(name: str) -> bytes:
    return name.encode() + b"\0"


def _ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)


def message(kind: int, flags: int, sequence: int, body: bytes) -> bytes:
    """A netlink message: header and body."""
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, sequence, 0) + body


def new_veth_body(name: str, peer_name: str, peer_netns_fd: int) -> bytes:
    """RTM_NEWLINK: a veth ``name`` here whose peer ``peer_name`` is born in ``peer_netns_fd``."""
    peer = (
        _ifinfo()
        + attribute(IFLA_IFNAME, _name(peer_name))
        + attribute(IFLA_NET_NS_FD, struct.pack("=I", peer_netns_fd))
    )
    info = attribute(IFLA_INFO_KIND, b"veth") + attribute(
        IFLA_INFO_DATA, attribute(VETH_INFO_PEER, peer)
    )
    return _ifinfo() + attribute(IFLA_IFNAME, _name(name)) + attribute(IFLA_LINKINFO, info)


def link_up_body(index: int) -> bytes:
    """RTM_NEWLINK on an existing link: set IFF_UP."""
    return _ifinfo(index=index, flags=IFF_UP, change=IFF_UP)


def get_link_body(name: str) -> bytes:
    """RTM_GETLINK of one link by name."""
    return _ifinfo() + attribute(IFLA_IFNAME, _name(name))


def new_address_body(index: int, interface: ipaddress.IPv4Interface) -> bytes:
    """RTM_NEWADDR: ``interface`` (address/prefix) on link ``index``."""
    packed = interface.ip.packed
    return (
        _IFADDRMSG.pack(socket.AF_INET, interface.network.prefixlen, 0, 0, index)
        + attribute(IFA_LOCAL, packed)
        + attribute(IFA_ADDRESS, packed)
    )


def default_route_body(gateway: ipaddress.IPv4Address, index: int) -> bytes:
    """RTM_NEWROUTE: 0.0.0.0/0 via ``gateway`` on link ``index``."""
    return (
        _RTMSG.pack(
            socket.AF_INET,
            0,
            0,
            0,
            _RT_TABLE_MAIN,
            _RTPROT_STATIC,
            _RT_SCOPE_UNIVERSE,
            _RTN_UNICAST,
            0,
        )
        + attribute(_RTA_GATEWAY, gateway.packed)
        + attribute(_RTA_OIF, struct.pack("=i", index))
    )


def parse_addresses(data: bytes) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses in RTM_NEWADDR messages of a dump reply (``IFA_LOCAL``, else
    ``IFA_ADDRESS``)."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _port = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            break
        if kind == RTM_NEWADDR:
            body = data[offset + _NLMSGHDR.size : offset + length]
            family = body[0]
            found_attributes = attributes(body[_IFADDRMSG.size :])
            raw = found_attributes.get(IFA_LOCAL) or found_attributes.get(IFA_ADDRESS)
            if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                found.append(ipaddress.ip_address(raw))
        offset += _align(length)
    return found


def attributes(data: bytes) -> dict[int, bytes]:
    """The rtattrs in ``data`` by type (the last one of a type wins)."""
    found = {}
    offset = 0
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            break
        found[kind & 0x3FFF] = data[offset + _RTATTR.size : offset + length]
        offset += _align(length)
    return found


def parse_reply(data: bytes, sequence: int) -> bytes | None:
    """The body of the reply to ``sequence`` in ``data``, or None; an error reply raises OSError."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, seq, _port = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            break
        body = data[offset + _NLMSGHDR.size : offset + length]
        if seq == sequence:
            if kind == NLMSG_ERROR:
                (error,) = _NLMSGERR.unpack_from(body)
                if error:
                    raise OSError(-error, os.strerror(-error))
            return body
        offset += _align(length)
    return None


def _dump_done(data: bytes) -> bool:
    """Whether ``data`` holds the NLMSG_DONE that ends a dump (an error ends it too)."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, _seq, _port = _NLMSGHDR.unpack_from(data, offset)
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR:
            (error,) = _NLMSGERR.unpack_from(data, offset + _NLMSGHDR.size)
            if error:
                raise OSError(-error, os.strerror(-error))
            return True
        if length < _NLMSGHDR.size:
            break
        offset += _align(length)
    return not data


class Rtnetlink:
    """A NETLINK_ROUTE socket bound to the calling thread's current network namespace."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self._socket.bind((0, 0))
        self._sequence = 0

    @property
    def socket(self) -> socket.socket:
        """The netlink socket itself (to ask which namespace it is in)."""
        return self._socket

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> Rtnetlink:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(self, kind: int, body: bytes, flags: int = NLM_F_ACK) -> bytes:
        """Send one request; return its reply's body (for an ACK, the error header)."""
        self._sequence += 1
        self._socket.send(message(kind, NLM_F_REQUEST | flags, self._sequence, body))
        while True:
            reply = parse_reply(self._socket.recv(65536), self._sequence)
            if reply is not None:
                return reply

    def create_veth(self, name: str, peer_name: str, peer_netns_fd: int) -> None:
        body = new_veth_body(name, peer_name, peer_netns_fd)
        self.request(RTM_NEWLINK, body, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def link_index(self, name: str) -> int:
        reply = self.request(RTM_GETLINK, get_link_body(name), 0)
        _family, _type, index, _flags, _change = _IFINFOMSG.unpack_from(reply)
        return int(index)

    def operstate(self, name: str) -> int:
        """The link's RFC 2863 operational state (IF_OPER_UP when it passes traffic)."""
        reply = self.request(RTM_GETLINK, get_link_body(name), 0)
        state = attributes(reply[_IFINFOMSG.size :]).get(IFLA_OPERSTATE, b"\0")
        return state[0]

    def set_up(self, index: int) -> None:
        self.request(RTM_NEWLINK, link_up_body(index))

    def addresses(self) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        """Every address of every link in this namespace (a dump)."""
        self._sequence += 1
        body = _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self._socket.send(message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, self._sequence, body))
        found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
        while True:
            data = self._socket.recv(65536)
            found.extend(parse_addresses(data))
            if _dump_done(data):
                return found

    def add_default_route(self, gateway: ipaddress.IPv4Address, index: int) -> None:
        body = default_route_body(gateway, index)
        self.request(RTM_NEWROUTE, body, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def add_address(self, index: int, interface: ipaddress.IPv4Interface) -> None:
        body = new_address_body(index, interface)
        self.request(RTM_NEWADDR, body, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

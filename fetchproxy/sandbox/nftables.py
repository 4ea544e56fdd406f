"""The edge's interception rules, as one raw nf_tables netlink batch: :func:`install_edge_rules`.

With ``--intercept transparent`` the build's TCP goes wherever it likes, and the edge namespace
takes all of it: this table is installed in the edge (never in the host) by one nfnetlink batch,
which the kernel applies atomically, all or nothing. In nft syntax::

    table ip fetchproxy {
      chain early { type filter hook prerouting priority raw; policy accept;
        tcp dport { 21, 22, 23, 25, 110, 143, 3306, 5432, 6379, 9418, 11211, 27017 }
          reject with tcp reset
      }
      chain dstnat { type nat hook prerouting priority dstnat; policy accept;
        ip daddr EDGE tcp dport EXPLICIT accept
        meta l4proto { tcp, udp } th dport 53 redirect to :DNS
        meta l4proto tcp redirect to :TRANSPARENT
      }
      chain gate { type filter hook prerouting priority filter; policy accept;
        ip daddr EDGE tcp dport { DNS, EXPLICIT, TRANSPARENT } accept
        ip daddr EDGE udp dport DNS accept
        meta l4proto udp reject with icmp type port-unreachable
        reject with icmp type admin-prohibited
      }
    }

so the explicit proxy stays where it was, every name lookup reaches the DNS stub whatever
resolver the build asks, every other TCP connection reaches the transparent listener (its
original destination read back with ``SO_ORIGINAL_DST``), and anything else (QUIC, other UDP,
ICMP) is refused at once, so clients fall back to TCP instead of waiting. Ports where the
server speaks first (:data:`SERVER_FIRST_PORTS`) get a reset: a proxy would wait forever for a
request that never comes.

No ``nft`` binary and no libnftables: a library that opens its netlink socket when its context
is made sends to whichever namespace that thread was in. Here the socket is opened by the
caller's thread (which must be in the edge), and :func:`install` asks the kernel which
namespace the socket belongs to (``SIOCGSKNS``) before it sends anything: a batch meant for the
edge is never applied to the host. Message building is pure (:func:`rules_batch`).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_NEWTABLE = 0
NFT_MSG_GETTABLE = 1
NLMSG_DONE = 3
NLM_F_DUMP = 0x300
NFT_MSG_NEWCHAIN = 3
NFT_MSG_NEWRULE = 6
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_APPEND = 0x800
NLA_F_NESTED = 0x8000
NFPROTO_IPV4 = 2
SIOCGSKNS = 0x894C
"""ioctl: a new file descriptor for the network namespace a socket belongs to."""

_TABLE_NAME = 1
_CHAIN_TABLE, _CHAIN_NAME, _CHAIN_HOOK, _CHAIN_POLICY, _CHAIN_TYPE = 1, 3, 4, 5, 7
_HOOK_NUM, _HOOK_PRIORITY = 1, 2
_RULE_TABLE, _RULE_CHAIN, _RULE_EXPRESSIONS = 1, 2, 4
_LIST_ELEM = 1
_EXPR_NAME, _EXPR_DATA = 1, 2
_DATA_VALUE, _DATA_VERDICT = 1, 2
_VERDICT_CODE = 1

_PRE_ROUTING = 0
_ACCEPT = 1
_REG_VERDICT, _REG_1 = 0, 1
_NETWORK_HEADER, _TRANSPORT_HEADER = 1, 2
_META_L4PROTO = 16
_CMP_EQ = 0
_NAT_RANGE_PROTO_SPECIFIED = 2
_REJECT_ICMP_UNREACH, _REJECT_TCP_RST = 0, 1
_ICMP_PORT_UNREACH = 3
_ICMP_ADMIN_PROHIBITED = 13
_PRIORITY_RAW, _PRIORITY_DSTNAT, _PRIORITY_FILTER = -300, -100, 0

TABLE = "fetchproxy"
DNS_PORT = 53
SERVER_FIRST_PORTS = (21, 22, 23, 25, 110, 143, 3306, 5432, 6379, 9418, 11211, 27017)
"""Protocols where the server speaks first (FTP, SSH, telnet, SMTP, POP3, IMAP, MySQL,
PostgreSQL, Redis, git://, memcached, MongoDB): a TCP reset at once."""

_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("=BBH")
_NLATTR = struct.Struct("=HH")


class WrongNamespaceError(OSError):
    """The netlink socket is not in the namespace the rules are meant for: nothing was sent."""


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, payload: bytes) -> bytes:
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, kind) + payload + b"\0" * (_align(length) - length)


def _nested(kind: int, *children: bytes) -> bytes:
    return _attr(kind | NLA_F_NESTED, b"".join(children))


def _string(kind: int, value: str) -> bytes:
    return _attr(kind, value.encode() + b"\0")


def _be32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("!i", value))


def _expr(name: str, *data: bytes) -> bytes:
    return _nested(_LIST_ELEM, _string(_EXPR_NAME, name), _nested(_EXPR_DATA, *data))


def _payload(base: int, offset: int, length: int) -> bytes:
    return _expr("payload", _be32(1, _REG_1), _be32(2, base), _be32(3, offset), _be32(4, length))


def _cmp_eq(value: bytes) -> bytes:
    return _expr("cmp", _be32(1, _REG_1), _be32(2, _CMP_EQ), _nested(3, _attr(_DATA_VALUE, value)))


def _l4(proto: int) -> list[bytes]:
    return [_expr("meta", _be32(2, _META_L4PROTO), _be32(1, _REG_1)), _cmp_eq(bytes([proto]))]


def _dport(port: int) -> list[bytes]:
    return [_payload(_TRANSPORT_HEADER, 2, 2), _cmp_eq(struct.pack("!H", port))]


def _daddr(address: ipaddress.IPv4Address) -> list[bytes]:
    return [_payload(_NETWORK_HEADER, 16, 4), _cmp_eq(address.packed)]


def _accept() -> bytes:
    verdict = _nested(_DATA_VERDICT, _be32(_VERDICT_CODE, _ACCEPT))
    return _expr("immediate", _be32(1, _REG_VERDICT), _nested(2, verdict))


def _redirect_to(port: int) -> list[bytes]:
    value = _nested(2, _attr(_DATA_VALUE, struct.pack("!H", port)))
    return [
        _expr("immediate", _be32(1, _REG_1), value),
        _expr("redir", _be32(1, _REG_1), _be32(3, _NAT_RANGE_PROTO_SPECIFIED)),
    ]


def _reject_icmp(code: int) -> bytes:
    return _expr("reject", _be32(1, _REJECT_ICMP_UNREACH), _attr(2, bytes([code])))


def edge_rules(
    edge: ipaddress.IPv4Address, *, explicit: int, transparent: int, dns: int
) -> list[tuple[str, list[bytes]]]:
    """The rules, as (chain, expressions), in order."""
    tcp, udp = socket.IPPROTO_TCP, socket.IPPROTO_UDP
    reset = _expr("reject", _be32(1, _REJECT_TCP_RST))
    early = [("early", [*_l4(tcp), *_dport(port), reset]) for port in SERVER_FIRST_PORTS]
    return [
        *early,
        ("dstnat", [*_daddr(edge), *_l4(tcp), *_dport(explicit), _accept()]),
        ("dstnat", [*_l4(udp), *_dport(DNS_PORT), *_redirect_to(dns)]),
        ("dstnat", [*_l4(tcp), *_dport(DNS_PORT), *_redirect_to(dns)]),
        ("dstnat", [*_l4(tcp), *_redirect_to(transparent)]),
        *(
            ("gate", [*_daddr(edge), *_l4(tcp), *_dport(port), _accept()])
            for port in (dns, explicit, transparent)
        ),
        ("gate", [*_daddr(edge), *_l4(udp), *_dport(dns), _accept()]),
        ("gate", [*_l4(udp), _reject_icmp(_ICMP_PORT_UNREACH)]),
        ("gate", [_reject_icmp(_ICMP_ADMIN_PROHIBITED)]),
    ]


def _message(kind: int, flags: int, seq: int, body: bytes, res_id: int = 0) -> bytes:
    gen = _NFGENMSG.pack(NFPROTO_IPV4, 0, socket.htons(res_id))
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(gen) + len(body), kind, flags, seq, 0) + gen + body


def _nft(kind: int) -> int:
    return (NFNL_SUBSYS_NFTABLES << 8) | kind


def _chain(name: str, kind: str, priority: int) -> bytes:
    hook = _nested(_CHAIN_HOOK, _be32(_HOOK_NUM, _PRE_ROUTING), _be32(_HOOK_PRIORITY, priority))
    return (
        _string(_CHAIN_TABLE, TABLE)
        + _string(_CHAIN_NAME, name)
        + hook
        + _be32(_CHAIN_POLICY, _ACCEPT)
        + _string(_CHAIN_TYPE, kind)
    )


def _rule(chain: str, expressions: Iterable[bytes]) -> bytes:
    return (
        _string(_RULE_TABLE, TABLE)
        + _string(_RULE_CHAIN, chain)
        + _nested(_RULE_EXPRESSIONS, *expressions)
    )


def rules_batch(
    edge: ipaddress.IPv4Address, *, explicit: int, transparent: int, dns: int
) -> tuple[bytes, range]:
    """The whole batch, and the sequence numbers the kernel acknowledges."""
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE
    parts = [_message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, b"", NFNL_SUBSYS_NFTABLES)]
    seq = 1
    table = _string(_TABLE_NAME, TABLE)
    parts.append(_message(_nft(NFT_MSG_NEWTABLE), create | NLM_F_EXCL, seq, table))
    chains = (
        ("early", "filter", _PRIORITY_RAW),
        ("dstnat", "nat", _PRIORITY_DSTNAT),
        ("gate", "filter", _PRIORITY_FILTER),
    )
    for name, kind, priority in chains:
        seq += 1
        body = _chain(name, kind, priority)
        parts.append(_message(_nft(NFT_MSG_NEWCHAIN), create | NLM_F_EXCL, seq, body))
    for chain, expressions in edge_rules(edge, explicit=explicit, transparent=transparent, dns=dns):
        seq += 1
        body = _rule(chain, expressions)
        parts.append(_message(_nft(NFT_MSG_NEWRULE), create | NLM_F_APPEND, seq, body))
    parts.append(_message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq + 1, b"", NFNL_SUBSYS_NFTABLES))
    return b"".join(parts), range(1, seq + 1)


def socket_netns_inode(sock: socket.socket) -> int:
    """The inode of the network namespace ``sock`` belongs to (``SIOCGSKNS``)."""
    fd = fcntl.ioctl(sock.fileno(), SIOCGSKNS)
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def install(batch: bytes, acks: range, *, netns_inode: int) -> None:
    """Send ``batch`` on a netfilter socket opened by the calling thread, once the kernel says
    the socket is in the namespace ``netns_inode``; raise on any error the kernel reports."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as sock:
        if socket_netns_inode(sock) != netns_inode:
            raise WrongNamespaceError(
                errno.EINVAL, "internal error: the nf_tables socket is not in the edge namespace"
            )
        sock.bind((0, 0))
        sock.send(batch)
        waiting = set(acks)
        while waiting:
            data = sock.recv(65536)
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                length, kind, _flags, seq, _port = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size:
                    break
                if kind == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + _NLMSGHDR.size)
                    if error:
                        raise OSError(-error, f"nf_tables refused the edge's rules: "
                                      f"{os.strerror(-error)}")  # fmt: skip
                    waiting.discard(seq)
                offset += _align(length)


def table_names(*, netns_inode: int) -> list[str]:
    """The nf_tables tables (every family) of the namespace ``netns_inode``, which the calling
    thread must be in: a read, for checks."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as sock:
        if socket_netns_inode(sock) != netns_inode:
            raise WrongNamespaceError(errno.EINVAL, "the socket is not in that namespace")
        sock.bind((0, 0))
        gen = _NFGENMSG.pack(socket.AF_UNSPEC, 0, 0)
        request = _NLMSGHDR.pack(
            _NLMSGHDR.size + len(gen), _nft(NFT_MSG_GETTABLE), NLM_F_REQUEST | NLM_F_DUMP, 1, 0
        )
        sock.send(request + gen)
        names: list[str] = []
        while True:
            data = sock.recv(65536)
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                length, kind, _flags, _seq, _port = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size or kind == NLMSG_DONE:
                    return names
                if kind == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + _NLMSGHDR.size)
                    if error:
                        raise OSError(-error, os.strerror(-error))
                    return names
                body = data[offset + _NLMSGHDR.size + _NFGENMSG.size : offset + length]
                at = 0
                while at + _NLATTR.size <= len(body):
                    size, attr_kind = _NLATTR.unpack_from(body, at)
                    if size < _NLATTR.size:
                        break
                    if attr_kind & 0x3FFF == _TABLE_NAME:
                        names.append(body[at + _NLATTR.size : at + size].rstrip(b"\0").decode())
                    at += _align(size)
                offset += _align(length)


def install_edge_rules(
    edge: ipaddress.IPv4Address, *, explicit: int, transparent: int, dns: int, netns_inode: int
) -> None:
    """The edge's rules, installed from the calling thread, which must be in the namespace
    ``netns_inode`` (the edge)."""
    batch, acks = rules_batch(edge, explicit=explicit, transparent=transparent, dns=dns)
    install(batch, acks, netns_inode=netns_inode)

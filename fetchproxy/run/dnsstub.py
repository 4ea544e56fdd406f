"""The transparent sandbox's DNS: every name gets a synthetic address, :class:`DnsStub`.

With ``--intercept transparent`` the edge redirects every DNS query of the build, to whatever
resolver it was sent (``8.8.8.8`` written into a tool included), to this stub, which listens
in the edge on UDP and TCP port 53. Nothing is looked up: the build learns no real address,
and the proxy later names the server a connection is for from the address it was given
(:class:`SyntheticNames`, read by :func:`fetchproxy.keys.intercepted.intercepted_authority`).

RFC 1035 wire format, UDP and TCP (a two-byte length before each message, several per
connection). What it answers:

- QUERY, class IN, type A: one A record with the name's address from
  :data:`~fetchproxy.keys.intercepted.SYNTHETIC_NETWORK` (unique per name, case aside, for the
  run), TTL 60; ``localhost`` and ``*.localhost`` get 127.0.0.1 (RFC 6761: the sandbox's own);
- any other type (AAAA, HTTPS, SVCB, MX, ...): NOERROR without an answer (NODATA), so clients
  use IPv4 at once; not NOTIMP, which resolvers take as a broken server and retry elsewhere;
- another opcode or class: NOTIMP; a message it cannot read: FORMERR when its header is
  readable, else nothing; a response: nothing;
- the pool used up (131,070 names): SERVFAIL, said once;
- EDNS(0): an OPT record in the query gets one back (RFC 6891 6.1.1).

AA and RA are set in every answer (Go's resolver takes a NOERROR without them for a lame
referral); the question is echoed as it came (0x20 case randomisation survives).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from typing import cast

from fetchproxy.keys.intercepted import SYNTHETIC_NETWORK

logger = logging.getLogger("fetchproxy.dns")

TTL = 60
EDNS_SIZE = 1232
TYPE_A, TYPE_OPT = 1, 41
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NOTIMP = 0, 1, 2, 4
TCP_IDLE = 10.0
"""Seconds a TCP connection may wait for its next query."""
MAX_TCP = 256
"""TCP connections served at once; one more is closed at once."""
_HEADER = struct.Struct("!HHHHHH")
_LOOPBACK = socket.inet_aton("127.0.0.1")
_MAX_NAME = 254


class _FormatError(ValueError):
    pass


class SyntheticNames:
    """Names and the synthetic addresses handed out for them, both ways."""

    def __init__(self, network: ipaddress.IPv4Network = SYNTHETIC_NETWORK) -> None:
        self._next = int(network.network_address) + 1
        self._last = int(network.broadcast_address) - 1
        self._by_name: dict[str, int] = {}
        self._by_address: dict[int, str] = {}
        self.exhausted = False

    def address_of(self, name: str) -> bytes | None:
        """The address for ``name`` (handed out now if it has none); None: the pool is used up."""
        key = name.lower().rstrip(".")
        number = self._by_name.get(key)
        if number is None:
            if self._next > self._last:
                if not self.exhausted:
                    logger.error(
                        "dns: %d names were given addresses; none is left for more",
                        len(self._by_name),
                    )
                    self.exhausted = True
                return None
            number, self._next = self._next, self._next + 1
            self._by_name[key] = number
            self._by_address[number] = key
        return number.to_bytes(4, "big")

    def name_of(self, address: str) -> str | None:
        """The name ``address`` was handed out for; None when it was not."""
        try:
            number = int(ipaddress.IPv4Address(address))
        except ValueError:
            return None
        return self._by_address.get(number)

    def __len__(self) -> int:
        return len(self._by_name)


def _read_name(message: bytes, offset: int) -> tuple[str, int]:
    """A name without compression (a question needs none), and the offset after it."""
    labels: list[str] = []
    total = 0
    while True:
        if offset >= len(message):
            raise _FormatError("name runs past the end")
        length = message[offset]
        offset += 1
        if length == 0:
            return ".".join(labels), offset
        if length & 0xC0:
            raise _FormatError("compressed or extended label in the question")
        label = message[offset : offset + length]
        if len(label) != length:
            raise _FormatError("label runs past the end")
        total += length + 1
        if total > _MAX_NAME:
            raise _FormatError("name longer than 255 bytes")
        labels.append(label.decode("ascii", "replace"))
        offset += length


def _has_opt(message: bytes, offset: int, count: int) -> bool:
    """Whether the additional section holds an OPT record."""
    for _ in range(count):
        try:
            _, offset = _read_name(message, offset)
        except _FormatError:
            return False
        if offset + 10 > len(message):
            return False
        kind, _class, _ttl, length = struct.unpack_from("!HHIH", message, offset)
        if kind == TYPE_OPT:
            return True
        offset += 10 + length
    return False


def answer(query: bytes, names: SyntheticNames) -> bytes | None:
    """The response to one DNS message; None to stay silent."""
    if len(query) < _HEADER.size:
        return None
    ident, flags, questions, _answers, _authority, additional = _HEADER.unpack_from(query)
    if flags & 0x8000:
        return None  # a response: never answered, so no two stubs can loop
    opcode = (flags >> 11) & 0xF
    base = 0x8000 | (opcode << 11) | 0x0400 | (flags & 0x0100) | 0x0080  # QR, AA, RD, RA

    def reply(rcode: int, question: bytes = b"", record: bytes = b"", *, opt: bool) -> bytes:
        extra = b"\x00" + struct.pack("!HHIH", TYPE_OPT, EDNS_SIZE, 0, 0) if opt else b""
        head = _HEADER.pack(ident, base | rcode, 1 if question else 0, 1 if record else 0, 0,
                            1 if opt else 0)  # fmt: skip
        return head + question + record + extra

    if opcode != 0:
        return reply(NOTIMP, opt=False)
    if questions != 1:
        return reply(FORMERR, opt=False)
    try:
        name, end = _read_name(query, _HEADER.size)
    except _FormatError:
        return reply(FORMERR, opt=False)
    if end + 4 > len(query):
        return reply(FORMERR, opt=False)
    kind, klass = struct.unpack_from("!HH", query, end)
    question = query[_HEADER.size : end + 4]
    opt = _has_opt(query, end + 4, additional)
    if klass != CLASS_IN:
        return reply(NOTIMP, question, opt=opt)
    lowered = name.lower().rstrip(".")
    if kind != TYPE_A or not lowered:
        return reply(NOERROR, question, opt=opt)  # NODATA
    if lowered == "localhost" or lowered.endswith(".localhost"):
        address: bytes | None = _LOOPBACK
    else:
        address = names.address_of(lowered)
    if address is None:
        return reply(SERVFAIL, question, opt=opt)
    record = b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, CLASS_IN, TTL, 4) + address
    return reply(NOERROR, question, record, opt=opt)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, stub: DnsStub) -> None:
        self.stub = stub
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # not isinstance: Python 3.11's datagram transport is no asyncio.DatagramTransport
        self.transport = cast("asyncio.DatagramTransport", transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self.stub.queries += 1
        response = answer(data, self.stub.names)
        if response is not None and self.transport is not None:
            self.transport.sendto(response, addr)

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an earlier answer: the client is gone


class DnsStub:
    """Answers DNS on the UDP and TCP sockets it is given (bound in the edge by the caller);
    ``queries`` counts what it was asked."""

    def __init__(self, names: SyntheticNames) -> None:
        self.names = names
        self.queries = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self, udp: socket.socket, tcp: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), sock=udp)
        self._udp = transport
        self._tcp = await asyncio.start_server(self._serve_tcp, sock=tcp)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._clients) >= MAX_TCP or task is None:
            writer.close()
            return
        self._clients.add(task)
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(2), TCP_IDLE)
                (length,) = struct.unpack("!H", head)
                query = await asyncio.wait_for(reader.readexactly(length), TCP_IDLE)
                self.queries += 1
                response = answer(query, self.names)
                if response is None:
                    break
                writer.write(struct.pack("!H", len(response)) + response)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            self._clients.discard(task)
            writer.close()

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            for task in list(self._clients):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._tcp.wait_closed()
            self._tcp = None

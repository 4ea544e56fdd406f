"""``Sandbox(intercept="transparent")``: the build gets a route, and the edge takes all of it.

Real namespaces, the real rules (one nf_tables batch installed from a thread in the edge), a
real DNS stub and a listener in the edge that reads ``SO_ORIGINAL_DST``; the builds are Python
programs that dial addresses and names as tools that ignore proxy variables do. The host
namespace is checked to have no table before, during and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import struct
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.run.dnsstub import DnsStub, SyntheticNames
from fetchproxy.sandbox import Sandbox, linux
from fetchproxy.sandbox.netns import in_new_thread
from fetchproxy.sandbox.nftables import (
    WrongNamespaceError,
    install_edge_rules,
    socket_netns_inode,
    table_names,
)
from fetchproxy.sandbox.root import TRANSPARENT_PORT
from tests.sandbox.conftest import PROBE, Builds, host_network_state, needs_root

SO_ORIGINAL_DST = 80


def host_tables() -> list[str]:
    return table_names(netns_inode=linux.netns_inode())


def edge_tables(sandbox: Sandbox) -> list[str]:
    fd = sandbox.namespaces.edge_fd

    def read() -> list[str]:
        linux.setns(fd, linux.CLONE_NEWNET)
        return table_names(netns_inode=linux.netns_inode(fd))

    return in_new_thread(read)


class Edge:
    """The DNS stub and a TCP listener in the edge that answers each connection with the
    original destination it read back, on an event loop of its own."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.names = SyntheticNames()
        self.stub = DnsStub(self.names)
        self.udp, self.tcp = sandbox.dns_sockets()
        self.listener = sandbox.listen_socket(TRANSPARENT_PORT)
        self.seen: list[tuple[str, int]] = []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        await self.stub.start(self.udp, self.tcp)
        self._server = await asyncio.start_server(self._serve, sock=self.listener)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raw = writer.get_extra_info("socket").getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        port, address = struct.unpack_from("!2xH4s", raw)
        destination = (socket.inet_ntoa(address), port)
        self.seen.append(destination)
        writer.write(json.dumps(destination).encode())
        await writer.drain()
        writer.close()

    def __enter__(self) -> Edge:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            await self.stub.stop()
            self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def transparent() -> Iterator[Sandbox]:
    needs_root()
    assert "fetchproxy" not in host_tables()
    with Sandbox(proxy_port=3128, intercept="transparent") as live:
        yield live
    assert "fetchproxy" not in host_tables()


@pytest.fixture
def edge(transparent: Sandbox) -> Iterator[Edge]:
    with Edge(transparent) as live:
        yield live


REACH = PROBE + textwrap.dedent(
    """
    def read(host, port):
        s = socket.create_connection((host, port), timeout=3)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        return json.loads(data)

    def dns(server, name, qtype=1, tcp=False):
        query = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
        query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0"
        query += struct.pack("!HH", qtype, 1)
        if tcp:
            s = socket.create_connection((server, 53), timeout=3)
            s.sendall(struct.pack("!H", len(query)) + query)
            reply = s.recv(4096)[2:]
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.sendto(query, (server, 53))
            reply = s.recv(4096)
        count = struct.unpack_from("!H", reply, 6)[0]
        return [count, socket.inet_ntoa(reply[-4:]) if count else None]

    def udp_refused(host, port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.connect((host, port))
        start = time.monotonic()
        s.send(b"quic?")
        try:
            s.recv(100)
            return ["answered", 0]
        except OSError as e:
            return [errno.errorcode.get(e.errno, repr(e)), time.monotonic() - start]
    """
)


def test_every_tcp_connection_reaches_the_edge_with_its_original_destination(
    transparent: Sandbox, edge: Edge, tmp_path: Path
) -> None:
    code = REACH + textwrap.dedent(
        """
        import struct
        name = socket.gethostbyname("files.example.test")
        print(json.dumps({
            "literal": read("93.184.216.34", 443),
            "name": [name, read("files.example.test", 8443)],
            "edge": read("169.254.77.1", 80),
            "ssh": tcp("93.184.216.34", 22),
        }))
        """
    )
    out = Builds(transparent, tmp_path).run(code).json()
    assert out["literal"] == ["93.184.216.34", 443]
    address = edge.names.address_of("files.example.test")
    assert address is not None
    assert out["name"] == [socket.inet_ntoa(address), [socket.inet_ntoa(address), 8443]]
    assert out["edge"] == ["169.254.77.1", 80]
    # a server-speaks-first port gets a reset at once, not a proxy that waits forever
    assert out["ssh"][0] == "ECONNREFUSED"
    assert out["ssh"][1] < 1
    assert ("93.184.216.34", 22) not in edge.seen


def test_dns_to_any_resolver_is_answered_by_the_stub(
    transparent: Sandbox, edge: Edge, tmp_path: Path
) -> None:
    code = REACH + textwrap.dedent(
        """
        import struct
        print(json.dumps({
            "google": dns("8.8.8.8", "registry.npmjs.org"),
            "google-tcp": dns("8.8.8.8", "registry.npmjs.org", tcp=True),
            "other": dns("9.9.9.9", "pypi.org"),
            "aaaa": dns("8.8.8.8", "pypi.org", qtype=28),
            "resolv.conf": open("/etc/resolv.conf").read(),
            "hosts": open("/etc/hosts").read(),
            "getaddrinfo": sorted({a[4][0] for a in socket.getaddrinfo("pypi.org", 443)}),
        }))
        """
    )
    out = Builds(transparent, tmp_path).run(code).json()
    npm = edge.names.address_of("registry.npmjs.org")
    pypi = edge.names.address_of("pypi.org")
    assert npm is not None
    assert pypi is not None
    assert out["google"] == [1, socket.inet_ntoa(npm)]
    assert out["google-tcp"] == [1, socket.inet_ntoa(npm)]
    assert out["other"] == [1, socket.inet_ntoa(pypi)]
    assert out["aaaa"] == [0, None]
    assert out["getaddrinfo"] == [socket.inet_ntoa(pypi)]
    assert "nameserver 169.254.77.1" in out["resolv.conf"]
    assert "pypi.org" not in out["hosts"]
    assert edge.stub.queries >= 5


def test_other_udp_and_icmp_are_refused_at_once(
    transparent: Sandbox, edge: Edge, tmp_path: Path
) -> None:
    code = REACH + textwrap.dedent(
        """
        import subprocess
        ping = subprocess.run(["ping", "-c", "1", "-W", "2", "1.1.1.1"], capture_output=True)
        print(json.dumps({
            "quic": udp_refused("1.1.1.1", 443),
            "edge-udp": udp_refused("169.254.77.1", 3128),
            "ping": ping.returncode,
        }))
        """
    )
    out = Builds(transparent, tmp_path).run(code).json()
    for name in ("quic", "edge-udp"):
        assert out[name][0] == "ECONNREFUSED", out
        assert out[name][1] < 1
    assert out["ping"] != 0


def test_the_rules_are_in_the_edge_only_and_the_host_is_left_as_it_was() -> None:
    needs_root()
    before = host_network_state()
    host_before = host_tables()
    ratelimit = Path("/proc/sys/net/ipv4/icmp_ratelimit")
    ratelimit_before = ratelimit.read_text()
    with Sandbox(proxy_port=3128, intercept="transparent") as live:
        assert edge_tables(live) == ["fetchproxy"]
        assert host_tables() == host_before
        assert host_network_state() == before
        assert ratelimit.read_text() == ratelimit_before
        edge_fd = live.namespaces.edge_fd

        def edge_sysctls() -> tuple[str, str]:
            linux.setns(edge_fd, linux.CLONE_NEWNET)
            forward = Path("/proc/sys/net/ipv4/ip_forward")
            return ratelimit.read_text().strip(), forward.read_text().strip()

        # every refusal answered at once; and nothing is forwarded: what the rules do not
        # send to a listener of the edge goes nowhere
        assert in_new_thread(edge_sysctls) == ("0", "0")
    assert host_tables() == host_before
    assert host_network_state() == before


def test_a_socket_outside_the_edge_is_never_sent_the_rules() -> None:
    """The namespace of the netlink socket itself is checked before anything is sent: from
    the host, the install refuses and the host gets no table."""
    needs_root()
    with Sandbox(proxy_port=3128) as live, pytest.raises(WrongNamespaceError):
        install_edge_rules(
            ipaddress.IPv4Address("169.254.77.1"),
            explicit=3128,
            transparent=3129,
            dns=53,
            netns_inode=linux.netns_inode(live.namespaces.edge_fd),
        )
    assert "fetchproxy" not in host_tables()
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        assert socket_netns_inode(sock) == linux.netns_inode()


def test_the_explicit_proxy_sandbox_has_no_rules_and_no_route(tmp_path: Path) -> None:
    needs_root()
    with Sandbox(proxy_port=3128) as live:
        assert edge_tables(live) == []
        out = Builds(live, tmp_path).run(PROBE + 'print(json.dumps(tcp("93.184.216.34", 443)))')
        assert out.json()[0] == "ENETUNREACH"

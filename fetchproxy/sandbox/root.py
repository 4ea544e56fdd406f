"""The network sandbox for a launcher running as root: :class:`Sandbox`."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from fetchproxy.sandbox import linux
from fetchproxy.sandbox.build import BuildOwner
from fetchproxy.sandbox.mountplan import NetworkFiles
from fetchproxy.sandbox.netns import (
    EDGE_INTERFACE,
    SANDBOX_INTERFACE,
    SANDBOX_LINK,
    NetworkNamespaces,
    in_new_thread,
)
from fetchproxy.sandbox.nftables import DNS_PORT, install_edge_rules, socket_netns_inode
from fetchproxy.sandbox.rtnetlink import Rtnetlink
from fetchproxy.sandbox.support import SandboxError, sandbox_support

Intercept = Literal["proxy", "transparent"]
INTERCEPT_CHOICES: tuple[Intercept, ...] = ("proxy", "transparent")
TRANSPARENT_PORT = 3129
"""Where the edge's rules send the build's TCP (``--intercept transparent``)."""
TRANSPARENT_DNS = NetworkFiles(
    resolv_conf=f"# fetchproxy sandbox: every DNS query is answered by the sandbox's stub.\n"
    f"nameserver {EDGE_INTERFACE.ip}\noptions timeout:1 attempts:2\n".encode(),
    hosts=b"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
)
"""The build's resolv.conf and /etc/hosts with ``--intercept transparent``: every name but
localhost goes to the stub (a host's own /etc/hosts entry would send the build to a literal
address, and the proxy could no longer tell which name it meant)."""
_EDGE_SYSCTLS = {
    # nftables' reject sends its ICMP errors through icmp_send(), rate-limited per
    # destination (one a second after a burst of six): off, so every refused datagram is
    # answered at once and no client waits for a timeout.
    "net/ipv4/icmp_ratelimit": "0",
}


class Sandbox(BuildOwner):
    """Two fresh network namespaces joined by a veth pair, and builds run in one of them.

    Use as a context manager: ``__enter__`` builds the namespaces, ``__exit__``
    kills any build still running and drops every reference (idempotent, safe
    after errors). The proxy listens in the *edge* namespace at
    :attr:`edge_address`, the only address a build can reach.

    ``intercept="transparent"``: the build gets a default route through the veth, and the
    edge takes all of its traffic (:mod:`~fetchproxy.sandbox.nftables`): TCP to any address
    goes to ``edge_address:transparent_port``, DNS to the caller's stub on port 53
    (:meth:`dns_sockets`), the rest is refused at once. The build's resolv.conf names the
    stub and its /etc/hosts only localhost. The rules live and die with the edge.
    """

    edge_address = str(EDGE_INTERFACE.ip)
    sandbox_address = str(SANDBOX_INTERFACE.ip)

    def __init__(
        self,
        *,
        proxy_port: int = 8080,
        intercept: Intercept = "proxy",
        transparent_port: int = TRANSPARENT_PORT,
    ) -> None:
        self.proxy_port = proxy_port
        self.intercept = intercept
        self.transparent_port = transparent_port
        self._namespaces: NetworkNamespaces | None = None
        super().__init__()
        self._sockets: list[socket.socket] = []
        if intercept == "transparent":
            self._dns = TRANSPARENT_DNS

    def __enter__(self) -> Sandbox:
        supported, reason = sandbox_support()
        if not supported:
            raise SandboxError(reason)
        try:
            self._namespaces = NetworkNamespaces()
        except OSError as error:
            raise SandboxError(
                f"cannot create the network sandbox (network namespaces and a "
                f"veth pair): {error.strerror or error}. Is the veth driver available "
                f"(`modprobe veth`)? Or use --no-sandbox to run the build without network "
                f"isolation.",
                errno=error.errno,
            ) from error
        if self.intercept == "transparent":
            try:
                self._intercept(self._namespaces)
            except OSError as error:
                self.close()
                raise SandboxError(
                    f"cannot set up --intercept transparent: {error.strerror or error}. It "
                    "needs nf_tables with NAT in the kernel (`modprobe nf_tables nft_redir "
                    "nft_reject_ipv4`); or use the explicit proxy (the default).",
                    errno=error.errno,
                ) from error
        return self

    def _intercept(self, namespaces: NetworkNamespaces) -> None:
        """A default route through the veth for the build, and the edge's rules that take
        all of its traffic (:mod:`fetchproxy.sandbox.nftables`). Each netlink socket is opened
        on a thread inside its namespace, and checked to be there before anything is sent."""

        def route() -> None:
            linux.setns(namespaces.sandbox_fd, linux.CLONE_NEWNET)
            with Rtnetlink() as netlink:
                _check_namespace(netlink.socket, namespaces.sandbox_fd)
                netlink.add_default_route(EDGE_INTERFACE.ip, netlink.link_index(SANDBOX_LINK))

        def rules() -> None:
            linux.setns(namespaces.edge_fd, linux.CLONE_NEWNET)
            if linux.netns_inode() != linux.netns_inode(namespaces.edge_fd):
                raise SandboxError("internal error: not in the edge namespace")
            for name, value in _EDGE_SYSCTLS.items():
                Path("/proc/sys", name).write_text(value, encoding="ascii")
            install_edge_rules(
                EDGE_INTERFACE.ip,
                explicit=self.proxy_port,
                transparent=self.transparent_port,
                dns=DNS_PORT,
                netns_inode=linux.netns_inode(namespaces.edge_fd),
            )

        in_new_thread(route)
        in_new_thread(rules)

    def dns_sockets(self) -> tuple[socket.socket, socket.socket]:
        """UDP and TCP sockets bound at ``edge_address:53`` in the edge, for the DNS stub
        (``--intercept transparent``); :meth:`close` closes them."""
        with self.in_edge():
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sockets.append(udp)
            udp.bind((self.edge_address, DNS_PORT))
            tcp = socket.create_server((self.edge_address, DNS_PORT))
        self._sockets.append(tcp)
        return udp, tcp

    def close(self) -> None:
        """Kill running builds, close :meth:`listen_socket`'s sockets, drop the namespaces."""
        super().close()
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()
        if self._namespaces is not None:
            self._namespaces.close()
            self._namespaces = None

    @property
    def namespaces(self) -> NetworkNamespaces:
        """The host, edge and sandbox network namespaces, as file descriptors."""
        if self._namespaces is None:
            raise SandboxError("the sandbox is not set up (use it as `with Sandbox()`)")
        return self._namespaces

    def enter_edge(self) -> None:
        """Move the calling thread (only it) into the edge namespace."""
        self.namespaces.enter_edge()

    def leave_edge(self) -> None:
        """Move the calling thread back into the namespace :meth:`__enter__` ran in."""
        self.namespaces.leave_edge()

    @contextlib.contextmanager
    def in_edge(self) -> Iterator[None]:
        """The calling thread in the edge namespace for the ``with`` block.

        Sockets created inside stay in the edge namespace; sockets created after
        it, and threads started after it, are in the host namespace again.
        """
        with self.namespaces.in_edge():
            yield

    def listen_socket(self, port: int = 0) -> socket.socket:
        """A TCP socket listening at ``edge_address:port`` in the edge namespace.

        It keeps the edge namespace alive while it is open; :meth:`close` closes it.
        """
        with self.in_edge():
            sock = socket.create_server((self.edge_address, port))
        self._sockets.append(sock)
        return sock

    def _build_namespaces(self) -> tuple[int, int | None]:
        return self.namespaces.sandbox_fd, None


def _check_namespace(sock: socket.socket, netns_fd: int) -> None:
    if socket_netns_inode(sock) != linux.netns_inode(netns_fd):
        raise SandboxError("internal error: a netlink socket is not in the namespace it is for")

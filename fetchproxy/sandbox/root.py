"""The network sandbox for a launcher running as root: :class:`Sandbox`."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from fetchproxy.sandbox.build import BuildOwner
from fetchproxy.sandbox.netns import EDGE_INTERFACE, SANDBOX_INTERFACE, NetworkNamespaces
from fetchproxy.sandbox.support import SandboxError, sandbox_support


class Sandbox(BuildOwner):
    """Two fresh network namespaces joined by a veth pair, and builds run in one of them.

    Use as a context manager: ``__enter__`` builds the namespaces, ``__exit__``
    kills any build still running and drops every reference (idempotent, safe
    after errors). The proxy listens in the *edge* namespace at
    :attr:`edge_address`, the only address a build can reach.
    """

    edge_address = str(EDGE_INTERFACE.ip)
    sandbox_address = str(SANDBOX_INTERFACE.ip)

    def __init__(self, *, proxy_port: int = 8080) -> None:
        self.proxy_port = proxy_port
        self._namespaces: NetworkNamespaces | None = None
        super().__init__()
        self._sockets: list[socket.socket] = []

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
        return self

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

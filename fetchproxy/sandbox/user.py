"""The network sandbox for a launcher without root: :class:`UserSandbox`.

One user namespace (the launcher's uid and gid mapped to 0) and a network namespace it owns,
with only lo: no veth, no route, nothing of the host's. The proxy cannot listen in there (the
launcher may not join it while it has threads), so a listener on the sandbox's own
127.0.0.1 is created inside by a short-lived holder process (``holder.py``, ``userns.py``) and
handed out: :meth:`UserSandbox.accept_socket`. The caller relays what arrives there to the
proxy, which listens on the host's loopback (``fetchproxy/relay.py``).

Builds run as with :class:`~fetchproxy.sandbox.Sandbox`: a PID namespace with the supervisor
as PID 1, the same private mounts, and a nested user namespace that locks them.
docs/sandbox.md says what this sandbox guarantees and what it lacks compared to the root one.
"""

from __future__ import annotations

import socket

from fetchproxy.sandbox.build import BuildOwner
from fetchproxy.sandbox.holder import UserNamespaceError, UserNamespaces, create_user_namespaces
from fetchproxy.sandbox.support import SandboxError, user_sandbox_problem
from fetchproxy.sandbox.userns import PROXY_HOST


class UserSandbox(BuildOwner):
    """A user and network namespace with only lo, and builds run in it.

    Use as a context manager: ``__enter__`` creates the namespaces and the
    listener at :attr:`proxy_host`:``proxy_port`` inside, ``__exit__`` kills any
    build still running and closes every descriptor (idempotent). Needs no
    privilege, only unprivileged user namespaces. :meth:`spawn` runs builds as
    :meth:`Sandbox.spawn <fetchproxy.sandbox.Sandbox.spawn>` does; the returned
    process's ``pid`` is that of the entry process, which passes signals on to
    the supervisor and exits as it does.
    """

    proxy_host = PROXY_HOST

    def __init__(self, *, proxy_port: int = 8080) -> None:
        self.proxy_port = proxy_port
        self._namespaces: UserNamespaces | None = None
        super().__init__()

    def __enter__(self) -> UserSandbox:
        try:
            self._namespaces = create_user_namespaces(self.proxy_port)
        except UserNamespaceError as error:
            problem = user_sandbox_problem(error)
            raise SandboxError(problem.message(), errno=error.errno) from error
        return self

    def close(self) -> None:
        """Kill running builds, close the listener, drop the namespaces."""
        super().close()
        if self._namespaces is not None:
            self._namespaces.close()
            self._namespaces = None

    @property
    def namespaces(self) -> UserNamespaces:
        """The user and network namespaces as file descriptors, and the listener."""
        if self._namespaces is None:
            raise SandboxError("the sandbox is not set up (use it as `with UserSandbox()`)")
        return self._namespaces

    def accept_socket(self) -> socket.socket:
        """The socket listening at ``proxy_host:proxy_port`` inside the sandbox.

        Connections the build makes to the proxy arrive here; :meth:`close`
        closes it.
        """
        return self.namespaces.listener

    def _build_namespaces(self) -> tuple[int, int | None]:
        namespaces = self.namespaces
        return namespaces.net_fd, namespaces.user_fd

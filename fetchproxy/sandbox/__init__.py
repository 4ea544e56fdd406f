"""The sandbox: a build whose only route leads to the proxy, and that changes nothing else.

Per run, two fresh network namespaces joined by a veth pair (``netns.py``,
configured over rtnetlink, ``rtnetlink.py``): the *sandbox*, where the build
runs, and the *edge*, where the caller binds the proxy's listening socket
(:meth:`Sandbox.listen_socket`, or a thread moved in with
:meth:`Sandbox.in_edge`). The host namespace is never touched. Namespaces are
held by file descriptors only, so nothing outlives the launcher. With
``intercept="transparent"`` the build gets a default route through the veth instead, and the
edge takes all of its traffic by rules installed from inside it (``nftables.py``).

Per build, the launcher prepares (``buildplan.py``) what the supervisor is told:
the build's mounts, decided without I/O (``mountplan.py``) from host facts
(``hostfs.py``); its terminal (``terminal.py``); a seccomp filter refusing TIOCSTI
and TIOCLINUX (``seccomp.py``). ``build.py`` starts the supervisor
(``supervisor.py``), PID 1 of a new PID namespace, which carries the mounts out
(``mounts.py``): a root of the build's own, where every host file system is a
throwaway overlay, the working directory and writable paths are the host's, and
the protected paths and fetchproxy's installation are read-only; a private /dev,
/tmp, /run and /proc; then a user namespace that leaves the build no capability
over anything of the host's and locks every mount. The build runs in a session
of its own, on a pty of its own when it has a terminal. ``linux.py`` wraps the
system calls; ``support.py`` says whether all this is possible here.
docs/sandbox.md has the guarantees.

Without root, :class:`UserSandbox` (``user.py``) builds what an unprivileged
process can: a user namespace and a network namespace with only lo, where a
holder process (``holder.py`` and ``userns.py``) opens the proxy's listening
socket and hands it out; builds run as above, started by an entry process of
their own. :func:`available_sandbox` picks the sandbox for a ``--sandbox`` choice.

The sandbox knows nothing of HTTP.
"""

from fetchproxy.sandbox.build import BuildProcess
from fetchproxy.sandbox.root import Sandbox
from fetchproxy.sandbox.support import (
    SANDBOX_CHOICES,
    BuildStartError,
    SandboxChoice,
    SandboxError,
    SandboxKind,
    available_sandbox,
    sandbox_support,
    user_sandbox_support,
)
from fetchproxy.sandbox.user import UserSandbox

__all__ = [
    "SANDBOX_CHOICES",
    "BuildProcess",
    "BuildStartError",
    "Sandbox",
    "SandboxChoice",
    "SandboxError",
    "SandboxKind",
    "UserSandbox",
    "available_sandbox",
    "sandbox_support",
    "user_sandbox_support",
]

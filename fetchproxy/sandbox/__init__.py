"""The network sandbox: a build whose only route leads to the proxy.

Per run, two fresh network namespaces joined by a veth pair (``netns.py``,
configured over rtnetlink, ``rtnetlink.py``): the *sandbox*, where the build
runs, and the *edge*, where the caller binds the proxy's listening socket
(:meth:`Sandbox.listen_socket`, or a thread moved in with
:meth:`Sandbox.in_edge`). The host namespace is never touched. Namespaces are
held by file descriptors only, so nothing outlives the launcher.

The build (``build.py`` on the launcher's side, ``supervisor.py`` as PID 1
inside) runs in a new PID namespace, a private mount namespace planned by
``mountplan.py`` (tmpfs over /tmp and /run, read-only kernel knobs, DNS that
fails fast), and a user namespace that leaves it no capability over anything
of the host's. ``linux.py`` wraps the system calls; ``support.py`` says
whether all this is possible here. docs/sandbox.md has the guarantees.

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

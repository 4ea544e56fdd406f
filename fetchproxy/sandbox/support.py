"""Can this process build the sandbox, and the error raised when it cannot."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fetchproxy.errors import FetchproxyError

NO_SANDBOX_HINT = "or use --no-sandbox to run the build without network isolation"

# Bits of CapEff in /proc/self/status.
_CAP_SETGID = 6
_CAP_SETUID = 7
_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21
_NEEDED_CAPABILITIES = {
    "CAP_SYS_ADMIN": _CAP_SYS_ADMIN,
    "CAP_NET_ADMIN": _CAP_NET_ADMIN,
    "CAP_SETUID": _CAP_SETUID,
    "CAP_SETGID": _CAP_SETGID,
}


class SandboxError(FetchproxyError, OSError):
    """The network sandbox could not be built, or the build could not be started in it."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def effective_capabilities(status: str) -> int:
    """The CapEff bit set from the text of /proc/<pid>/status."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def missing_capabilities(capabilities: int) -> list[str]:
    return [name for name, bit in _NEEDED_CAPABILITIES.items() if not capabilities >> bit & 1]


def sandbox_support() -> tuple[bool, str]:
    """Whether :class:`~fetchproxy.sandbox.Sandbox` can be built here; if not, why and the fix."""
    if not sys.platform.startswith("linux"):
        return False, (
            f"the network sandbox needs Linux network namespaces; "
            f"this system is {sys.platform}. {NO_SANDBOX_HINT.capitalize()}."
        )
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError as error:
        return (
            False,
            f"cannot read /proc/self/status ({error.strerror}); is /proc mounted?",
        )
    missing = missing_capabilities(effective_capabilities(status))
    if missing:
        return False, (
            "the network sandbox needs root: it creates network namespaces "
            f"and a veth pair, and this process (uid {os.geteuid()}) lacks "
            f"{', '.join(missing)}. Run fetchproxy as root (for example with sudo), "
            f"{NO_SANDBOX_HINT}."
        )
    try:
        user_namespaces = int(Path("/proc/sys/user/max_user_namespaces").read_text("ascii"))
    except FileNotFoundError:
        user_namespaces = 0
    if user_namespaces == 0:
        return False, (
            "the network sandbox runs the build in a user namespace, and this "
            "kernel has them disabled (user.max_user_namespaces is 0 or absent). Enable them "
            f"with `sysctl -w user.max_user_namespaces=10000`, {NO_SANDBOX_HINT}."
        )
    return True, ""

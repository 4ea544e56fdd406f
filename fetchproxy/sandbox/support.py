"""Which sandbox this process can build, and the error raised when it can build none.

Two kinds: ``root`` (:class:`~fetchproxy.sandbox.Sandbox`, which needs root's capabilities)
and ``user`` (:class:`~fetchproxy.sandbox.UserSandbox`, which needs only unprivileged user
namespaces: :func:`user_sandbox_support` tries them for real). :func:`available_sandbox`
picks one for a ``--sandbox`` choice, or says why it cannot and what to do.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fetchproxy.errors import FetchproxyError
from fetchproxy.sandbox.holder import UserNamespaceError, create_user_namespaces

NO_SANDBOX_HINT = "or use --no-sandbox to run the build without network isolation"
SandboxKind = Literal["root", "user"]
SandboxChoice = Literal["auto", "root", "user"]
SANDBOX_CHOICES: tuple[SandboxChoice, ...] = ("auto", "root", "user")

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
_MAX_USER_NAMESPACES = Path("/proc/sys/user/max_user_namespaces")
_UNPRIVILEGED_USERNS_CLONE = Path("/proc/sys/kernel/unprivileged_userns_clone")  # Debian's
_APPARMOR_RESTRICTS_USERNS = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
_USER_NEEDS = "the unprivileged network sandbox needs user namespaces"


class SandboxError(FetchproxyError, OSError):
    """The network sandbox could not be built, or the build could not be started in it."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class BuildStartError(SandboxError):
    """The sandbox is set up, but the build command could not be started in it (``errno``:
    ENOENT when it cannot be found); ``detail`` says why."""

    def __init__(self, message: str, *, errno: int | None, detail: str) -> None:
        super().__init__(message, errno=errno)
        self.detail = detail


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Why a sandbox cannot be built: what it needs, what is wrong here, and the fix."""

    needs: str
    reason: str
    fix: str

    def message(self) -> str:
        return f"{self.needs}, and {self.reason}. {self.fix}, {NO_SANDBOX_HINT}."


def effective_capabilities(status: str) -> int:
    """The CapEff bit set from the text of /proc/<pid>/status."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def missing_capabilities(capabilities: int) -> list[str]:
    return [name for name, bit in _NEEDED_CAPABILITIES.items() if not capabilities >> bit & 1]


def _read_number(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _not_linux() -> str:
    return (
        f"the network sandbox needs Linux network namespaces; "
        f"this system is {sys.platform}. {NO_SANDBOX_HINT.capitalize()}."
    )


def _root_problem() -> str | Problem | None:
    """None when the root sandbox can be built; a Problem when only privilege is missing."""
    if not sys.platform.startswith("linux"):
        return _not_linux()
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError as error:
        return f"cannot read /proc/self/status ({error.strerror}); is /proc mounted?"
    missing = missing_capabilities(effective_capabilities(status))
    if missing:
        return Problem(
            needs="the network sandbox needs root: it creates network namespaces and a veth pair",
            reason=f"this process (uid {os.geteuid()}) lacks {', '.join(missing)}",
            fix="Run fetchproxy as root (for example with sudo)",
        )
    if not _read_number(_MAX_USER_NAMESPACES):
        return (
            "the network sandbox runs the build in a user namespace, and this "
            "kernel has them disabled (user.max_user_namespaces is 0 or absent). Enable them "
            f"with `sysctl -w user.max_user_namespaces=10000`, {NO_SANDBOX_HINT}."
        )
    return None


def _support(problem: str | Problem | None) -> tuple[bool, str]:
    if problem is None:
        return True, ""
    return False, problem if isinstance(problem, str) else problem.message()


def sandbox_support() -> tuple[bool, str]:
    """Whether :class:`~fetchproxy.sandbox.Sandbox` can be built here; if not, why and the fix."""
    return _support(_root_problem())


def user_namespace_limits_problem(
    *, unprivileged_userns_clone: int | None, max_user_namespaces: int | None
) -> Problem | None:
    """What the kernel's settings forbid (the sysctls' values, None where absent), if anything."""
    if unprivileged_userns_clone == 0:
        return Problem(
            needs=_USER_NEEDS,
            reason="this kernel allows them to root only (kernel.unprivileged_userns_clone is 0)",
            fix="Enable them with `sysctl -w kernel.unprivileged_userns_clone=1`",
        )
    if not max_user_namespaces:
        return Problem(
            needs=_USER_NEEDS,
            reason="this kernel has them disabled (user.max_user_namespaces is 0 or absent)",
            fix="Enable them with `sysctl -w user.max_user_namespaces=10000`",
        )
    return None


def user_namespace_failure_problem(
    error: UserNamespaceError, *, euid: int, apparmor_restricts: bool
) -> Problem:
    """Why creating the namespaces failed, from the step and errno the holder reported."""
    if error.step == "userns" and error.errno in (errno.ENOSPC, errno.EUSERS):
        return Problem(
            needs=_USER_NEEDS,
            reason=f"the limit on them is reached ({error.detail})",
            fix="Raise it with `sysctl -w user.max_user_namespaces=10000`",
        )
    if error.step == "userns" and apparmor_restricts:
        return Problem(
            needs=_USER_NEEDS,
            reason=f"AppArmor restricts them ({error.detail}; "
            "kernel.apparmor_restrict_unprivileged_userns is 1)",
            fix="Allow them with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` "
            "or an AppArmor profile for this Python",
        )
    if error.step == "userns":
        return Problem(
            needs=_USER_NEEDS,
            reason=f"creating one is not permitted here ({error.detail})",
            fix="Allow them (a container's seccomp profile or a security module may forbid them)",
        )
    if error.step == "map" and error.errno == errno.EPERM and euid == 0:
        return Problem(
            needs=_USER_NEEDS,
            reason="a root process without CAP_SETFCAP may not map uid 0 into one "
            f"(Linux 5.12 and later; {error.detail})",
            fix="Run fetchproxy as an ordinary user, or with CAP_SETFCAP",
        )
    return Problem(
        needs=_USER_NEEDS,
        reason=f"setting one up failed ({error.step}: {error.detail})",
        fix="Check that `unshare --user --map-root-user --net true` works",
    )


def user_sandbox_problem(error: UserNamespaceError) -> Problem:
    """Why the holder could not create the namespaces, with the fix."""
    limits = user_namespace_limits_problem(
        unprivileged_userns_clone=_read_number(_UNPRIVILEGED_USERNS_CLONE),
        max_user_namespaces=_read_number(_MAX_USER_NAMESPACES),
    )
    if limits is not None:
        return limits
    return user_namespace_failure_problem(
        error, euid=os.geteuid(), apparmor_restricts=_read_number(_APPARMOR_RESTRICTS_USERNS) == 1
    )


def _user_problem() -> str | Problem | None:
    """None when the user sandbox can be built, tried for real (a holder process, ~20 ms)."""
    if not sys.platform.startswith("linux"):
        return _not_linux()
    try:
        create_user_namespaces(0).close()
    except UserNamespaceError as error:
        return user_sandbox_problem(error)
    return None


def user_sandbox_support() -> tuple[bool, str]:
    """Whether :class:`~fetchproxy.sandbox.UserSandbox` can be built; if not, why and the fix."""
    return _support(_user_problem())


def neither_message(root: Problem, user: Problem) -> str:
    """Both sandboxes impossible: both reasons, both fixes."""
    return (
        f"{root.needs}, and {root.reason}. {root.fix}; or: {user.needs}, and {user.reason}. "
        f"{user.fix}, {NO_SANDBOX_HINT}."
    )


def available_sandbox(choice: SandboxChoice = "auto") -> tuple[SandboxKind | None, str]:
    """The sandbox to build for ``choice``; or None, and why not with the fix.

    ``auto`` is ``root`` when this process has the capabilities, else ``user`` when
    unprivileged user namespaces work (tried only then).
    """
    if choice == "user":
        supported, reason = user_sandbox_support()
        return ("user" if supported else None), reason
    root = _root_problem()
    if root is None:
        return "root", ""
    if isinstance(root, str):
        return None, root
    if choice == "root":
        return None, root.message()
    user = _user_problem()
    if user is None:
        return "user", ""
    if isinstance(user, str):
        return None, user
    return None, neither_message(root, user)

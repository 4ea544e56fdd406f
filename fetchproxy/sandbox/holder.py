"""The unprivileged sandbox's namespaces, from the launcher's side: start the holder, take its fds.

The holder (``userns.py``) creates a user namespace and a network namespace with only lo, and a
listener on 127.0.0.1 in it, and hands descriptors for the three over a unix socket. They are
then held by this process only: when it closes them, or dies, the kernel deletes both
namespaces (no build running in them).
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass

from fetchproxy.sandbox.bare import bare_command
from fetchproxy.sandbox.supervisor import parse_message

_HOLDER_TIMEOUT = 30.0


class UserNamespaceError(OSError):
    """The holder could not create the namespaces; ``step`` says where it failed."""

    def __init__(self, errno: int, step: str, detail: str) -> None:
        super().__init__(errno, detail)
        self.step = step
        self.detail = detail


@dataclass
class UserNamespaces:
    """Descriptors for the user namespace, its network namespace, and the listener in it."""

    user_fd: int
    net_fd: int
    listener: socket.socket

    def close(self) -> None:
        """Close all three; idempotent."""
        self.listener.close()
        for name in ("user_fd", "net_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)


def create_user_namespaces(port: int) -> UserNamespaces:
    """Fresh namespaces with a listener at 127.0.0.1:``port``; :class:`UserNamespaceError`."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent:
        try:
            process = subprocess.Popen(
                bare_command("fetchproxy.sandbox.userns", "holder", str(child.fileno()), str(port)),
                pass_fds=(child.fileno(),),
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            child.close()
        try:
            parent.settimeout(_HOLDER_TIMEOUT)
            message, fds, _flags, _address = socket.recv_fds(
                parent, 4096, 3, socket.MSG_CMSG_CLOEXEC
            )
        except OSError as error:  # TimeoutError too
            process.kill()
            raise UserNamespaceError(
                error.errno or 0, "start", f"the namespace holder did not answer: {error}"
            ) from error
        finally:
            status = process.wait()
    if message == b"ok\n" and len(fds) == 3:
        return UserNamespaces(fds[0], fds[1], socket.socket(fileno=fds[2]))
    for fd in fds:
        os.close(fd)
    verb, arguments = parse_message(message.rstrip(b"\n")) if message else ("", [])
    if verb == "error" and len(arguments) == 3:
        raise UserNamespaceError(int(arguments[0]), arguments[1], arguments[2])
    raise UserNamespaceError(
        0, "start", f"the namespace holder exited (status {status}) without saying why"
    )

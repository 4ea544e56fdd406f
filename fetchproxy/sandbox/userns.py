"""The unprivileged sandbox's two small programs, run in a bare interpreter (``bare.py``).

A launcher without privilege cannot join or create namespaces itself while it has
threads, nor create a PID namespace at all; these processes do it for it:

``holder REPLY_FD PORT``
    Creates a user namespace (its own uid and gid mapped to 0) and a network
    namespace owned by it: lo up, nothing else. Opens a TCP listener on
    127.0.0.1:PORT there, and sends descriptors for the user namespace, the
    network namespace and the listener to the launcher over the unix socket
    REPLY_FD (``SCM_RIGHTS``) with the line ``ok``, or sends
    ``error <errno> <step> <detail>``. Then it exits: the launcher's descriptors
    keep everything alive, and nothing else does.

``entry USERNS_FD NETNS_FD CONTROL_FD CONFIG_FD``
    One per build. Joins that user and network namespace (the launcher's uid
    owns the user namespace, which grants it every capability there), creates
    a PID namespace and forks the supervisor (``supervisor.py``) as its PID 1,
    which dies with the entry (``PR_SET_PDEATHSIG``). The entry passes the
    launcher's signals on to it and exits as it does, so the launcher can treat
    it as the supervisor.
"""

# os.path, not pathlib: importing pathlib would cost every build ~4 ms.
# ruff: noqa: PTH110

from __future__ import annotations

import os
import signal
import sys

from fetchproxy.sandbox import linux, supervisor

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every build ~3 ms
if TYPE_CHECKING:
    import socket
    from typing import NoReturn

PROXY_HOST = "127.0.0.1"
STEP_USERNS = "userns"
STEP_MAP = "map"
STEP_NETWORK = "network"
STEP_LISTEN = "listen"
# The build holds no capability over its network namespace (the holder's user
# namespace owns it), so without this it could not bind ports below 1024.
_ANY_PORT = ("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")


class SetupError(Exception):
    """A step of :func:`create_namespaces` failed."""

    def __init__(self, step: str, error: OSError) -> None:
        detail = supervisor.error_detail(error)
        super().__init__(f"{step}: {detail}")
        self.step = step
        self.errno = error.errno or 0
        self.detail = detail


def create_namespaces(port: int) -> tuple[int, int, socket.socket]:
    """(user namespace fd, network namespace fd, listener), or :class:`SetupError`."""
    # Imported here, not at the top: the entry, which runs for every build, needs neither.
    import socket  # noqa: PLC0415

    from fetchproxy.sandbox.rtnetlink import LOOPBACK_INDEX, Rtnetlink  # noqa: PLC0415

    euid, egid = os.geteuid(), os.getegid()
    step = STEP_USERNS
    try:
        linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNET)
        step = STEP_MAP
        linux.write_proc_file("/proc/self/setgroups", "deny")  # required to map a gid unprivileged
        linux.write_proc_file("/proc/self/gid_map", f"0 {egid} 1\n")
        linux.write_proc_file("/proc/self/uid_map", f"0 {euid} 1\n")
        step = STEP_NETWORK
        with Rtnetlink() as netlink:
            netlink.set_up(LOOPBACK_INDEX)
        path, value = _ANY_PORT
        if os.path.exists(path):
            linux.write_proc_file(path, value)
        step = STEP_LISTEN
        listener = socket.create_server((PROXY_HOST, port))
        userns = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        netns = linux.open_netns()
    except OSError as error:
        raise SetupError(step, error) from error
    return userns, netns, listener


def holder(args: list[str]) -> NoReturn:
    import socket  # noqa: PLC0415 - see create_namespaces

    reply = socket.socket(fileno=int(args[0]))
    try:
        userns, netns, listener = create_namespaces(int(args[1]))
    except SetupError as error:
        reply.send(supervisor.format_message("error", error.errno, error.step, error.detail))
        os._exit(1)
    socket.send_fds(reply, [supervisor.format_message("ok")], [userns, netns, listener.fileno()])
    os._exit(0)


def _exit_like(status: int) -> NoReturn:
    """Exit with the same wait status as the supervisor: its code, or its signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:  # noqa: SIM105 - contextlib would cost every build ~2 ms
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP have no handler to reset
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _pass_on_signals(child: int) -> NoReturn:
    while True:
        info = signal.sigwaitinfo({signal.SIGCHLD, *supervisor.FORWARDED_SIGNALS})
        if info.si_signo == signal.SIGCHLD:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid == child:
                _exit_like(status)
        elif info.si_code != supervisor.SI_KERNEL:  # a terminal's reaches the supervisor too
            try:  # noqa: SIM105 - contextlib would cost every build ~2 ms
                os.kill(child, info.si_signo)
            except ProcessLookupError:
                pass


def entry(args: list[str]) -> NoReturn:
    userns, netns, control, config = (int(a) for a in args)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, *supervisor.FORWARDED_SIGNALS})
    try:
        linux.setns(userns, linux.CLONE_NEWUSER)  # allowed: this process is single-threaded
        linux.setns(netns, linux.CLONE_NEWNET)
        linux.unshare(linux.CLONE_NEWPID)  # for the children only
    except OSError as error:
        detail = f"cannot join the sandbox's namespaces: {error.strerror or error}"
        supervisor.send(control, "error", error.errno or 0, supervisor.STEP_SETUP, detail)
        os._exit(supervisor.EXIT_SETUP_FAILED)
    os.close(userns)
    os.close(netns)
    alive, entry_end = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:  # PID 1 of the new PID namespace
        os.close(entry_end)
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.set_blocking(alive, False)
        try:
            os.read(alive, 1)
            os._exit(supervisor.EXIT_SETUP_FAILED)  # EOF: the entry died before the prctl
        except BlockingIOError:
            os.close(alive)
        supervisor.main([str(control), str(config)])
    os.close(alive)
    os.close(control)  # the supervisor sees EOF on it when the launcher, not the entry, is gone
    os.close(config)
    _pass_on_signals(child)


def main(args: list[str]) -> NoReturn:
    if args[0] == "holder":
        holder(args[1:])
    entry(args[1:])


if __name__ == "__main__":
    main(sys.argv[1:])

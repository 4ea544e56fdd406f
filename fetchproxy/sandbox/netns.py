"""The sandbox's two network namespaces and the veth pair between them, held by fds.

``sandbox``: lo up, ``fp-sandbox`` (169.254.77.2/30), no other route.
``edge``: ``fp-edge`` (169.254.77.1/30), nothing else (lo stays down).
The host namespace gets nothing. Both namespaces are born in a short-lived
thread (``unshare(CLONE_NEWNET)`` moves only that thread) and are referenced
only by this object's file descriptors and by the processes that run in them,
never by a name under /run/netns: when the last reference goes, even through a
SIGKILL, the kernel deletes the namespaces and the veth with them.

The names and addresses are fixed: every run creates its own pair of fresh
namespaces, where nothing else can clash with them.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from fetchproxy.sandbox import linux
from fetchproxy.sandbox.rtnetlink import IF_OPER_UP, LOOPBACK_INDEX, Rtnetlink

EDGE_INTERFACE = ipaddress.IPv4Interface("169.254.77.1/30")
SANDBOX_INTERFACE = ipaddress.IPv4Interface("169.254.77.2/30")
EDGE_LINK = "fp-edge"
SANDBOX_LINK = "fp-sandbox"

# Written in each new namespace before the veth arrives, so it never gets an
# IPv6 address. "default", not "all": "all" would also take ::1 off lo.
_NO_IPV6 = {"net/ipv6/conf/default/disable_ipv6": "1"}
# The build has no capability over its network namespace (it belongs to the
# host's user namespace), so without this it could not bind ports below 1024.
_ANY_PORT = {"net/ipv4/ip_unprivileged_port_start": "0"}

_LINK_UP_TIMEOUT = 2.0
_THREAD_GONE_TIMEOUT = 5.0

T = TypeVar("T")


def in_new_thread(function: Callable[[], T]) -> T:
    """Run ``function`` on a thread of its own (namespace changes die with it).

    Returns only once the kernel has removed the thread: ``Thread.join()`` returns when the
    thread's C library exit is done, a moment before the kernel drops the task, and until then
    ``/proc/self/task`` still lists it — in another namespace. Waiting here keeps every later
    look at this process's threads (:func:`threads_outside_own_netns`) truthful.
    """
    results: list[T] = []
    errors: list[BaseException] = []
    native: list[int] = []

    def run() -> None:
        native.append(threading.get_native_id())
        try:
            results.append(function())
        except BaseException as error:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, name="fetchproxy-sandbox-namespaces")
    thread.start()
    thread.join()
    _wait_until_gone(native[0])
    if errors:
        raise errors[0]
    return results[0]


def _wait_until_gone(tid: int) -> None:
    """Wait until the kernel no longer lists thread ``tid`` of this process (a few µs)."""
    task = f"/proc/self/task/{tid}"
    deadline = time.monotonic() + _THREAD_GONE_TIMEOUT
    pause = 0.00001
    while os.path.lexists(task):
        if time.monotonic() > deadline:
            raise OSError(errno.ETIMEDOUT, f"thread {tid} did not go away after it ended")
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


def threads_outside_own_netns() -> list[int]:
    """Thread ids of this process whose network namespace is not the calling thread's."""
    own = Path("/proc/thread-self/ns/net").readlink()
    stray = []
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "ns" / "net").readlink() != own:
                stray.append(int(task.name))
        except OSError:
            continue  # the thread ended meanwhile
    return stray


def _write_sysctls(sysctls: dict[str, str]) -> None:
    for name, value in sysctls.items():
        path = Path("/proc/sys", name)
        if path.exists():  # no /proc/sys/net/ipv6 when IPv6 is off in the kernel
            path.write_text(value, encoding="ascii")


def _new_namespace(sysctls: dict[str, str]) -> tuple[int, Rtnetlink]:
    """Move this thread into a new network namespace; its fd and a netlink socket in it."""
    linux.unshare(linux.CLONE_NEWNET)
    fd = linux.open_netns()
    try:
        _write_sysctls(sysctls)
        return fd, Rtnetlink()
    except BaseException:
        os.close(fd)
        raise


def _wait_until_up(netlink: Rtnetlink, link: str) -> None:
    """Wait for the kernel to activate the link (it does so asynchronously).

    The veth end brought up first gets its carrier only when its peer comes up,
    and the kernel's link watcher then attaches its queue on a work queue: a
    packet sent before that is dropped, and a TCP SYN or ARP request lost that
    way costs the build a one-second retransmission.
    """
    deadline = time.monotonic() + _LINK_UP_TIMEOUT
    while netlink.operstate(link) != IF_OPER_UP:
        if time.monotonic() > deadline:
            raise OSError(errno.ETIMEDOUT, f"the veth end {link} did not come up")
        time.sleep(0.0002)


class NetworkNamespaces:
    """The edge and sandbox namespaces, plus the host's, as file descriptors."""

    def __init__(self) -> None:
        self.host_fd = linux.open_netns()
        self.edge_fd = -1
        self.sandbox_fd = -1
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        def create() -> tuple[int, Rtnetlink, int, Rtnetlink]:
            edge_fd, edge_netlink = _new_namespace(_NO_IPV6)
            try:
                sandbox_fd, sandbox_netlink = _new_namespace({**_NO_IPV6, **_ANY_PORT})
            except BaseException:
                os.close(edge_fd)
                edge_netlink.close()
                raise
            return edge_fd, edge_netlink, sandbox_fd, sandbox_netlink

        self.edge_fd, edge_netlink, self.sandbox_fd, sandbox_netlink = in_new_thread(create)
        with edge_netlink, sandbox_netlink:
            sandbox_netlink.set_up(LOOPBACK_INDEX)
            sandbox_netlink.create_veth(SANDBOX_LINK, EDGE_LINK, self.edge_fd)
            links = (
                (sandbox_netlink, SANDBOX_LINK, SANDBOX_INTERFACE),
                (edge_netlink, EDGE_LINK, EDGE_INTERFACE),
            )
            for netlink, link, interface in links:
                index = netlink.link_index(link)
                netlink.add_address(index, interface)
                netlink.set_up(index)
            for netlink, link, _interface in links:
                _wait_until_up(netlink, link)

    def enter_edge(self) -> None:
        """Move the calling thread into the edge namespace."""
        linux.setns(self.edge_fd, linux.CLONE_NEWNET)

    def leave_edge(self) -> None:
        """Move the calling thread back into the host namespace."""
        linux.setns(self.host_fd, linux.CLONE_NEWNET)

    @contextlib.contextmanager
    def in_edge(self) -> Iterator[None]:
        self.enter_edge()
        try:
            yield
        finally:
            self.leave_edge()

    def close(self) -> None:
        """Drop the references; idempotent. The calling thread returns to the host."""
        if self.host_fd >= 0 and self.edge_fd >= 0:
            with contextlib.suppress(OSError):
                if linux.netns_inode() == linux.netns_inode(self.edge_fd):
                    self.leave_edge()
        for name in ("edge_fd", "sandbox_fd", "host_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

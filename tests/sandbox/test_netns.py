"""The two namespaces: their shape, the host left alone, and per-thread switching."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from fetchproxy.sandbox import Sandbox, linux
from fetchproxy.sandbox.netns import (
    NetworkNamespaces,
    in_new_thread,
    threads_outside_own_netns,
)
from tests.sandbox.conftest import (
    NamespaceWatch,
    host_network_state,
    needs_root,
    netns_references,
)

pytestmark = pytest.mark.root

SIOCGSKNS = 0x894C  # ioctl: a descriptor for a socket's network namespace


def socket_netns(sock: socket.socket) -> int:
    fd = fcntl.ioctl(sock.fileno(), SIOCGSKNS)
    try:
        return linux.netns_inode(fd)
    finally:
        os.close(fd)


def ip_json(netns_fd: int, *args: str) -> list[dict[str, object]]:
    """`ip -j ARGS` run in the namespace ``netns_fd`` (by its /proc path: it has no name)."""
    command = ["nsenter", f"--net=/proc/{os.getpid()}/fd/{netns_fd}", "ip", "-j", *args]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: list[dict[str, object]] = json.loads(output)
    return result


def addresses(netns_fd: int) -> dict[str, list[str]]:
    return {
        str(link["ifname"]): [
            f"{a['local']}/{a['prefixlen']}"
            for a in link["addr_info"]  # type: ignore[attr-defined]
        ]
        for link in ip_json(netns_fd, "addr")
    }


def test_the_sandbox_has_lo_and_one_veth_end_without_a_default_route(sandbox: Sandbox) -> None:
    fd = sandbox.namespaces.sandbox_fd
    assert addresses(fd) == {"lo": ["127.0.0.1/8", "::1/128"], "fp-sandbox": ["169.254.77.2/30"]}
    every_route = ip_json(fd, "route", "show", "table", "all")
    every_route6 = ip_json(fd, "-6", "route", "show", "table", "all")
    assert "default" not in [r["dst"] for r in every_route + every_route6]
    main = [(r["dst"], r["dev"]) for r in ip_json(fd, "route", "show", "table", "main")]
    assert main == [("169.254.77.0/30", "fp-sandbox")]
    assert {r["dev"] for r in every_route6} == {"lo"}


def test_the_edge_has_the_other_end_and_nothing_else(sandbox: Sandbox) -> None:
    fd = sandbox.namespaces.edge_fd
    assert addresses(fd) == {"lo": [], "fp-edge": ["169.254.77.1/30"]}
    links = {str(link["ifname"]): link["flags"] for link in ip_json(fd, "link")}
    assert "UP" not in links["lo"]  # type: ignore[operator]
    assert "UP" in links["fp-edge"]  # type: ignore[operator]
    routes = [r["dst"] for r in ip_json(fd, "route", "show", "table", "main")]
    assert routes == ["169.254.77.0/30"]


def test_the_host_namespace_is_left_as_it_was() -> None:
    needs_root()
    before = host_network_state()
    host_disable_ipv6 = Path("/proc/sys/net/ipv6/conf/default/disable_ipv6").read_text()
    with Sandbox():
        during = host_network_state()
    assert during == before
    assert host_network_state() == before
    assert Path("/proc/sys/net/ipv6/conf/default/disable_ipv6").read_text() == host_disable_ipv6


def test_the_namespaces_are_held_only_by_descriptors() -> None:
    needs_root()
    host = linux.netns_inode()
    with Sandbox() as sandbox:
        listener = sandbox.listen_socket()
        namespaces = sandbox.namespaces
        inodes = {linux.netns_inode(namespaces.edge_fd), linux.netns_inode(namespaces.sandbox_fd)}
        assert host not in inodes
        assert len(inodes) == 2
        references = netns_references(inodes)
        assert {r.split(" -> ")[0] for r in references} == {
            f"/proc/{os.getpid()}/fd/{namespaces.edge_fd}",
            f"/proc/{os.getpid()}/fd/{namespaces.sandbox_fd}",
        }
        watch = NamespaceWatch([namespaces.edge_fd, namespaces.sandbox_fd])
    assert listener.fileno() == -1  # closed with the sandbox: it held the edge
    assert netns_references(inodes) == []
    assert watch.wait_until_destroyed() < 1  # and the kernel deleted them, veth and all
    assert linux.netns_inode() == host


def test_in_edge_moves_only_the_calling_thread_and_back(sandbox: Sandbox) -> None:
    host = linux.netns_inode()
    edge = linux.netns_inode(sandbox.namespaces.edge_fd)
    inside = threading.Event()
    done = threading.Event()
    seen_by_other: list[int] = []

    def other_thread() -> None:
        inside.wait()
        seen_by_other.append(linux.netns_inode())
        done.set()

    threading.Thread(target=other_thread).start()
    with sandbox.in_edge():
        assert linux.netns_inode() == edge
        inside.set()
        done.wait()
    assert seen_by_other == [host]
    assert linux.netns_inode() == host


def test_enter_and_leave_edge_on_another_thread(sandbox: Sandbox) -> None:
    host = linux.netns_inode()
    edge = linux.netns_inode(sandbox.namespaces.edge_fd)
    seen: list[int] = []

    def worker() -> None:
        sandbox.enter_edge()
        seen.append(linux.netns_inode())
        sandbox.leave_edge()
        seen.append(linux.netns_inode())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [edge, host]
    assert linux.netns_inode() == host


def test_sockets_keep_the_namespace_they_were_created_in(sandbox: Sandbox) -> None:
    host = linux.netns_inode()
    edge = linux.netns_inode(sandbox.namespaces.edge_fd)
    with sandbox.in_edge():
        listener = socket.create_server((sandbox.edge_address, 0))
        started_inside: list[int] = []
        # The trap the proxy must mind: a thread started in the edge stays there.
        thread = threading.Thread(target=lambda: started_inside.append(linux.netns_inode()))
        thread.start()
        thread.join()
    upstream = socket.socket()  # created after leaving: the host's, as upstream connections are
    with listener, upstream:
        assert (socket_netns(listener), socket_netns(upstream)) == (edge, host)
    assert started_inside == [edge]


def test_listen_socket_listens_at_the_edge_address(sandbox: Sandbox) -> None:
    sock = sandbox.listen_socket()
    assert sock.getsockname()[0] == sandbox.edge_address == "169.254.77.1"
    assert socket_netns(sock) == linux.netns_inode(sandbox.namespaces.edge_fd)
    assert linux.netns_inode() != socket_netns(sock)


def test_closing_twice_is_harmless() -> None:
    needs_root()
    namespaces = NetworkNamespaces()
    namespaces.close()
    namespaces.close()
    assert (namespaces.host_fd, namespaces.edge_fd, namespaces.sandbox_fd) == (-1, -1, -1)


def test_closing_returns_a_thread_left_in_the_edge_to_the_host() -> None:
    needs_root()
    host = linux.netns_inode()
    sandbox = Sandbox().__enter__()
    sandbox.enter_edge()
    sandbox.close()
    sandbox.close()
    assert linux.netns_inode() == host


def test_no_thread_that_made_a_namespace_is_still_listed_when_it_returns() -> None:
    """Thread.join() returns a moment before the kernel drops the task; until then
    /proc/self/task lists it in the namespace it made, and the launcher's check for threads
    outside its namespace fired at random (about one run in 60). in_new_thread waits."""

    def make() -> int:
        linux.unshare(linux.CLONE_NEWNET)
        return linux.open_netns()

    needs_root()
    strays = 0
    for _ in range(2000):
        os.close(in_new_thread(make))
        strays += bool(threads_outside_own_netns())
    assert strays == 0

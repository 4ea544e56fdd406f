"""From inside the sandbox: the edge is reachable, and nothing of the host's is."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fetchproxy.sandbox import Sandbox
from tests.sandbox.conftest import (
    CAPABILITY_PROBE,
    LAUNCHER,
    PROBE,
    Builds,
    host_addresses,
    host_services,
    needs_root,
)

pytestmark = pytest.mark.root


def test_a_listener_in_the_edge_is_reachable(sandbox: Sandbox, builds: Builds) -> None:
    server = sandbox.listen_socket()

    def echo_once() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(connection.recv(100).upper())

    threading.Thread(target=echo_once, daemon=True).start()
    host, port = server.getsockname()
    result = builds.run(
        "import socket, sys\n"
        "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
        "s.sendall(b'ping')\n"
        "print(s.recv(100).decode())\n",
        host,
        str(port),
    )
    assert (host, result.returncode, result.stdout) == (sandbox.edge_address, 0, "PING\n")


def test_host_services_on_any_address_are_unreachable(sandbox: Sandbox, builds: Builds) -> None:
    addresses = [
        *host_addresses(),
        ("inet", sandbox.edge_address),
        ("inet", sandbox.sandbox_address),
        ("inet6", "::1"),
    ]
    with host_services() as services:
        ports = {name: sock.getsockname()[1] for name, sock in services.items()}
        result = builds.run(
            PROBE
            + textwrap.dedent(
                """
                addresses, ports = json.loads(sys.argv[1]), json.loads(sys.argv[2])
                report = {}
                for family, address in addresses:
                    if family == "inet":
                        report[address] = [
                            tcp(address, ports["tcp4"])[0],
                            tcp(address, ports["tcp6"])[0],
                            udp(address, ports["udp4"]),
                        ]
                    else:
                        six = socket.AF_INET6
                        report[address] = [tcp(address, ports["tcp6"], six)[0]]
                print(json.dumps(report))
                """
            ),
            json.dumps(addresses),
            json.dumps(ports),
        )
        report = result.json()
        for name in ("tcp4", "tcp6"):
            with pytest.raises(BlockingIOError):
                services[name].accept()
        with pytest.raises(BlockingIOError):
            services["udp4"].recvfrom(100)
    # Loopback and the veth addresses answer from inside the sandbox's own
    # namespaces (refused); every other address has no route at all.
    for family, address in addresses:
        outcomes = report[address]
        assert isinstance(outcomes, list)
        local = address in ("127.0.0.1", "::1", sandbox.edge_address, sandbox.sandbox_address)
        tcp_expected = "ECONNREFUSED" if local else "ENETUNREACH"
        if family == "inet":
            udp_expected = "sent" if local else "ENETUNREACH"
            assert outcomes == [tcp_expected, tcp_expected, udp_expected], address
        elif address.startswith("fe80:"):  # link-local, with no interface to use
            assert outcomes[0] in ("EINVAL", "ENETUNREACH", "EADDRNOTAVAIL"), address
        else:
            assert outcomes == [tcp_expected], address


def test_literal_addresses_fail_fast_with_no_route(builds: Builds) -> None:
    report = builds.run(
        PROBE
        + textwrap.dedent(
            """
            print(json.dumps({
                "1.1.1.1:443": tcp("1.1.1.1", 443),
                "10.0.0.1:80": tcp("10.0.0.1", 80),
                "192.168.1.1:22": tcp("192.168.1.1", 22),
                "169.254.169.254:80": tcp("169.254.169.254", 80),
                "[2606:4700::1111]:443": tcp("2606:4700::1111", 443, socket.AF_INET6),
                "udp 8.8.8.8:53": [udp("8.8.8.8", 53), 0],
            }))
            """
        )
    ).json()
    for target, outcome in report.items():
        assert isinstance(outcome, list)
        assert outcome[0] == "ENETUNREACH", target
        assert outcome[1] < 0.5, target


def test_dns_fails_fast(builds: Builds) -> None:
    report = builds.run(
        "import json, socket, time\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 443)\n"
        "    outcome = 'resolved'\n"
        "except socket.gaierror as e:\n"
        "    outcome = 'gaierror'\n"
        "print(json.dumps([outcome, time.monotonic() - start, open('/etc/resolv.conf').read()]))\n"
    ).json()
    outcome, _seconds, resolv_conf = report
    assert outcome == "gaierror"
    # fast by construction: no route to the server (ENETUNREACH), one try of at most a second
    assert "nameserver 192.0.2.1\n" in resolv_conf
    assert "options timeout:1 attempts:1\n" in resolv_conf
    assert "options timeout:1 attempts:1\n" in resolv_conf


def test_host_unix_sockets_are_out_of_reach(builds: Builds) -> None:
    name = f"fetchproxy-test-{os.getpid()}.sock"
    paths = [Path("/tmp", name), Path("/run", name)]
    servers = []
    try:
        for path in paths:
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            server.listen()
            servers.append(server)
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind("\0" + name)  # abstract sockets are scoped by network namespace
        abstract.listen()
        servers.append(abstract)
        report = builds.run(
            "import errno, json, socket, sys\n"
            "report = {}\n"
            "for address in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.connect(address.replace('@', '\\0', 1))\n"
            "        report[address] = 'connected'\n"
            "    except OSError as e:\n"
            "        report[address] = errno.errorcode[e.errno]\n"
            "print(json.dumps(report))\n",
            *map(str, paths),
            "@" + name,
        ).json()
    finally:
        for server in servers:
            server.close()
        for path in paths:
            path.unlink(missing_ok=True)
    assert report == {str(paths[0]): "ENOENT", str(paths[1]): "ENOENT", "@" + name: "ECONNREFUSED"}


def test_tmp_run_and_dev_shm_are_private(builds: Builds, tmp_path: Path) -> None:
    marker = f"fetchproxy-test-marker-{os.getpid()}"
    host_files = [Path(d, marker) for d in ("/tmp", "/run", "/dev/shm")]
    try:
        for path in host_files:
            path.write_text("host")
        report = builds.run(
            "import json, os, sys\n"
            "seen = {d: sorted(os.listdir(d)) for d in ('/run', '/dev/shm')}\n"
            "seen['/tmp has the marker'] = os.path.exists('/tmp/' + sys.argv[1])\n"
            "seen['/tmp leads to cwd'] = os.getcwd().startswith('/tmp/')\n"
            "open('/tmp/' + sys.argv[1] + '-inside', 'w').write('sandbox')\n"
            "print(json.dumps(seen))\n",
            marker,
        ).json()
        assert not Path("/tmp", marker + "-inside").exists()
    finally:
        for path in host_files:
            path.unlink(missing_ok=True)
    assert report == {
        "/run": ["fetchproxy"],
        "/dev/shm": [],
        "/tmp has the marker": False,
        "/tmp leads to cwd": str(tmp_path).startswith("/tmp/"),
    }


def test_files_are_placed_read_only(builds: Builds) -> None:
    report = builds.run(
        "import errno, json, os\n"
        "report = {'listing': sorted(os.listdir('/run/fetchproxy')),\n"
        "          'ca.pem': open('/run/fetchproxy/ca.pem').read()}\n"
        "try:\n"
        "    open('/run/fetchproxy/ca.pem', 'w')\n"
        "except OSError as e:\n"
        "    report['write'] = errno.errorcode[e.errno]\n"
        "print(json.dumps(report))\n",
        files={"ca.pem": b"-----BEGIN CERTIFICATE-----\n"},
    ).json()
    assert report == {
        "listing": ["ca.pem", "resolv.conf"],
        "ca.pem": "-----BEGIN CERTIFICATE-----\n",
        "write": "EROFS",
    }


def test_ipv6_is_off_on_the_veth_and_on_in_lo(sandbox: Sandbox, builds: Builds) -> None:
    interfaces = builds.run(
        "print(open('/proc/net/if_inet6').read())",
    ).stdout.split()
    with sandbox.in_edge():
        edge = Path("/proc/thread-self/net/if_inet6").read_text().split()
    assert interfaces[0] == "00000000000000000000000000000001"  # ::1
    assert interfaces[-1] == "lo"
    assert len(interfaces) == 6  # one address: no IPv6 on fp-sandbox
    assert edge == []


def test_the_build_holds_no_capability_over_the_host(builds: Builds) -> None:
    report = builds.run(
        CAPABILITY_PROBE
        + textwrap.dedent(
            """
            own_netns = os.open("/proc/self/ns/net", os.O_RDONLY)
            print(json.dumps({
                "uid": os.getuid(),
                "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                "setns own network namespace": call(libc.setns, own_netns, 0x40000000),
                "umount /run": call(libc.umount2, b"/run", 0),
                "umount /proc": call(libc.umount2, b"/proc", 0),
                "umount /etc/resolv.conf": call(libc.umount2, b"/etc/resolv.conf", 0),
                "remount /run/fetchproxy rw": call(
                    libc.mount, None, b"/run/fetchproxy", None, 0x20 | 0x1000, None
                ),
                "core_pattern": write("/proc/sys/kernel/core_pattern"),
                "sysctl disable_ipv6": write("/proc/sys/net/ipv6/conf/fp-sandbox/disable_ipv6"),
                "uevent_helper": write("/sys/kernel/uevent_helper"),
            }))
            """
        )
    ).json()
    assert report == {
        "uid": 0,  # root in its own user namespace only
        "processes": [1, 2],  # the supervisor and the build: no host process to ptrace
        "setns own network namespace": "EPERM",
        "umount /run": "EINVAL",  # locked: the host's /run is below
        "umount /proc": "EINVAL",
        "umount /etc/resolv.conf": "EINVAL",
        "remount /run/fetchproxy rw": "EPERM",
        "core_pattern": "EROFS",
        "sysctl disable_ipv6": "EROFS",
        "uevent_helper": "EROFS",
    }


def test_the_build_cannot_enter_the_host_namespace_given_a_handle(tmp_path: Path) -> None:
    needs_root()
    handle = tmp_path / "host-netns"
    code = (
        "import ctypes, errno, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "result = libc.setns(fd, 0x40000000)\n"
        "print('setns', result, errno.errorcode.get(ctypes.get_errno()))\n"
    )
    launched = subprocess.run(
        [
            *(sys.executable, str(LAUNCHER), "--bind-host-netns", str(handle), "--"),
            *(sys.executable, "-I", "-c", code, str(handle)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.splitlines()[-1] == "setns -1 EPERM"
    assert not handle.is_mount()


def test_ports_below_1024_can_be_bound_inside(sandbox: Sandbox, builds: Builds) -> None:
    result = builds.run(
        "import socket\ns = socket.create_server(('127.0.0.1', 80))\nprint(s.getsockname()[1])\n"
    )
    assert (result.returncode, result.stdout) == (0, "80\n")


def test_parallel_sandboxes_use_the_same_addresses_without_clashing(tmp_path: Path) -> None:
    needs_root()
    with Sandbox() as first, Sandbox() as second:
        one = first.listen_socket()
        port = one.getsockname()[1]
        two = second.listen_socket(port)  # the same address and port, in another edge
        for server, reply in ((one, b"first"), (two, b"second")):

            def answer(server: socket.socket = server, reply: bytes = reply) -> None:
                connection, _ = server.accept()
                with connection:
                    connection.sendall(reply)

            threading.Thread(target=answer, daemon=True).start()
        code = (
            "import socket, sys\n"
            "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)\n"
            "print(s.recv(10).decode())\n"
        )
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        results = [
            Builds(sandbox, tmp_path / name).run(code, sandbox.edge_address, str(port))
            for sandbox, name in ((first, "a"), (second, "b"))
        ]
    assert [r.stdout for r in results] == ["first\n", "second\n"]

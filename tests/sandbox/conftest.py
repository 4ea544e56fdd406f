"""Fixtures for the sandbox tests: a live :class:`Sandbox`, small Python programs as builds,
launchers in processes of their own, and a census of who still refers to a network namespace."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fetchproxy.sandbox import BuildProcess, Sandbox, UserSandbox, linux, rtnetlink
from fetchproxy.sandbox.netns import in_new_thread

IS_ROOT = os.geteuid() == 0
NOT_ROOT_REASON = "needs root: the sandbox creates network namespaces (CI runs these as root)"
BUILD_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
LAUNCHER = Path(__file__).with_name("launcher.py")
USER_LAUNCHER = Path(__file__).with_name("user_launcher.py")
NO_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]


PYTHON = (Path(sys.prefix),)
"""Keep the test interpreter's environment visible: a checkout (and its venv) may live under
/tmp, which the sandbox makes private."""


def needs_root() -> None:
    if not IS_ROOT:
        pytest.skip(NOT_ROOT_REASON)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    needs_root()
    with Sandbox() as live:
        yield live


@dataclass
class BuildResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


class Builds:
    """Runs Python snippets as builds in a sandbox (root or user), output in files."""

    def __init__(self, sandbox: Sandbox | UserSandbox, directory: Path) -> None:
        self.sandbox = sandbox
        self.directory = directory
        self._count = 0

    def start(
        self,
        code: str,
        *args: str,
        files: Mapping[str, bytes] | None = None,
        env: Mapping[str, str] = BUILD_ENV,
        **options: Any,
    ) -> tuple[BuildProcess, Path, Path]:
        """Start ``python -c code args``; ``options``: more of ``spawn``'s (``writable``, ...)."""
        self._count += 1
        stdout = self.directory / f"build-{self._count}.out"
        stderr = self.directory / f"build-{self._count}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            build = self.sandbox.spawn(
                [sys.executable, "-I", "-c", code, *args],
                env=env,
                cwd=self.directory,
                keep=PYTHON,
                files=files,
                stdout=out.fileno(),
                stderr=err.fileno(),
                **options,
            )
        return build, stdout, stderr

    def run(
        self,
        code: str,
        *args: str,
        files: Mapping[str, bytes] | None = None,
        env: Mapping[str, str] = BUILD_ENV,
        timeout: float = 30,
        **options: Any,
    ) -> BuildResult:
        build, stdout, stderr = self.start(code, *args, files=files, env=env, **options)
        returncode = build.wait(timeout=timeout)
        return BuildResult(returncode, stdout.read_text(), stderr.read_text())


@pytest.fixture
def builds(sandbox: Sandbox, tmp_path: Path) -> Builds:
    return Builds(sandbox, tmp_path)


# A build-side helper: try to connect, report the errno's name (or "connected") and the time.
PROBE = textwrap.dedent(
    """
    import errno, json, socket, sys, time

    def tcp(host, port, family=socket.AF_INET):
        start = time.monotonic()
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect((host, port))
            outcome = "connected"
        except OSError as e:
            outcome = errno.errorcode.get(e.errno, repr(e))
        finally:
            s.close()
        return [outcome, time.monotonic() - start]

    def udp(host, port, family=socket.AF_INET):
        s = socket.socket(family, socket.SOCK_DGRAM)
        try:
            s.sendto(b"hello from the sandbox", (host, port))
            return "sent"
        except OSError as e:
            return errno.errorcode.get(e.errno, repr(e))
        finally:
            s.close()
    """
)

# A build-side helper: call a libc function or write a file, report "ok" or the errno's name.
CAPABILITY_PROBE = textwrap.dedent(
    """
    import ctypes, errno, json, os
    libc = ctypes.CDLL(None, use_errno=True)

    def call(function, *args):
        if function(*args) == 0:
            return "ok"
        return errno.errorcode[ctypes.get_errno()]

    def write(path):
        try:
            with open(path, "w") as f:
                f.write("x")
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
    """
)

# A build that leaves a grandchild behind (tagged with a marker) and then waits.
LEAVE_A_DAEMON = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]])\n"
    "print('ready', flush=True)\n"
    "if sys.argv[2] == 'wait':\n"
    "    time.sleep(300)\n"
)


def host_addresses() -> list[tuple[str, str]]:
    """(family, address) of every address the host has, from `ip -j addr`."""
    links = json.loads(subprocess.run(["ip", "-j", "addr"], check=True, capture_output=True).stdout)
    return [(a["family"], a["local"]) for link in links for a in link.get("addr_info", [])]


def host_network_state() -> list[str]:
    """What the host's namespace has: links, addresses, routes (all tables), rules."""
    commands = [
        ["ip", "-o", "link"],
        ["ip", "-o", "addr"],
        ["ip", "route", "show", "table", "all"],
        ["ip", "-6", "route", "show", "table", "all"],
        ["ip", "rule"],
        ["ip", "-all", "netns", "list"],
    ]
    return [subprocess.run(c, check=True, capture_output=True, text=True).stdout for c in commands]


@contextlib.contextmanager
def host_services() -> Iterator[dict[str, socket.socket]]:
    """Host services bound to every address: TCP and UDP on 0.0.0.0, TCP on [::]."""
    tcp4 = socket.create_server(("0.0.0.0", 0))
    tcp6 = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    udp4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp4.bind(("0.0.0.0", 0))
    services = {"tcp4": tcp4, "tcp6": tcp6, "udp4": udp4}
    try:
        for sock in services.values():
            sock.setblocking(False)
        yield services
    finally:
        for sock in services.values():
            sock.close()


def run_as(prefix: list[str], code: str) -> object:
    """The JSON that ``python -c code`` prints, run under ``prefix`` (``setpriv ...``)."""
    result = subprocess.run(
        [*prefix, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@contextlib.contextmanager
def launched(
    command: Sequence[str], cwd: Path
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A launcher (``launcher.py``, ``user_launcher.py``) started with ``command``, and the JSON
    line it prints once the build runs; killed at the end, whatever happened."""
    launcher = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        yield launcher, json.loads(launcher.stdout.readline())
    finally:
        launcher.kill()
        launcher.wait()
        if launcher.stdout is not None:
            launcher.stdout.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> float:
    """Seconds until ``predicate()`` held; fails the test after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"still not true after {timeout} s: {predicate.__doc__ or predicate}")
        time.sleep(0.005)
    return time.monotonic() - start


def netns_references(inodes: set[int]) -> list[str]:
    """Every process, thread and open descriptor on the machine that refers to one of
    the network namespaces ``inodes`` (a namespace held only by fds has no other trace)."""
    wanted = {f"net:[{inode}]" for inode in inodes}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        links = [proc / "ns" / "net"]
        try:
            links += [task / "ns" / "net" for task in (proc / "task").iterdir()]
            links += list((proc / "fd").iterdir())
        except OSError:  # the process exited meanwhile
            continue
        for link in links:
            try:
                target = str(link.readlink())
            except OSError:
                continue
            if target in wanted:
                found.append(f"{link} -> {target}")
    return found


def processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose command line contains ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def process_is_gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its new parent to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


class NamespaceWatch:
    """Sees network namespaces die, from a namespace of its own: a namespace that gets an
    id for them there hears RTM_DELNSID when the kernel destroys one. Holds no reference."""

    _RTNLGRP_NSID = 28
    _SOL_NETLINK = 270
    _NETLINK_ADD_MEMBERSHIP = 1
    _NETNSA_NSID = 1
    _NETNSA_FD = 3
    _RTM_NEWNSID = 88
    _RTM_DELNSID = 89

    def __init__(self, netns_fds: list[int]) -> None:
        def observer() -> socket.socket:
            linux.unshare(linux.CLONE_NEWNET)
            return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, rtnetlink.NETLINK_ROUTE)

        self._socket = in_new_thread(observer)
        self._socket.bind((0, 0))
        self._socket.setsockopt(self._SOL_NETLINK, self._NETLINK_ADD_MEMBERSHIP, self._RTNLGRP_NSID)
        self.alive = set()
        for nsid, fd in enumerate(netns_fds, start=1):
            body = (
                b"\0\0\0\0"  # struct rtgenmsg, padded
                + rtnetlink.attribute(self._NETNSA_NSID, struct.pack("=i", nsid))
                + rtnetlink.attribute(self._NETNSA_FD, struct.pack("=I", fd))
            )
            flags = rtnetlink.NLM_F_REQUEST | rtnetlink.NLM_F_ACK
            self._socket.send(rtnetlink.message(self._RTM_NEWNSID, flags, 100 + nsid, body))
            self.alive.add(nsid)

    def wait_until_destroyed(self, timeout: float = 60.0) -> float:
        """Seconds until every watched namespace was destroyed; fails after ``timeout``."""
        start = time.monotonic()
        self._socket.settimeout(timeout)
        try:
            while self.alive:
                data = self._socket.recv(65536)
                offset = 0
                while offset + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, offset)
                    if kind == self._RTM_DELNSID:
                        found = rtnetlink.attributes(data[offset + 20 : offset + length])
                        (nsid,) = struct.unpack("=i", found[self._NETNSA_NSID])
                        self.alive.discard(nsid)
                    elif kind == rtnetlink.NLMSG_ERROR:
                        (error,) = struct.unpack_from("=i", data, offset + 16)
                        assert error == 0, os.strerror(-error)
                    offset += (length + 3) & ~3
        except TimeoutError:
            pytest.fail(f"network namespaces {sorted(self.alive)} still exist after {timeout} s")
        finally:
            self._socket.close()
        return time.monotonic() - start


COUNT_SIGINTS = (
    "import signal, time\n"
    "received = []\n"
    "signal.signal(signal.SIGINT, lambda number, frame: received.append(time.monotonic()))\n"
    "with open('ready', 'w'):\n"
    "    pass\n"
    "while not received or time.monotonic() - received[0] < 1.5:\n"
    "    time.sleep(0.01)\n"
    "with open('count', 'w') as f:\n"
    "    f.write(str(len(received)))\n"
)


def sigints_after_ctrl_c(launcher: list[str], directory: Path) -> int:
    """How many SIGINTs a build saw after one Ctrl-C at the terminal of ``launcher -- BUILD``.

    The launcher runs in a new session with a pty as its controlling terminal, so the Ctrl-C
    signals the whole foreground group as a terminal does.
    """
    controller, terminal = os.openpty()
    process = subprocess.Popen(
        ["setsid", "--ctty", *launcher, sys.executable, "-I", "-c", COUNT_SIGINTS],
        cwd=directory,
        stdin=terminal,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for((directory / "ready").exists)
        os.write(controller, b"\x03")  # Ctrl-C
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
        os.close(controller)
        os.close(terminal)
    return int((directory / "count").read_text())

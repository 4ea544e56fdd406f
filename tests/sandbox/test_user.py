"""The unprivileged sandbox (:class:`UserSandbox`): who can build it, what a build sees from
inside, its life, and ``fetchproxy record|replay --sandbox user`` end to end.

Most tests run the launcher in the test process, as root: it builds the same namespaces as an
unprivileged launcher (the user namespace belongs to the launcher's uid either way). The
*unprivileged* ones run it as root without capabilities (``setpriv``), keeping only
CAP_SETFCAP, without which root may not map uid 0 into a user namespace (Linux 5.12 and
later; an ordinary user needs no capability to map its own uid); one runs it as uid 65534.
"""

from __future__ import annotations

import errno
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import fetchproxy
from fetchproxy.run.build import user_sandbox_notice
from fetchproxy.sandbox import SandboxError, UserSandbox, available_sandbox, linux
from fetchproxy.sandbox.holder import UserNamespaceError
from fetchproxy.sandbox.support import (
    Problem,
    neither_message,
    user_namespace_failure_problem,
    user_namespace_limits_problem,
)
from tests.sandbox.conftest import (
    BUILD_ENV,
    CAPABILITY_PROBE,
    LEAVE_A_DAEMON,
    NO_CAPABILITIES,
    PROBE,
    USER_LAUNCHER,
    Builds,
    NamespaceWatch,
    host_addresses,
    host_services,
    launched,
    needs_root,
    netns_references,
    process_is_gone,
    processes_with,
    run_as,
    sigints_after_ctrl_c,
    wait_for,
)
from tests.support.cli import run_fetchproxy
from tests.support.real_origins import HTTPSOrigin, static_site

pytestmark = pytest.mark.root

UNPRIVILEGED = ["setpriv", "--bounding-set=-all,+setfcap", "--inh-caps=-all", "--no-new-privs"]
ROOT_LACKS = (
    "the network sandbox needs root: it creates network namespaces and a veth pair, and this "
    "process (uid 0) lacks CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID, CAP_SETGID. Run fetchproxy "
    "as root (for example with sudo)"
)
NO_SETFCAP = (
    "the unprivileged network sandbox needs user namespaces, and a root process without "
    "CAP_SETFCAP may not map uid 0 into one (Linux 5.12 and later; /proc/self/uid_map: "
    "Operation not permitted). Run fetchproxy as an ordinary user, or with CAP_SETFCAP, or use "
    "--no-sandbox to run the build without network isolation."
)


# ----------------------------------------------------------------- who can build it, and why not


def test_kernel_settings_that_forbid_user_namespaces_are_named_with_the_fix() -> None:
    debian = user_namespace_limits_problem(unprivileged_userns_clone=0, max_user_namespaces=99)
    assert debian is not None
    assert debian.message() == (
        "the unprivileged network sandbox needs user namespaces, and this kernel allows them to "
        "root only (kernel.unprivileged_userns_clone is 0). Enable them with `sysctl -w "
        "kernel.unprivileged_userns_clone=1`, or use --no-sandbox to run the build without "
        "network isolation."
    )
    disabled = user_namespace_limits_problem(unprivileged_userns_clone=None, max_user_namespaces=0)
    assert disabled is not None
    assert disabled.reason == (
        "this kernel has them disabled (user.max_user_namespaces is 0 or absent)"
    )
    assert disabled.fix == "Enable them with `sysctl -w user.max_user_namespaces=10000`"
    assert (
        user_namespace_limits_problem(unprivileged_userns_clone=1, max_user_namespaces=10) is None
    )
    assert (
        user_namespace_limits_problem(unprivileged_userns_clone=None, max_user_namespaces=10)
        is None
    )


def test_a_failure_to_create_them_is_explained_by_its_step_and_errno() -> None:
    def reason(error: UserNamespaceError, *, euid: int = 1000, apparmor: bool = False) -> str:
        problem = user_namespace_failure_problem(error, euid=euid, apparmor_restricts=apparmor)
        return f"{problem.reason} | {problem.fix}"

    denied = UserNamespaceError(errno.EPERM, "userns", "unshare: Operation not permitted")
    assert reason(denied) == (
        "creating one is not permitted here (unshare: Operation not permitted) | Allow them (a "
        "container's seccomp profile or a security module may forbid them)"
    )
    assert reason(denied, apparmor=True) == (
        "AppArmor restricts them (unshare: Operation not permitted; "
        "kernel.apparmor_restrict_unprivileged_userns is 1) | Allow them with `sysctl -w "
        "kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for this Python"
    )
    full = UserNamespaceError(errno.ENOSPC, "userns", "unshare: No space left on device")
    assert reason(full) == (
        "the limit on them is reached (unshare: No space left on device) | Raise it with "
        "`sysctl -w user.max_user_namespaces=10000`"
    )
    unmappable = UserNamespaceError(
        errno.EPERM, "map", "/proc/self/uid_map: Operation not permitted"
    )
    assert reason(unmappable, euid=0).startswith("a root process without CAP_SETFCAP")
    assert reason(unmappable, euid=1000) == (
        "setting one up failed (map: /proc/self/uid_map: Operation not permitted) | Check that "
        "`unshare --user --map-root-user --net true` works"
    )


def test_without_either_sandbox_both_reasons_and_both_fixes_are_given() -> None:
    root = Problem(needs="the root one needs root", reason="uid 1000", fix="Use sudo")
    user = Problem(needs="the user one needs namespaces", reason="none here", fix="Enable them")
    assert neither_message(root, user) == (
        "the root one needs root, and uid 1000. Use sudo; or: the user one needs namespaces, and "
        "none here. Enable them, or use --no-sandbox to run the build without network isolation."
    )


AVAILABLE = textwrap.dedent(
    """
    import json
    from fetchproxy.sandbox import SandboxError, UserSandbox, available_sandbox
    report = {choice: available_sandbox(choice) for choice in ("auto", "root", "user")}
    try:
        with UserSandbox():
            report["UserSandbox"] = None
    except SandboxError as error:
        report["UserSandbox"] = str(error)
    print(json.dumps(report))
    """
)


def test_without_root_the_user_sandbox_is_chosen() -> None:
    needs_root()  # to drop privileges
    assert run_as(UNPRIVILEGED, AVAILABLE) == {
        "auto": ["user", ""],
        "root": [
            None,
            f"{ROOT_LACKS}, or use --no-sandbox to run the build without network isolation.",
        ],
        "user": ["user", ""],
        "UserSandbox": None,
    }


def test_when_neither_can_be_built_the_refusal_says_why_and_names_the_ways_out() -> None:
    needs_root()
    report = run_as(NO_CAPABILITIES, AVAILABLE)
    assert report == {
        "auto": [None, f"{ROOT_LACKS}; or: {NO_SETFCAP}"],
        "root": [
            None,
            f"{ROOT_LACKS}, or use --no-sandbox to run the build without network isolation.",
        ],
        "user": [None, NO_SETFCAP],
        "UserSandbox": NO_SETFCAP,
    }


def test_as_root_auto_is_the_root_sandbox() -> None:
    needs_root()
    assert available_sandbox("auto") == ("root", "")
    assert available_sandbox("user") == ("user", "")


# ------------------------------------------------------------------------- from inside the build


@pytest.fixture
def sandbox() -> Iterator[UserSandbox]:
    needs_root()
    with UserSandbox(proxy_port=3128) as live:
        yield live


@pytest.fixture
def builds(sandbox: UserSandbox, tmp_path: Path) -> Builds:
    return Builds(sandbox, tmp_path)


def test_the_listener_inside_is_the_only_way_out(sandbox: UserSandbox, builds: Builds) -> None:
    listener = sandbox.accept_socket()
    assert listener.getsockname() == ("127.0.0.1", 3128)
    assert (sandbox.proxy_host, sandbox.proxy_port) == ("127.0.0.1", 3128)

    def echo_once() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(connection.recv(100).upper())

    threading.Thread(target=echo_once, daemon=True).start()
    result = builds.run(
        "import json, os, socket\n"
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        "s.sendall(b'ping')\n"
        "links = [line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]]\n"
        "print(json.dumps([s.recv(100).decode(), links]))\n"
    )
    assert result.json() == ["PING", ["lo"]]


def test_host_services_are_unreachable_on_every_address(builds: Builds) -> None:
    addresses = [*host_addresses(), ("inet6", "::1")]
    with host_services() as services:
        ports = {name: sock.getsockname()[1] for name, sock in services.items()}
        report = builds.run(
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
                        report[address] = [tcp(address, ports["tcp6"], socket.AF_INET6)[0]]
                print(json.dumps(report))
                """
            ),
            json.dumps(addresses),
            json.dumps(ports),
        ).json()
        for name in ("tcp4", "tcp6"):
            with pytest.raises(BlockingIOError):
                services[name].accept()
        with pytest.raises(BlockingIOError):
            services["udp4"].recvfrom(100)
    assert isinstance(report, dict)
    # The build's 127.0.0.1 and ::1 are its own loopback (refused); nothing else has a route.
    for family, address in addresses:
        local = address.startswith("127.") or address == "::1"
        tcp_expected = "ECONNREFUSED" if local else "ENETUNREACH"
        if family == "inet":
            udp_expected = "sent" if local else "ENETUNREACH"
            assert report[address] == [tcp_expected, tcp_expected, udp_expected], address
        elif address.startswith("fe80:"):
            assert report[address][0] in ("EINVAL", "ENETUNREACH", "EADDRNOTAVAIL"), address
        else:
            assert report[address] == [tcp_expected], address


def test_literal_addresses_and_dns_fail_fast(builds: Builds) -> None:
    report = builds.run(
        PROBE
        + textwrap.dedent(
            """
            start = time.monotonic()
            try:
                socket.getaddrinfo("example.com", 443)
                dns = "resolved"
            except socket.gaierror:
                dns = "gaierror"
            print(json.dumps({
                "1.1.1.1:443": tcp("1.1.1.1", 443),
                "169.254.169.254:80": tcp("169.254.169.254", 80),
                "[2606:4700::1111]:443": tcp("2606:4700::1111", 443, socket.AF_INET6),
                "udp 8.8.8.8:53": [udp("8.8.8.8", 53), 0],
                "dns": [dns, time.monotonic() - start],
            }))
            """
        )
    ).json()
    assert isinstance(report, dict)
    assert report.pop("dns")[0] == "gaierror"
    for target, outcome in report.items():
        assert outcome[0] == "ENETUNREACH", target
        assert outcome[1] < 0.5, target


def test_host_unix_sockets_and_tmp_are_out_of_reach(builds: Builds) -> None:
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
        abstract.bind("\0" + name)
        abstract.listen()
        servers.append(abstract)
        report = builds.run(
            "import errno, json, os, socket, sys\n"
            "report = {'/run': sorted(os.listdir('/run'))}\n"
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
    assert report == {
        "/run": ["fetchproxy"],
        str(paths[0]): "ENOENT",
        str(paths[1]): "ENOENT",
        "@" + name: "ECONNREFUSED",
    }


def test_the_build_holds_no_capability_over_the_sandbox_or_the_host(
    builds: Builds, tmp_path: Path
) -> None:
    report = builds.run(
        CAPABILITY_PROBE
        + textwrap.dedent(
            """
            import socket
            own_netns = os.open("/proc/self/ns/net", os.O_RDONLY)
            low_port = socket.create_server(("127.0.0.1", 80))
            with open("written-inside", "w") as f:
                f.write("x")
            print(json.dumps({
                "uid": os.getuid(),
                "uid_map": open("/proc/self/uid_map").read().split(),
                "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                "setns own network namespace": call(libc.setns, own_netns, 0x40000000),
                "umount /run": call(libc.umount2, b"/run", 0),
                "umount /proc": call(libc.umount2, b"/proc", 0),
                "remount /run/fetchproxy rw": call(
                    libc.mount, None, b"/run/fetchproxy", None, 0x20 | 0x1000, None
                ),
                "core_pattern": write("/proc/sys/kernel/core_pattern"),
                "ip_forward": write("/proc/sys/net/ipv4/ip_forward"),
                "port 80": low_port.getsockname()[1],
            }))
            """
        )
    ).json()
    assert report == {
        "uid": 0,  # root in a nested user namespace only
        "uid_map": ["0", "0", "1"],  # one id: the launcher's, through the sandbox's namespace
        "processes": [1, 2],  # the supervisor and the build
        "setns own network namespace": "EPERM",  # the sandbox's user namespace owns it
        "umount /run": "EINVAL",  # locked: the host's /run is below
        "umount /proc": "EINVAL",
        "remount /run/fetchproxy rw": "EPERM",
        "core_pattern": "EROFS",
        "ip_forward": "EROFS",
        "port 80": 80,
    }
    assert (tmp_path / "written-inside").stat().st_uid == os.getuid()


def test_a_proc_with_hidden_parts_is_refused_with_the_reason(tmp_path: Path) -> None:
    """As in containers: a mount over part of /proc, and the kernel refuses a fresh one."""
    needs_root()
    hidden = next(p for p in ("/proc/keys", "/proc/timer_list", "/proc/kcore") if Path(p).exists())
    code = (
        "from fetchproxy.sandbox import SandboxError, UserSandbox\n"
        "with UserSandbox() as sandbox:\n"
        "    try:\n"
        "        sandbox.spawn(['touch', 'ran'], env={'PATH': '/usr/bin:/bin'})\n"
        "    except SandboxError as error:\n"
        "        print(error)\n"
    )
    result = subprocess.run(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c"),
            f'mount --bind /dev/null {hidden} && exec "$@"',
            *("sh", *UNPRIVILEGED, sys.executable, "-c", code),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "cannot set up the sandbox for the build: the kernel refuses the unprivileged sandbox a "
        "fresh /proc, because mounts hide parts of this machine's /proc (as in most "
        "containers). Run fetchproxy as root for the root sandbox, or use --no-sandbox to run "
        "the build without network isolation.\n"
    )
    assert not (tmp_path / "ran").exists()


# --------------------------------------------------------------------------------- its life


def test_exit_codes_and_signals_are_reported_like_subprocess(builds: Builds) -> None:
    assert builds.run("raise SystemExit(3)").returncode == 3
    assert builds.run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode == (
        -signal.SIGTERM
    )
    build, stdout, _ = builds.start(
        "import signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
        "print('ready', flush=True)\n"
        "print(signal.sigwait({signal.SIGUSR1}) == signal.SIGUSR1, flush=True)\n"
    )
    wait_for(lambda: "ready" in stdout.read_text())
    build.send_signal(signal.SIGUSR1)  # to the entry, which passes it on to the supervisor
    assert build.wait(timeout=10) == 0
    assert stdout.read_text() == "ready\nTrue\n"


def test_an_unknown_command_is_reported_with_its_name(sandbox: UserSandbox, tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as raised:
        sandbox.spawn(["no-such-command-here"], env=BUILD_ENV, cwd=tmp_path)
    assert str(raised.value) == (
        "cannot run the build command 'no-such-command-here' in the sandbox: "
        "No such file or directory"
    )


def test_nothing_is_left_after_a_normal_exit(tmp_path: Path) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    with UserSandbox() as sandbox:
        result = Builds(sandbox, tmp_path).run(LEAVE_A_DAEMON, marker, "exit")
        assert (result.returncode, result.stdout) == (0, "ready\n")
        assert processes_with(marker) == []  # the PID namespace died with the build
        inode = linux.netns_inode(sandbox.namespaces.net_fd)
        watching = NamespaceWatch([sandbox.namespaces.net_fd])
    assert netns_references({inode}) == []
    watching.wait_until_destroyed()  # promptly, by the kernel: never left behind


def test_leaving_the_sandbox_kills_a_running_build(tmp_path: Path) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    with UserSandbox() as sandbox:
        build, stdout, _ = Builds(sandbox, tmp_path).start(LEAVE_A_DAEMON, marker, "wait")
        wait_for(lambda: "ready" in stdout.read_text())
        wait_for(lambda: len(processes_with(marker)) == 2)  # the daemon's exec may be under way
        inode = linux.netns_inode(sandbox.namespaces.net_fd)
    assert build.returncode == -signal.SIGKILL
    wait_for(lambda: processes_with(marker) == [])
    assert netns_references({inode}) == []


def test_nothing_is_left_after_an_unprivileged_launcher_is_sigkilled(tmp_path: Path) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    command = [
        *UNPRIVILEGED,
        *(sys.executable, str(USER_LAUNCHER), "--"),
        *(sys.executable, "-I", "-c", LEAVE_A_DAEMON, marker, "wait"),
    ]
    with launched(command, tmp_path) as (launcher, info):
        wait_for(lambda: len(processes_with(marker)) == 2)
        assert netns_references({info["netns"]}) != []
        handle = os.open(f"/proc/{launcher.pid}/fd/{info['fds'][0]}", os.O_RDONLY)
        watching = NamespaceWatch([handle])
        os.close(handle)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()

        def everything_gone() -> bool:
            """the build, its daemon, the entry, the supervisor and the namespace gone"""
            return (
                processes_with(marker) == []
                and process_is_gone(info["entry"])
                and netns_references({info["netns"]}) == []
            )

        wait_for(everything_gone)
        watching.wait_until_destroyed()


def test_an_unprivileged_launcher_gets_the_same_isolation(tmp_path: Path) -> None:
    needs_root()
    code = PROBE + textwrap.dedent(
        """
        import os
        port, host, service = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"ping")
        print(json.dumps({
            "proxy": s.recv(100).decode(),
            "uid": os.getuid(),
            "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "host service on its loopback": tcp("127.0.0.1", service)[0],
            "host service on another address": tcp(host, service)[0],
            "1.1.1.1": tcp("1.1.1.1", 443)[0],
        }))
        """
    )
    output = tmp_path / "build.out"
    host = next(a for f, a in host_addresses() if f == "inet" and not a.startswith("127."))
    with host_services() as services:
        result = subprocess.run(
            [
                *UNPRIVILEGED,
                *(sys.executable, str(USER_LAUNCHER), "--echo", "--output", str(output), "--"),
                *(sys.executable, "-I", "-c", code, "8080", host),
                str(services["tcp4"].getsockname()[1]),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        with pytest.raises(BlockingIOError):
            services["tcp4"].accept()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["listener"] == ["127.0.0.1", 8080]
    assert json.loads(output.read_text()) == {
        "proxy": "PING",
        "uid": 0,
        "processes": [1, 2],
        "host service on its loopback": "ECONNREFUSED",  # the sandbox's own loopback
        "host service on another address": "ENETUNREACH",
        "1.1.1.1": "ENETUNREACH",
    }


def test_a_ctrl_c_at_the_terminal_reaches_the_build_once(tmp_path: Path) -> None:
    """The terminal signals the whole foreground group: launcher, entry, supervisor and build.
    The entry drops its copy, the launcher passes its own on through the entry, and the
    supervisor drops that one."""
    needs_root()
    launcher = [*UNPRIVILEGED, sys.executable, str(USER_LAUNCHER), "--forward-signals", "--"]
    assert sigints_after_ctrl_c(launcher, tmp_path) == 1


def world_readable_python() -> str:
    """An interpreter (3.11+) that uid 65534 can run and start again by sys.executable."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3", path="/usr/bin:/bin")]
    check = "import subprocess, sys; assert sys.version_info >= (3, 11); " + (
        "subprocess.run([sys.executable, '-c', ''], check=True)"
    )
    for candidate in candidates:
        if (
            candidate is not None
            and subprocess.run(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    candidate,
                    "-c",
                    check,
                ],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ):
            return candidate
    pytest.fail(f"no Python 3.11+ among {candidates} that uid 65534 can run")


def test_an_ordinary_user_builds_it(tmp_path: Path) -> None:
    """As uid 65534 with no capability at all: the holder maps its uid, the supervisor maps its
    own in the nested namespace (as a non-dumpable process it needs care to), the build runs."""
    needs_root()
    python = world_readable_python()
    shared = Path(tempfile.mkdtemp(prefix="fetchproxy-test-user-"))
    try:
        shared.chmod(0o755)
        package = Path(fetchproxy.__file__).parent
        copy = shared / "lib" / "fetchproxy"
        copy.mkdir(parents=True)
        for name in ("__init__.py", "errors.py"):
            shutil.copy(package / name, copy / name)
        shutil.copytree(
            package / "sandbox", copy / "sandbox", ignore=shutil.ignore_patterns("*.pyc")
        )
        work = shared / "work"
        work.mkdir()
        os.chown(work, 65534, 65534)
        code = textwrap.dedent(
            """
            import json, os, sys
            from fetchproxy.sandbox import UserSandbox, available_sandbox
            chosen = available_sandbox("auto")
            with UserSandbox() as sandbox:
                build = sandbox.spawn(
                    ["sh", "-c", "id -u; cat /proc/self/uid_map; echo x > written-inside"],
                    env={"PATH": "/usr/bin:/bin"},
                    stdout=os.open("build.out", os.O_WRONLY | os.O_CREAT, 0o644),
                )
                status = build.wait(timeout=30)
            print(json.dumps([chosen, status]))
            """
        )
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code],
            cwd=work,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(shared / "lib")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == [["user", ""], 0]
        assert (work / "build.out").read_text().split() == ["0", "0", "0", "1"]
        assert (work / "written-inside").stat().st_uid == 65534
    finally:
        shutil.rmtree(shared)


# ------------------------------------------------------------------ fetchproxy record|replay


BODY = b"payload for the build\n" * 100
TLS_BODY = b"payload over https\n" * 50


class _Handler(http.server.BaseHTTPRequestHandler):
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib signature
        pass


@dataclass
class Origins:
    http: str
    https: HTTPSOrigin
    stop_http: Callable[[], None]


@pytest.fixture
def origins(tmp_path: Path) -> Iterator[Origins]:
    """An HTTP and an HTTPS origin on the host's 127.0.0.2, reachable only through the proxy."""
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _Handler)
    _Handler.connections = 0
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    stopped: list[bool] = []

    def stop_http() -> None:
        if not stopped:
            stopped.append(True)
            server.shutdown()
            server.server_close()
            thread.join()

    site = static_site({"/file.txt": ("text/plain", TLS_BODY)})
    try:
        with HTTPSOrigin(tmp_path / "origin", site) as https:
            yield Origins(f"http://127.0.0.2:{server.server_address[1]}", https, stop_http)
    finally:
        stop_http()


def fetchproxy_command(
    work: Path, *args: str, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    env["FETCHPROXY_STORE"] = str(work / "store")
    return run_fetchproxy(*args, cwd=work, env=env, prefix=prefix)


def notice(stderr: str, *, fallback: bool) -> str:
    """The user sandbox's line on stderr, with the proxy's (random) host port put back."""
    found = re.search(r"the proxy also listens on the host's (127\.0\.0\.1:\d+) during", stderr)
    assert found is not None, stderr
    expected = user_sandbox_notice("auto" if fallback else "user", "127.0.0.1:3128", found[1])
    assert expected in stderr.splitlines()
    return expected


def test_record_then_replay_in_the_user_sandbox(tmp_path: Path, origins: Origins) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    with socket.create_server(("127.0.0.1", 0)) as host_service:
        host_service.setblocking(False)
        build = (
            f"curl -sSf -o got.txt {origins.http}/file.txt && "
            f"curl -sSf -o got-tls.txt {origins.https.url}/file.txt && "
            "readlink /proc/$$/ns/net > netns.txt && "
            f"{{ {sys.executable} -I -c 'import time; time.sleep(300)' {marker} & }} && "
            f"curl -sS --noproxy '*' --max-time 5 {origins.http}/file.txt; echo direct=$?; "
            f"curl -sS --max-time 5 http://127.0.0.1:{host_service.getsockname()[1]}/; "
            "echo host-loopback=$?"
        )
        recorded = fetchproxy_command(
            tmp_path,
            "record",
            "--sandbox",
            "user",
            "--upstream-ca",
            str(origins.https.ca_path),
            "--",
            "sh",
            "-c",
            build,
        )
        with pytest.raises(BlockingIOError):
            host_service.accept()
    assert recorded.returncode == 0, recorded.stderr
    assert (tmp_path / "got.txt").read_bytes() == BODY
    assert (tmp_path / "got-tls.txt").read_bytes() == TLS_BODY
    # Around the proxy there is no way out: 127.0.0.2 and 127.0.0.1 are the build's own loopback.
    assert recorded.stdout.splitlines() == ["direct=7", "host-loopback=7"]
    assert recorded.stderr.splitlines()[0] == notice(recorded.stderr, fallback=False)
    assert "fetchproxy: recorded 2 fetches (3.1 KiB) into fetchproxy.lock.toml" in recorded.stderr
    assert _Handler.connections == 1  # the proxy's, from the host
    assert len(origins.https.requests) == 1
    # the daemon the build left died with it, and its namespace with the launcher
    assert processes_with(marker) == []
    inode = int((tmp_path / "netns.txt").read_text().strip().removeprefix("net:[")[:-1])
    assert netns_references({inode}) == []

    origins.stop_http()
    origins.https.stop()
    for name in ("got.txt", "got-tls.txt"):
        (tmp_path / name).unlink()
    replay = (
        f"curl -sSf -o got.txt {origins.http}/file.txt && "
        f"curl -sSf -o got-tls.txt {origins.https.url}/file.txt"
    )
    replayed = fetchproxy_command(
        tmp_path, "replay", "--exact", "--sandbox", "user", "--", "sh", "-c", replay
    )
    assert replayed.returncode == 0, replayed.stderr
    assert (tmp_path / "got.txt").read_bytes() == BODY
    assert (tmp_path / "got-tls.txt").read_bytes() == TLS_BODY
    assert "fetchproxy: served 2 fetches (3.1 KiB) from fetchproxy.lock.toml" in replayed.stderr
    # replay serves on the listener inside the sandbox: no relay, nothing listens on the host
    assert replayed.stderr.splitlines()[0] == user_sandbox_notice("user", "127.0.0.1:3128", None)
    assert "also listens on the host" not in replayed.stderr


def test_without_root_record_falls_back_to_the_user_sandbox_and_says_so(
    tmp_path: Path, origins: Origins
) -> None:
    needs_root()
    recorded = fetchproxy_command(
        tmp_path, "record", "--", "curl", "-sSf", f"{origins.http}/file.txt", prefix=UNPRIVILEGED
    )
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.encode() == BODY
    line = notice(recorded.stderr, fallback=True)
    assert line.startswith(
        "fetchproxy: not root, so the build runs in the unprivileged sandbox: a network "
        "namespace with only its own loopback, where the proxy is relayed in at "
        "127.0.0.1:3128. Unlike the root sandbox it maps only uid 0 (the build cannot chown "
        "files to other users), and the proxy also listens on the host's 127.0.0.1:"
    )
    origins.stop_http()
    replayed = fetchproxy_command(
        tmp_path, "replay", "--", "curl", "-sSf", f"{origins.http}/file.txt", prefix=UNPRIVILEGED
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.encode() == BODY


def test_without_any_sandbox_record_refuses_and_runs_nothing(tmp_path: Path) -> None:
    needs_root()
    result = fetchproxy_command(tmp_path, "record", "--", "touch", "ran", prefix=NO_CAPABILITIES)
    assert result.returncode == 2
    assert result.stderr == (f"fetchproxy: error: {ROOT_LACKS}; or: {NO_SETFCAP}\n")
    assert not (tmp_path / "ran").exists()

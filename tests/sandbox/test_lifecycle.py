"""The build's life: exit status, signals, errors, and nothing left behind, however it ends."""

from __future__ import annotations

import errno
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from fetchproxy.sandbox import Sandbox, SandboxError, linux
from tests.sandbox.conftest import (
    BUILD_ENV,
    LAUNCHER,
    LEAVE_A_DAEMON,
    Builds,
    NamespaceWatch,
    launched,
    needs_root,
    netns_references,
    process_is_gone,
    processes_with,
    sigints_after_ctrl_c,
    wait_for,
)

pytestmark = pytest.mark.root


def sandbox_inodes(sandbox: Sandbox) -> set[int]:
    namespaces = sandbox.namespaces
    return {linux.netns_inode(namespaces.edge_fd), linux.netns_inode(namespaces.sandbox_fd)}


def watch(sandbox: Sandbox) -> NamespaceWatch:
    return NamespaceWatch([sandbox.namespaces.edge_fd, sandbox.namespaces.sandbox_fd])


def test_exit_codes_and_signals_are_reported_like_subprocess(builds: Builds) -> None:
    assert builds.run("raise SystemExit(3)").returncode == 3
    assert builds.run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode == (
        -signal.SIGTERM
    )


def test_signals_from_the_launcher_reach_the_build(builds: Builds) -> None:
    # sigwait, not a handler: a handler's print can race the main thread's own print.
    build, stdout, stderr = builds.start(
        "import signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "print('ready', flush=True)\n"
        "print('got', int(signal.sigwait({signal.SIGTERM})), flush=True)\n"
        "sys.exit(7)\n"
    )
    wait_for(lambda: "ready" in stdout.read_text())
    assert build.poll() is None
    build.send_signal(signal.SIGTERM)
    assert build.wait(timeout=10) == 7, stderr.read_text()
    assert stdout.read_text() == f"ready\ngot {signal.SIGTERM.value}\n"
    assert build.poll() == 7


def test_an_unknown_command_is_reported_with_its_name(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as raised:
        sandbox.spawn(["no-such-command-fetchproxy"], env=BUILD_ENV, cwd=tmp_path)
    assert str(raised.value) == (
        "cannot run the build command 'no-such-command-fetchproxy' in the sandbox: "
        "No such file or directory"
    )
    assert raised.value.errno == errno.ENOENT


def test_a_missing_working_directory_is_reported(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as raised:
        sandbox.spawn(["true"], env=BUILD_ENV, cwd=tmp_path / "missing")
    assert str(raised.value) == (
        f"cannot set up the sandbox for the build: {tmp_path}/missing: No such file or directory"
    )


def test_the_working_directory_and_kept_paths_stay_the_hosts(
    sandbox: Sandbox, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("kept") / "tool.txt"
    elsewhere.write_text("kept")
    build = sandbox.spawn(
        [
            "sh",
            "-c",
            'pwd > from-inside.txt; cat "$1" >> from-inside.txt',
            "sh",
            str(elsewhere),
        ],
        env=BUILD_ENV,
        cwd=tmp_path,
        keep=[elsewhere],
    )
    assert build.wait(timeout=10) == 0
    assert (tmp_path / "from-inside.txt").read_text() == f"{tmp_path}\nkept"


def test_nothing_is_left_after_a_normal_exit(sandbox: Sandbox, builds: Builds) -> None:
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    result = builds.run(LEAVE_A_DAEMON, marker, "exit")
    assert (result.returncode, result.stdout) == (0, "ready\n")
    assert processes_with(marker) == []  # the PID namespace died with the build
    inodes = sandbox_inodes(sandbox)
    watching = watch(sandbox)
    sandbox.close()
    assert netns_references(inodes) == []
    watching.wait_until_destroyed()  # promptly, by the kernel: never left behind


def test_nothing_is_left_after_the_build_is_killed(sandbox: Sandbox, builds: Builds) -> None:
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    build, stdout, _ = builds.start(LEAVE_A_DAEMON, marker, "wait")
    wait_for(lambda: "ready" in stdout.read_text())
    # the build and its daemon: Popen returns once the daemon's exec has begun, before the
    # kernel has given it its new command line, so wait until both show the marker
    wait_for(lambda: len(processes_with(marker)) == 2)
    build.kill()
    assert build.wait(timeout=10) == -signal.SIGKILL
    assert processes_with(marker) == []


def test_leaving_the_sandbox_kills_a_running_build(tmp_path: Path) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    with Sandbox() as sandbox:
        builds = Builds(sandbox, tmp_path)
        build, stdout, _ = builds.start(LEAVE_A_DAEMON, marker, "wait")
        wait_for(lambda: "ready" in stdout.read_text())
        inodes = sandbox_inodes(sandbox)
        watching = watch(sandbox)
    assert build.returncode == -signal.SIGKILL
    assert processes_with(marker) == []
    assert netns_references(inodes) == []
    watching.wait_until_destroyed()  # promptly, by the kernel: never left behind


def test_nothing_is_left_after_the_launcher_is_sigkilled(tmp_path: Path) -> None:
    needs_root()
    marker = f"fetchproxy-test-{uuid.uuid4()}"
    command = [
        *(sys.executable, str(LAUNCHER), "--"),
        *(sys.executable, "-I", "-c", LEAVE_A_DAEMON, marker, "wait"),
    ]
    with launched(command, tmp_path) as (launcher, info):
        wait_for(lambda: len(processes_with(marker)) == 2)
        inodes = {info["sandbox_netns"], info["edge_netns"]}
        assert netns_references(inodes) != []
        handles = [os.open(f"/proc/{launcher.pid}/fd/{fd}", os.O_RDONLY) for fd in info["fds"]]
        watching = NamespaceWatch(handles)
        for handle in handles:
            os.close(handle)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()

        def everything_gone() -> bool:
            """the build, its daemon, the supervisor and both namespaces gone"""
            return (
                processes_with(marker) == []
                and process_is_gone(info["supervisor"])
                and netns_references(inodes) == []
            )

        wait_for(everything_gone)
        watching.wait_until_destroyed()


def test_a_ctrl_c_at_the_terminal_reaches_the_build_once(tmp_path: Path) -> None:
    """The terminal signals the whole foreground group, launcher included; the launcher
    passes its SIGINT on, and the supervisor drops that second copy."""
    needs_root()
    launcher = [sys.executable, str(LAUNCHER), "--forward-signals", "--"]
    assert sigints_after_ctrl_c(launcher, tmp_path) == 1


def test_a_build_run_from_tmp_itself_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError) as raised:
        sandbox.spawn(["true"], env=BUILD_ENV, cwd=Path("/tmp"))
    assert str(raised.value) == (
        "cannot run the build in the sandbox: the working directory (or a kept "
        "path) is /tmp, which the sandbox makes private; keeping it would hand the build the "
        "host's /tmp. Run the build from a directory of its own"
    )

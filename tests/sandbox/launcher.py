"""A sandbox launcher in a process of its own, for tests that SIGKILL it or change its mounts.

    python launcher.py [--bind-host-netns PATH] [--forward-signals] [--no-terminal] -- COMMAND...

Prints one JSON line once the build runs (the supervisor's PID, the
namespaces' inodes and descriptors), then waits for the build and exits with its status.
``--bind-host-netns`` first moves this process into a private mount namespace
and bind-mounts the host's network namespace at PATH (as ``ip netns add``
would), so that a build can be handed a real handle to the host's network.
``--forward-signals`` passes SIGINT and SIGTERM on to the build, as the CLI does
(0.2 s later: delivered together, two signals would count as one). ``--no-terminal``: the
build's stdin, stdout and stderr are /dev/null, whatever the launcher's are.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from fetchproxy.sandbox import BuildProcess, Sandbox, linux


def forward_signals(builds: list[BuildProcess]) -> None:
    """Pass SIGINT and SIGTERM on to the build, a little late, so that a test sees two copies
    of one signal as two."""

    def forward(number: int, _frame: object) -> None:
        for build in builds:
            threading.Timer(0.2, build.send_signal, (number,)).start()

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, forward)


def bind_host_netns(path: Path) -> None:
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    path.touch()
    linux.mount("/proc/self/ns/net", str(path), None, linux.MS_BIND)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind-host-netns", type=Path)
    parser.add_argument("--forward-signals", action="store_true")
    parser.add_argument("--no-terminal", action="store_true")
    parser.add_argument("command", nargs="+")
    options = parser.parse_args()
    if options.bind_host_netns is not None:
        bind_host_netns(options.bind_host_netns)
    null = os.open(os.devnull, os.O_RDWR) if options.no_terminal else None
    builds: list[BuildProcess] = []
    if options.forward_signals:  # before the build exists: a signal may come as soon as it does
        forward_signals(builds)
    with Sandbox() as sandbox:
        build = sandbox.spawn(
            options.command, env={"PATH": os.environ["PATH"]}, stdin=null, stdout=null, stderr=null
        )
        builds.append(build)
        namespaces = sandbox.namespaces
        info = {
            "supervisor": build.pid,
            "sandbox_netns": linux.netns_inode(namespaces.sandbox_fd),
            "edge_netns": linux.netns_inode(namespaces.edge_fd),
            "fds": [namespaces.sandbox_fd, namespaces.edge_fd],
        }
        print(json.dumps(info), flush=True)
        returncode = build.wait()
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())

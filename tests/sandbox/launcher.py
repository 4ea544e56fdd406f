"""A sandbox launcher in a process of its own, for tests that SIGKILL it or change its mounts.

    python launcher.py [--bind-host-netns PATH] [--forward-signals] -- COMMAND...

Prints one JSON line once the build runs (the supervisor's PID, the
namespaces' inodes and descriptors), then waits for the build and exits with its status.
``--bind-host-netns`` first moves this process into a private mount namespace
and bind-mounts the host's network namespace at PATH (as ``ip netns add``
would), so that a build can be handed a real handle to the host's network.
``--forward-signals`` passes SIGINT and SIGTERM on to the build, as the CLI does
(0.2 s later: delivered together, two signals would count as one).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from fetchproxy.sandbox import Sandbox, linux


def bind_host_netns(path: Path) -> None:
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    path.touch()
    linux.mount("/proc/self/ns/net", str(path), None, linux.MS_BIND)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind-host-netns", type=Path)
    parser.add_argument("--forward-signals", action="store_true")
    parser.add_argument("command", nargs="+")
    options = parser.parse_args()
    if options.bind_host_netns is not None:
        bind_host_netns(options.bind_host_netns)
    with Sandbox() as sandbox:
        # the interpreter's environment may live under /tmp, which the sandbox makes private
        build = sandbox.spawn(
            options.command, env={"PATH": os.environ["PATH"]}, keep=[Path(sys.prefix)]
        )
        if options.forward_signals:
            # A little late, so that a test sees two copies of one signal as two.
            def forward(number: int, _frame: object) -> None:
                threading.Timer(0.2, build.send_signal, (number,)).start()

            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, forward)
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

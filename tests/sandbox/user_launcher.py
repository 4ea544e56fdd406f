"""A UserSandbox launcher in a process of its own, for tests that run it without privilege
(under ``setpriv``) or SIGKILL it.

    python user_launcher.py [--output FILE] [--echo] [--forward-signals] [--no-terminal] -- CMD...

Prints one JSON line once the build runs (the entry's PID, the namespaces' inodes and
descriptors, the listener's address), then waits for the build and exits with its status.
``--output``: the build's stdout goes there. ``--echo``: a thread answers each connection to
the listener inside with what it read, upper-cased. ``--forward-signals`` passes SIGINT and
SIGTERM on to the build, as the CLI does (0.2 s later: delivered together, two signals would
count as one). ``--no-terminal``: the build's stdin and stderr (and stdout, without
``--output``) are /dev/null, whatever the launcher's are.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from fetchproxy.sandbox import BuildProcess, UserSandbox, linux


def forward_signals(builds: list[BuildProcess]) -> None:
    """As ``launcher.py`` does (run as a script, this cannot import it)."""

    def forward(number: int, _frame: object) -> None:
        for build in builds:
            threading.Timer(0.2, build.send_signal, (number,)).start()

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, forward)


def echo_upper(listener: socket.socket) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return  # closed
        with connection:
            connection.sendall(connection.recv(100).upper())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", type=Path)
    parser.add_argument("--echo", action="store_true")
    parser.add_argument("--forward-signals", action="store_true")
    parser.add_argument("--no-terminal", action="store_true")
    parser.add_argument("command", nargs="+")
    options = parser.parse_args()
    null = os.open(os.devnull, os.O_RDWR) if options.no_terminal else None
    builds: list[BuildProcess] = []
    if options.forward_signals:  # before the build exists: a signal may come as soon as it does
        forward_signals(builds)
    with UserSandbox() as sandbox:
        listener = sandbox.accept_socket()
        if options.echo:
            threading.Thread(target=echo_upper, args=(listener,), daemon=True).start()
        stdout = None if options.output is None else options.output.open("wb")
        try:
            build = sandbox.spawn(
                options.command,
                env={"PATH": os.environ["PATH"]},
                stdin=null,
                stdout=null if stdout is None else stdout.fileno(),
                stderr=null,
            )
        finally:
            if stdout is not None:
                stdout.close()
        builds.append(build)
        namespaces = sandbox.namespaces
        info = {
            "entry": build.pid,
            "netns": linux.netns_inode(namespaces.net_fd),
            "userns": os.fstat(namespaces.user_fd).st_ino,
            "fds": [namespaces.net_fd, namespaces.user_fd],
            "listener": list(listener.getsockname()),
        }
        print(json.dumps(info), flush=True)
        returncode = build.wait()
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())

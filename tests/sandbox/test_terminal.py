"""The user's terminal: a build cannot type into it, and interactive builds keep working.

Each test makes a pty pair, the *outer terminal*: the test holds the controller (what a
terminal emulator would) and the terminal device, which becomes the controlling terminal of
a launcher (``launcher.py``, or ``user_launcher.py`` without privilege) in a session of its
own, as a shell would start it. What the build pushed into the outer terminal's input queue
is what the user's shell would read and run after fetchproxy exits; the queue is read while
the launcher still runs (its exit hangs the terminal up, which empties the queue).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.sandbox import Sandbox, UserSandbox
from tests.sandbox.conftest import (
    LAUNCHER,
    USER_LAUNCHER,
    Builds,
    needs_root,
    sigints_after_ctrl_c,
    wait_for,
)

pytestmark = pytest.mark.root

UNPRIVILEGED = ["setpriv", "--bounding-set=-all,+setfcap", "--inh-caps=-all", "--no-new-privs"]
LAUNCHERS = {
    "root": [sys.executable, str(LAUNCHER)],
    "user": [*UNPRIVILEGED, sys.executable, str(USER_LAUNCHER)],
}


class OuterTerminal:
    """A pty pair standing in for the user's terminal; what it shows is collected."""

    def __init__(self, rows: int = 40, columns: int = 100) -> None:
        self.controller, self.device = os.openpty()
        self.settings = termios.tcgetattr(self.device)
        self.resize(rows, columns)
        self._shown = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.controller, 65536)
            except OSError:
                return
            if not data:
                return
            self._shown += data

    def shown(self) -> bytes:
        return bytes(self._shown)

    def resize(self, rows: int, columns: int) -> None:
        fcntl.ioctl(self.device, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def type(self, data: bytes) -> None:
        os.write(self.controller, data)

    def queued_input(self) -> int:
        """Bytes waiting in the terminal's input queue: what the shell would read next."""
        count = array.array("i", [0])
        fcntl.ioctl(self.device, termios.FIONREAD, count)
        return count[0]

    def close(self) -> None:
        os.close(self.device)
        os.close(self.controller)
        self._reader.join(5)


@contextlib.contextmanager
def outer_terminal() -> Iterator[OuterTerminal]:
    terminal = OuterTerminal()
    try:
        yield terminal
    finally:
        terminal.close()


@contextlib.contextmanager
def launched_in(
    terminal: OuterTerminal, launcher: list[str], code: str, *args: str, cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``launcher -- python -c code args`` with the outer terminal as its controlling terminal
    and stdin, stdout and stderr; killed at the end, whatever happened."""
    process = subprocess.Popen(
        ["setsid", "--ctty", *launcher, "--", sys.executable, "-I", "-c", code, *args],
        cwd=cwd,
        stdin=terminal.device,
        stdout=terminal.device,
        stderr=terminal.device,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def report(directory: Path, name: str = "report.json") -> object:
    wait_for((directory / name).exists)
    time.sleep(0.05)  # written in one go, but let the writer finish
    return json.loads((directory / name).read_text())


# The build's attempts to type into a terminal: TIOCSTI on /dev/tty, on fds 0, 1, 2, and on a
# free virtual console it makes its controlling terminal; TIOCLINUX (paste the selection).
INJECT = textwrap.dedent(
    """
    import errno, fcntl, json, os, sys, termios, time
    outer = json.loads(sys.argv[1])  # the outer terminal's file system and device numbers

    def is_outer(status):
        return [status.st_dev, status.st_rdev] == outer

    def attempt(fd, request, arguments):
        try:
            for argument in arguments:
                fcntl.ioctl(fd, request, argument)
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]

    def attempts(fd, marker):
        # a whole command line, as the user's shell would run it
        line = b"echo RAN-ON-HOST-" + marker + b" > /dev/null\\n"
        return {
            "TIOCSTI": attempt(fd, termios.TIOCSTI, [bytes([c]) for c in line]),
            "TIOCLINUX": attempt(fd, termios.TIOCLINUX, [bytes([3])]),  # TIOCL_PASTESEL
        }

    report = {}
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
        report["/dev/tty"] = attempts(tty, b"A")
    except OSError as e:
        report["/dev/tty"] = errno.errorcode[e.errno]
    for fd, marker in ((0, b"B"), (1, b"C"), (2, b"D")):
        report[fd] = attempts(fd, marker)
        report[f"{fd} is the outer terminal"] = is_outer(os.fstat(fd))
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    report["any fd is the outer terminal"] = any(
        os.path.exists(f"/proc/self/fd/{fd}") and is_outer(os.stat(f"/proc/self/fd/{fd}"))
        for fd in fds
    )
    # A child in a session of its own opens a virtual console nobody holds: it becomes the
    # child's controlling terminal, where TIOCSTI and TIOCLINUX work.
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        found = {}
        for path in ("/dev/tty63", "/dev/tty1", "/dev/console"):
            try:
                fd = os.open(path, os.O_RDWR)
                found[path] = attempts(fd, b"E")
            except OSError as e:
                found[path] = errno.errorcode[e.errno]
        os.write(write_end, json.dumps(found).encode())
        os._exit(0)
    os.close(write_end)
    report["consoles"] = json.loads(os.read(read_end, 65536))
    os.wait()
    import select
    report["queued input"] = bool(select.select([0], [], [], 0.2)[0])
    with open("report.json.tmp", "w") as f:
        json.dump(report, f)
    os.rename("report.json.tmp", "report.json")
    time.sleep(60)  # until the test has looked at the outer terminal's queue
    """
)


@pytest.mark.parametrize("kind", ["root", "user"])
def test_a_build_cannot_type_into_the_users_terminal(kind: str, tmp_path: Path) -> None:
    needs_root()
    with outer_terminal() as terminal:
        status = os.fstat(terminal.device)
        outer = json.dumps([status.st_dev, status.st_rdev])
        with launched_in(terminal, LAUNCHERS[kind], INJECT, outer, cwd=tmp_path):
            seen = report(tmp_path)
            queued = terminal.queued_input()
    refused = {"TIOCSTI": "EPERM", "TIOCLINUX": "EPERM"}
    assert seen == {
        "/dev/tty": refused,  # the build's own pty, and the filter refuses both anyway
        "0": refused,
        "0 is the outer terminal": False,
        "1": refused,
        "1 is the outer terminal": False,
        "2": refused,
        "2 is the outer terminal": False,
        "any fd is the outer terminal": False,
        "consoles": {"/dev/tty63": "ENOENT", "/dev/tty1": "ENOENT", "/dev/console": "ENOENT"},
        "queued input": False,  # nothing reached the build's own terminal either
    }
    assert queued == 0


NO_TERMINAL = textwrap.dedent(
    """
    import errno, fcntl, json, os, termios
    report = {"isatty": [os.isatty(fd) for fd in (0, 1, 2)]}
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
        fcntl.ioctl(fd, termios.TIOCSTI, b"X")
        report["/dev/tty"] = "injected"
    except OSError as e:
        report["/dev/tty"] = errno.errorcode[e.errno]
    with open("report.json", "w") as f:
        json.dump(report, f)
    import time; time.sleep(60)
    """
)


@pytest.mark.parametrize("kind", ["root", "user"])
def test_a_build_without_a_terminal_cannot_reach_the_launchers(kind: str, tmp_path: Path) -> None:
    """The launcher has a controlling terminal, the build's descriptors are not terminals: no
    pty is made, and the build, in a session of its own, has no controlling terminal."""
    needs_root()
    launcher = [*LAUNCHERS[kind], "--no-terminal"]
    with outer_terminal() as terminal, launched_in(terminal, launcher, NO_TERMINAL, cwd=tmp_path):
        seen = report(tmp_path)
        queued = terminal.queued_input()
    assert seen == {"isatty": [False, False, False], "/dev/tty": "ENXIO"}
    assert queued == 0


INTERACTIVE = textwrap.dedent(
    """
    import fcntl, getpass, json, os, signal, struct, sys, termios

    def size():
        rows, columns, _, _ = struct.unpack("HHHH", fcntl.ioctl(1, termios.TIOCGWINSZ, bytes(8)))
        return [rows, columns]

    def save(name, value):
        with open(name + ".tmp", "w") as f:
            json.dump(value, f)
        os.rename(name + ".tmp", name)

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
    save("started.json", {
        "isatty": [os.isatty(fd) for fd in (0, 1, 2)],
        "ttyname": os.ttyname(0),
        "size": size(),
    })
    print("\\x1b[32mcoloured\\x1b[0m", flush=True)
    name = input("name? ")
    secret = getpass.getpass("secret? ")
    signal.sigwait({signal.SIGWINCH})
    save("report.json", {"name": name, "secret": secret, "size after": size()})
    """
)


@pytest.mark.parametrize("kind", ["root", "user"])
def test_interactive_builds_keep_working(kind: str, tmp_path: Path) -> None:
    """A prompt reads the terminal, getpass turns its echo off, isatty and the window size
    hold, and a resize reaches the build as SIGWINCH with the new size."""
    needs_root()
    with outer_terminal() as terminal:
        with launched_in(terminal, LAUNCHERS[kind], INTERACTIVE, cwd=tmp_path) as launcher:
            started = report(tmp_path, "started.json")
            wait_for(lambda: b"name? " in terminal.shown())
            terminal.type(b"Ada\r")
            wait_for(lambda: b"secret? " in terminal.shown())
            terminal.type(b"hunter2\r")
            wait_for(lambda: terminal.shown().count(b"\n") >= 3)
            time.sleep(0.2)  # the build is in sigwait by now
            terminal.resize(50, 132)
            os.killpg(launcher.pid, signal.SIGWINCH)  # what a terminal emulator's resize does
            seen = report(tmp_path)
            assert launcher.wait(timeout=30) == 0
        shown = terminal.shown()
        settings_after = termios.tcgetattr(terminal.device)
    assert started == {"isatty": [True, True, True], "ttyname": "/dev/pts/0", "size": [40, 100]}
    assert seen == {"name": "Ada", "secret": "hunter2", "size after": [50, 132]}
    assert b"\x1b[32mcoloured\x1b[0m" in shown
    assert b"Ada" in shown  # echoed once, by the build's own terminal
    assert shown.count(b"Ada") == 1
    assert b"hunter2" not in shown  # getpass turned echo off, and the outer terminal is raw
    assert settings_after == terminal.settings


@pytest.mark.parametrize("kind", ["root", "user"])
def test_the_terminal_is_restored_after_the_launcher_is_killed(kind: str, tmp_path: Path) -> None:
    needs_root()
    code = "open('report.json', 'w').write('{}')\nimport time; time.sleep(60)\n"
    with (
        outer_terminal() as terminal,
        launched_in(terminal, LAUNCHERS[kind], code, cwd=tmp_path) as launcher,
    ):
        report(tmp_path)
        raw = termios.tcgetattr(terminal.device)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()

        def restored() -> bool:
            """the terminal's settings as they were"""
            return termios.tcgetattr(terminal.device) == terminal.settings

        wait_for(restored)
    assert raw != terminal.settings  # input was raw while the build ran
    assert raw[3] & termios.ISIG == 0


@pytest.mark.parametrize("kind", ["root", "user"])
def test_a_ctrl_c_reaches_a_build_without_a_terminal_once(kind: str, tmp_path: Path) -> None:
    """No pty (the build's descriptors are not terminals), and the build is not in the
    terminal's foreground group: the supervisor passes the terminal's SIGINT on, and drops
    the launcher's copy of it."""
    needs_root()
    launcher = [*LAUNCHERS[kind], "--forward-signals", "--no-terminal", "--"]
    assert sigints_after_ctrl_c(launcher, tmp_path) == 1


# In a session of its own, on a pty of its own: TIOCSTI through the native system call and,
# on x86_64, through the i386 one (``int $0x80`` from code in a page below 4 GiB, so that
# the byte's address fits in 32 bits): push rbx; eax = 54 (ioctl); ebx = edi; ecx = esi;
# edx stays; int $0x80; pop rbx; ret.
FILTERED = textwrap.dedent(
    """
    import ctypes, errno, fcntl, json, mmap, os, termios
    master, slave = os.openpty()
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        found = {}
        try:
            fcntl.ioctl(slave, termios.TIOCSTI, b"x")
            found["TIOCSTI"] = "ok"
        except OSError as e:
            found["TIOCSTI"] = errno.errorcode[e.errno]
        try:
            fcntl.ioctl(slave, termios.TIOCGWINSZ, bytes(8))
            found["TIOCGWINSZ"] = "ok"
        except OSError as e:
            found["TIOCGWINSZ"] = errno.errorcode[e.errno]
        if os.uname().machine == "x86_64":
            page = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40, prot=7)
            page.write(bytes.fromhex("53 b8 36 00 00 00 89 fb 89 f1 cd 80 5b c3"))
            page[100:101] = b"y"
            base = ctypes.addressof(ctypes.c_char.from_buffer(page))
            call = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint)
            result = call(base)(slave, termios.TIOCSTI, base + 100)
            found["TIOCSTI i386"] = "ok" if result == 0 else errno.errorcode[-result]
        os.write(write_end, json.dumps(found).encode())
        os._exit(0)
    os.close(write_end)
    print(os.read(read_end, 4096).decode())
    os.wait()
    """
)


@pytest.mark.parametrize("kind", ["root", "user"])
def test_the_filter_refuses_tiocsti_through_every_system_call_table(
    kind: str, tmp_path: Path
) -> None:
    needs_root()
    sandbox = Sandbox() if kind == "root" else UserSandbox()
    with sandbox:
        found = Builds(sandbox, tmp_path).run(FILTERED).json()
    expected = {"TIOCSTI": "EPERM", "TIOCGWINSZ": "ok"}
    if os.uname().machine == "x86_64":
        expected["TIOCSTI i386"] = "EPERM"
    assert found == expected

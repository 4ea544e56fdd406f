"""The build's terminal: a pty of the sandbox's own, relayed to and from the user's terminal.

The build runs in a session of its own, so it has no controlling terminal but the one it is
given, and no descriptor of the user's terminal: it cannot push input into it (TIOCSTI),
change its settings or take it over. When the build's stdin, stdout or stderr is a terminal,
the supervisor opens a pty in the sandbox's own ``devpts`` (``/dev/pts/0`` inside), gives it
the user's terminal's settings and window size, and makes it the build's controlling terminal
and those descriptors. Two threads copy bytes: the user's terminal to the pty, the pty to the
user's terminal. A prompt, colours (``isatty``), the window size (``TIOCGWINSZ``) and
``SIGWINCH`` work as on the user's terminal.

While the build runs, the user's terminal takes input raw (``ISIG``, ``ICANON``, ``ECHO``
off; output processing stays on), as ``script`` and ``ssh`` do: Ctrl-C arrives as a byte, and
the pty, as the build's terminal, turns it into one SIGINT for the build's foreground process
group; echo and line editing happen in the pty, so a password prompt that turns echo off is
not echoed by the outer terminal either. This is done only when the launcher is in the
foreground of that terminal (``tcgetpgrp``); a background launcher never touches it, and then
relays no input. The settings are restored when the build ends, when the launcher goes away,
and by the launcher itself (``build.py``) after a supervisor that was killed.

:func:`plan_terminal` (pure) is the launcher's part; :class:`Terminal` runs in the
supervisor, which imports this module only when there is a terminal.
"""

from __future__ import annotations

import fcntl
import os
import termios
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every build ~3 ms
if TYPE_CHECKING:
    from typing import Any

_WINSIZE = 8  # struct winsize: four unsigned shorts
_DRAIN_TIMEOUT = 1.0


def plan_terminal(isatty: tuple[bool, bool, bool], *, foreground: bool) -> dict[str, Any] | None:
    """What the supervisor does for a build whose stdin, stdout, stderr are ``isatty``.

    ``foreground``: the launcher's process group is its stdin terminal's foreground group.
    None when none is a terminal: no pty, nothing changes.
    """
    slots = [fd for fd in (0, 1, 2) if isatty[fd]]
    if not slots:
        return None
    relay_input = isatty[0] and foreground
    return {
        "slots": slots,
        "source": slots[0],  # settings and window size come from here
        "output": next(fd for fd in (1, 2, 0) if isatty[fd]),
        "input": relay_input,
        "raw": relay_input,
    }


def input_raw(attributes: list[Any]) -> list[Any]:
    """``termios`` attributes that pass every input byte through; output processing stays."""
    raw = [*attributes[:6], list(attributes[6])]
    raw[0] &= ~(termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON)
    raw[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN | termios.ISIG)
    raw[6][termios.VMIN] = 1
    raw[6][termios.VTIME] = 0
    return raw


def mid_line_after(data: bytes, *, was: bool) -> bool:
    """Whether output leaves the terminal's cursor mid-line after ``data`` (``was``: before
    it): something other than escape sequences (a colour reset, the cursor shown again)
    follows the last newline. A carriage return counts as text: what is printed next would
    overwrite the line's start."""
    last = data.rfind(b"\n")
    tail = data[last + 1 :]
    while tail:
        if tail[0] != 0x1B:
            return True
        end = _escape_length(tail)
        if end is None:
            return True  # cut short: take it for text
        tail = tail[end:]
    return was if last < 0 else False


def _escape_length(data: bytes) -> int | None:
    """The length of the escape sequence ``data`` starts with (ECMA-48: CSI, OSC, or ESC and
    one byte); None when it is not complete."""
    if len(data) < 2:
        return None
    kind = data[1]
    if kind == 0x5B:  # CSI: parameters, intermediates, one final byte
        for index in range(2, len(data)):
            byte = data[index]
            if 0x40 <= byte <= 0x7E:
                return index + 1
            if not 0x20 <= byte <= 0x3F:
                return None
        return None
    if kind == 0x5D:  # OSC: up to BEL or ST (ESC \\)
        bell, st = data.find(b"\x07", 2), data.find(b"\x1b\\", 2)
        if bell < 0 and st < 0:
            return None
        return bell + 1 if st < 0 or 0 <= bell < st else st + 2
    return 2


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


class Terminal:
    """The pty and its relay, in the supervisor (after its root is the build's)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self._plan = plan
        self._saved: list[Any] | None = None
        self._threads: list[Any] = []
        self.mid_line = False
        """The build's last output did not end its line (what is printed next starts one)."""
        self.master, self.slave = os.openpty()  # from the sandbox's /dev/ptmx
        try:
            termios.tcsetattr(self.slave, termios.TCSANOW, termios.tcgetattr(plan["source"]))
            self.resize()
            if plan["raw"]:
                self._saved = termios.tcgetattr(0)
                termios.tcsetattr(0, termios.TCSADRAIN, input_raw(self._saved))
        except termios.error as error:  # not an OSError: the supervisor reports OSErrors
            os.close(self.master)
            os.close(self.slave)
            raise OSError(error.args[0], f"the build's terminal: {error.args[1]}") from None

    def resize(self) -> None:
        """Give the pty the user's terminal's window size (the kernel then sends SIGWINCH)."""
        size = fcntl.ioctl(self._plan["source"], termios.TIOCGWINSZ, bytes(_WINSIZE))
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)

    def attach(self) -> None:
        """In the build's process, after ``setsid``: the pty becomes its terminal and fds."""
        fcntl.ioctl(self.slave, termios.TIOCSCTTY, 0)
        for fd in self._plan["slots"]:
            os.dup2(self.slave, fd)
        for fd in (self.slave, self.master):
            if fd not in self._plan["slots"]:
                os.close(fd)

    def start(self) -> None:
        """In the supervisor, once the build runs: relay until the build's side closes."""
        os.close(self.slave)
        self._threads = [threading.Thread(target=self._copy_out, daemon=True)]
        if self._plan["input"]:
            self._threads.append(threading.Thread(target=self._copy_in, daemon=True))
        for thread in self._threads:
            thread.start()

    def foreground_group(self) -> int:
        """The process group the build's terminal signals (as the user's would)."""
        return os.tcgetpgrp(self.master)

    def finish(self) -> None:
        """After the build exited: the rest of its output, then the user's settings back."""
        if self._threads:
            self._threads[0].join(_DRAIN_TIMEOUT)  # longer only if a process it left holds the pty
        self.restore()

    def restore(self) -> None:
        if self._saved is not None:
            try:  # noqa: SIM105 - contextlib would cost every build ~2 ms
                termios.tcsetattr(0, termios.TCSADRAIN, self._saved)
            except termios.error:
                pass  # the terminal is gone

    def _copy_out(self) -> None:
        output = self._plan["output"]
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: nothing holds the build's side any more
                return
            if not data:
                return
            self.mid_line = mid_line_after(data, was=self.mid_line)
            try:
                _write_all(output, data)
            except OSError:  # the user's terminal is gone: keep draining, or the build blocks
                output = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)

    def _copy_in(self) -> None:
        while True:
            try:
                data = os.read(0, 4096)
                if not data:
                    return
                _write_all(self.master, data)
            except OSError:
                return

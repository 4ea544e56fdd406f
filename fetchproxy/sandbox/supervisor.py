"""PID 1 of the build's PID namespace: sets up the build's view, runs it, reaps it.

The launcher (``build.py``) starts this module in a bare interpreter inside the
sandbox's network namespace and a fresh PID namespace, handing it two
descriptors: a control socket and a memfd with the configuration (a
``marshal``-ed dict: the same interpreter writes and reads it). Then, as real
root:

1. a private mount and IPC namespace, and the mount plan carried out
   (``mounts.py``): a root of the build's own made of throwaway layers over the
   host's file systems, the working directory and writable paths bound in, the
   protected ones read-only, a fresh /proc, a private /dev, tmpfs over /tmp,
   /run, ...; then ``pivot_root`` into it. When the build has a terminal, its
   pty (``terminal.py``);
2. ``unshare(CLONE_NEWUSER | CLONE_NEWNS)``: from here on it holds no
   capability over any host namespace, and every mount above is locked. It
   asks the launcher (``map``) to write its identity uid/gid maps and waits
   for ``go`` (in the unprivileged sandbox, where the launcher may not write
   them, it maps its one id itself);
3. forks and execs the build in a session of its own, with the seccomp filter
   (``seccomp.py``) that refuses TIOCSTI and TIOCLINUX; reports ``running`` or
   ``error``; relays the pty; passes on to the build the signals the launcher
   sends, and the ones the terminal sends the launcher's process group (the
   build is not in it), dropping the launcher's copy of such a one;
4. when the build exits, reports ``status`` (and whether its output on the
   terminal ended mid-line) and exits; the kernel then kills
   whatever the build left running in the namespace. When the control socket
   reaches EOF the launcher is gone: it exits at once, to the same effect.

It imports only what it needs (no json, typing, dataclasses): every import is
paid for by every build.
"""

# os.path, not pathlib: importing pathlib would cost every build ~4 ms.

from __future__ import annotations

import marshal
import os
import signal
import sys
import threading
import time

from fetchproxy.sandbox import linux
from fetchproxy.sandbox.mounts import apply_mount_plan

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every build ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from fetchproxy.sandbox.terminal import Terminal

FORWARDED_SIGNALS = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
    signal.SIGCONT,
)
SI_USER = 0  # si_code of kill(2)
SI_KERNEL = 0x80  # si_code of a signal from the kernel, such as a terminal's Ctrl-C
# The build is in a session of its own, so a signal the user's terminal sends
# its foreground group (Ctrl-C when input is not relayed raw, a hangup) reaches
# the launcher and the supervisor, and the supervisor passes it on. A launcher
# that passes on its own copy too would deliver it twice: the launcher's copy
# is dropped when the terminal's came this recently.
TERMINAL_ECHO = 1.0
EXIT_SETUP_FAILED = 125
STEP_SETUP = "setup"
STEP_EXEC = "exec"


# The control protocol: one message per line, "<verb>[ <arguments>]".
def format_message(verb: str, *arguments: object) -> bytes:
    text = " ".join([verb, *(str(a).replace("\n", " ") for a in arguments)])
    return text.encode(errors="surrogateescape") + b"\n"


def parse_message(line: bytes) -> tuple[str, list[str]]:
    """(verb, arguments); an ``error`` keeps its message whole as the last argument."""
    text = line.decode(errors="surrogateescape")
    verb, _, rest = text.partition(" ")
    if verb == "error":
        return verb, rest.split(" ", 2)
    return verb, rest.split() if rest else []


class LineReader:
    """Lines from a stream, given its ``read(size)``; None at EOF."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._buffer = b""

    def read_line(self) -> bytes | None:
        while b"\n" not in self._buffer:
            chunk = self._read(4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line


def error_detail(error: OSError) -> str:
    """The detail of an ``error`` message: the file first, when the error names one."""
    detail = error.strerror or str(error)
    if error.filename is not None:
        detail = f"{error.filename}: {detail}"
    return detail


def send(fd: int, verb: str, *arguments: object) -> None:
    data = format_message(verb, *arguments)
    while data:
        data = data[os.write(fd, data) :]


def map_own_ids() -> None:
    """Map uid and gid 0 to 0 of the parent user namespace: the one id it has there.

    Allowed without privilege in the parent once setgroups(2) is denied, which a
    nested namespace of the unprivileged sandbox inherits anyway. The files in
    /proc/self belong to the host's root while the process is not dumpable, so
    it is dumpable for as long as it writes them (the build does not exist yet).
    """
    linux.prctl(linux.PR_SET_DUMPABLE, 1)
    linux.write_proc_file("/proc/self/setgroups", "deny")
    linux.write_proc_file("/proc/self/gid_map", "0 0 1\n")
    linux.write_proc_file("/proc/self/uid_map", "0 0 1\n")
    linux.prctl(linux.PR_SET_DUMPABLE, 0)


def enter_user_namespace(control: int, reader: LineReader, *, map_self: bool) -> None:
    linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNS)
    if map_self:
        map_own_ids()
    else:
        send(control, "map")
        if reader.read_line() != b"go":
            os._exit(EXIT_SETUP_FAILED)  # the launcher is gone
    if os.getuid() != 0 or os.getgid() != 0:
        raise OSError(0, f"uid {os.getuid()} gid {os.getgid()} in the user namespace, not 0")


def start_build(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    terminal: Terminal | None,
    seccomp: bytes | None,
) -> int:
    """Fork and exec the build; OSError if the exec failed."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the build
        try:
            os.close(read_end)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python
                signal.signal(sig, signal.SIG_DFL)
            os.setsid()  # no controlling terminal: not the user's
            if terminal is not None:
                terminal.attach()
            os.chdir(cwd)
            if seccomp is not None:
                linux.install_seccomp_filter(seccomp)
            os.execvpe(argv[0], argv, env)  # noqa: S606 - the user's build command, as given
        except OSError as error:
            os.write(write_end, f"{error.errno} {error.strerror}".encode())
        finally:
            os._exit(127)
    os.close(write_end)
    failure = b""
    while chunk := os.read(read_end, 4096):
        failure += chunk
    os.close(read_end)
    if failure:
        os.waitpid(pid, 0)
        errno, _, strerror = failure.decode().partition(" ")
        raise OSError(int(errno), strerror)
    return pid


def watch_launcher(control: int, terminal: Terminal | None) -> None:
    """Exit (killing the namespace) as soon as the launcher's end of the socket closes."""
    try:
        while os.read(control, 4096):
            pass
    finally:
        if terminal is not None:
            terminal.restore()
        os._exit(EXIT_SETUP_FAILED)


def from_the_terminal(signo: int, build: int, terminal: Terminal | None) -> None:
    """Pass on a signal the user's terminal sent: to the build's terminal's foreground group."""
    try:
        if signo == signal.SIGWINCH and terminal is not None:
            terminal.resize()  # the build's terminal then sends SIGWINCH itself
        else:
            os.killpg(build if terminal is None else terminal.foreground_group(), signo)
    except OSError:
        pass  # the build is gone, or its terminal


def supervise(control: int, build: int, terminal: Terminal | None) -> NoReturn:
    from_terminal: dict[int, float] = {}
    while True:
        info = signal.sigwaitinfo({signal.SIGCHLD, *FORWARDED_SIGNALS})
        if info.si_signo != signal.SIGCHLD:
            if info.si_code == SI_KERNEL:  # the user's terminal's
                from_terminal[info.si_signo] = time.monotonic()
                from_the_terminal(info.si_signo, build, terminal)
            # si_pid is 0 for a sender outside this PID namespace: the launcher.
            elif info.si_code == SI_USER and info.si_pid == 0:
                if time.monotonic() - from_terminal.get(info.si_signo, -TERMINAL_ECHO) < (
                    TERMINAL_ECHO
                ):
                    continue  # the launcher passing on the same Ctrl-C: delivered already
                try:  # noqa: SIM105 - contextlib would cost every build ~2 ms
                    os.kill(build, info.si_signo)
                except ProcessLookupError:
                    pass
            continue
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == build:
                if terminal is not None:
                    terminal.finish()
                mid_line = terminal is not None and terminal.mid_line
                try:
                    send(control, "status", status, int(mid_line))
                finally:
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main(args: list[str]) -> NoReturn:
    control = int(args[0])
    os.set_inheritable(control, False)
    with os.fdopen(int(args[1]), "rb") as f:
        config = marshal.load(f)  # noqa: S302 - written by our launcher, same interpreter
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, *FORWARDED_SIGNALS})
    step = STEP_SETUP
    terminal = None
    if config["terminal"] is not None:  # imported before the host's files are out of sight
        from fetchproxy.sandbox.terminal import Terminal  # noqa: PLC0415 - only then
    try:
        linux.prctl(linux.PR_SET_DUMPABLE, 0)
        linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWIPC)
        apply_mount_plan(config["plan"])
        if config["terminal"] is not None:
            terminal = Terminal(config["terminal"])
        enter_user_namespace(
            control,
            LineReader(lambda size: os.read(control, size)),
            map_self=config.get("map_self", False),
        )
        step = STEP_EXEC
        build = start_build(
            config["argv"], config["env"], config["cwd"], terminal, config["seccomp"]
        )
    except OSError as error:
        if terminal is not None:
            terminal.restore()
        send(control, "error", error.errno or 0, step, error_detail(error))
        os._exit(EXIT_SETUP_FAILED)
    if terminal is not None:
        terminal.start()
    send(control, "running")
    threading.Thread(target=watch_launcher, args=(control, terminal), daemon=True).start()
    supervise(control, build, terminal)


if __name__ == "__main__":
    main(sys.argv[1:])

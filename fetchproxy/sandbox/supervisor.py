"""PID 1 of the build's PID namespace: sets up the build's view, runs it, reaps it.

The launcher (``build.py``) starts this module in a bare interpreter inside the
sandbox's network namespace and a fresh PID namespace, handing it two
descriptors: a control socket and a memfd with the configuration (a
``marshal``-ed dict: the same interpreter writes and reads it). Then, as real
root:

1. a private mount and IPC namespace, and the mount plan carried out (tmpfs
   over /tmp, /run, ...; the files; resolv.conf; a fresh /proc with the kernel
   knobs read-only; /sys read-only);
2. ``unshare(CLONE_NEWUSER | CLONE_NEWNS)``: from here on it holds no
   capability over any host namespace, and every mount above is locked. It
   asks the launcher (``map``) to write its identity uid/gid maps and waits
   for ``go`` (in the unprivileged sandbox, where the launcher may not write
   them, it maps its one id itself);
3. forks and execs the build, reports ``running`` or ``error``; passes on to
   the build the signals the launcher sends (a terminal's signals reach the
   build directly, and the launcher's copy of one is dropped);
4. when the build exits, reports ``status`` and exits; the kernel then kills
   whatever the build left running in the namespace. When the control socket
   reaches EOF the launcher is gone: it exits at once, to the same effect.

It imports only what it needs (no json, typing, dataclasses): every import is
paid for by every build.
"""

# os.path, not pathlib: importing pathlib would cost every build ~4 ms.
# ruff: noqa: PTH103, PTH110, PTH118, PTH120, PTH123

from __future__ import annotations

import marshal
import os
import signal
import stat
import sys
import threading
import time

from fetchproxy.sandbox import linux

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every build ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

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
# A launcher that passes on the SIGINT it got from the terminal would deliver
# it twice: the build, in the terminal's foreground group, got it already.
# The launcher's copy is dropped when the terminal's came this recently.
TERMINAL_ECHO = 1.0
EXIT_SETUP_FAILED = 125
STEP_SETUP = "setup"
STEP_EXEC = "exec"
_LOCKED_DOWN = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC


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


def bind_readonly(path: str) -> None:
    linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC)
    remount_readonly(path, _LOCKED_DOWN)


def remount_readonly(path: str, flags: int) -> None:
    # MS_BIND: change this mount only, never the file system (shared with the host).
    linux.mount(None, path, None, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | flags)


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def keep_in_place(path: str, fd: int) -> None:
    """Bind the host's ``path`` (open as ``fd``) back into the tmpfs now over it."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC)


def readonly_tree(top: str) -> None:
    """Make ``top`` and every mount below it read-only, keeping each one's flags."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        mounts = linux.parse_mountinfo(f.read())
    for point, options in mounts:
        if linux.is_under(point, top):
            flags = 0
            for option in options:
                flags |= linux.MOUNT_OPTION_FLAGS.get(option, 0)
            remount_readonly(point, flags)


def apply_mount_plan(plan: dict[str, Any]) -> None:
    """Carry out ``MountPlan.to_spec()`` (see mountplan.py) in a new mount namespace."""
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    kept = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in plan["keep"]}
    for path, mode in plan["tmpfs"]:
        linux.mount("tmpfs", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"mode={mode:o}")
    for path, fd in kept.items():
        keep_in_place(path, fd)
        os.close(fd)
    files_dir = plan["files_dir"]
    os.makedirs(files_dir, mode=0o755)
    for name, data in plan["files"]:
        write_file(os.path.join(files_dir, name), data)
    if plan["resolv_conf"] is not None:
        path, bind = plan["resolv_conf"]
        if bind:
            write_file(plan["resolv_conf_copy"], plan["resolv_conf_content"])
            linux.mount(plan["resolv_conf_copy"], path, None, linux.MS_BIND)
            remount_readonly(path, _LOCKED_DOWN)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            write_file(path, plan["resolv_conf_content"])
    bind_readonly(files_dir)
    linux.mount("proc", "/proc", "proc", _LOCKED_DOWN)
    for path in plan["proc_readonly"]:
        if os.path.exists(path):
            bind_readonly(path)
    for top in plan["readonly_trees"]:
        readonly_tree(top)


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


def start_build(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """Fork and exec the build; OSError if the exec failed."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the build
        try:
            os.close(read_end)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python
                signal.signal(sig, signal.SIG_DFL)
            os.chdir(cwd)
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


def watch_launcher(control: int) -> None:
    """Exit (killing the namespace) as soon as the launcher's end of the socket closes."""
    try:
        while os.read(control, 4096):
            pass
    finally:
        os._exit(EXIT_SETUP_FAILED)


def supervise(control: int, build: int) -> NoReturn:
    from_terminal: dict[int, float] = {}
    while True:
        info = signal.sigwaitinfo({signal.SIGCHLD, *FORWARDED_SIGNALS})
        if info.si_signo != signal.SIGCHLD:
            if info.si_code == SI_KERNEL:  # a terminal's: the build, in its group, got it too
                from_terminal[info.si_signo] = time.monotonic()
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
                try:
                    send(control, "status", status)
                finally:
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main(args: list[str]) -> NoReturn:
    control = int(args[0])
    os.set_inheritable(control, False)
    with os.fdopen(int(args[1]), "rb") as f:
        config = marshal.load(f)  # noqa: S302 - written by our launcher, same interpreter
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, *FORWARDED_SIGNALS})
    step = STEP_SETUP
    try:
        linux.prctl(linux.PR_SET_DUMPABLE, 0)
        linux.unshare(linux.CLONE_NEWNS | linux.CLONE_NEWIPC)
        apply_mount_plan(config["plan"])
        enter_user_namespace(
            control,
            LineReader(lambda size: os.read(control, size)),
            map_self=config.get("map_self", False),
        )
        step = STEP_EXEC
        build = start_build(config["argv"], config["env"], config["cwd"])
    except OSError as error:
        send(control, "error", error.errno or 0, step, error_detail(error))
        os._exit(EXIT_SETUP_FAILED)
    send(control, "running")
    threading.Thread(target=watch_launcher, args=(control,), daemon=True).start()
    supervise(control, build)


if __name__ == "__main__":
    main(sys.argv[1:])

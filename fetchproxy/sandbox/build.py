"""Starting the build in the sandbox, from the launcher's side.

A thread of its own joins the sandbox's network namespace and a new PID
namespace and starts the supervisor (``supervisor.py``), which becomes PID 1
there; the thread then ends, so the launcher's own threads never change
namespace. The launcher writes the supervisor's user-namespace maps when asked
(only a process outside that namespace may write them) and returns once the
build's ``exec`` has succeeded, or raises :class:`SandboxError` with the reason.

For the unprivileged sandbox (``user.py``) the launcher can neither join the
network namespace nor create a PID namespace: an entry process of its own
(``userns.py``) joins the sandbox's user and network namespaces, creates the
PID namespace and forks the supervisor, which then maps its ids itself.

Before that, ``buildplan.py`` prepares the supervisor's configuration: the build's file
system, terminal, seccomp filter and environment.
"""

from __future__ import annotations

import abc
import contextlib
import marshal
import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from errno import EPERM
from pathlib import Path
from types import TracebackType
from typing import Any

from fetchproxy.sandbox import linux
from fetchproxy.sandbox.bare import bare_command
from fetchproxy.sandbox.buildplan import Prepared, Stdio, prepare
from fetchproxy.sandbox.mountplan import NetworkFiles
from fetchproxy.sandbox.netns import in_new_thread
from fetchproxy.sandbox.supervisor import STEP_EXEC, LineReader, format_message, parse_message
from fetchproxy.sandbox.support import NO_SANDBOX_HINT, BuildStartError, SandboxError

_HANDSHAKE_TIMEOUT = 60.0
# The supervisor's detail when the kernel refuses it a fresh /proc: in a user namespace, it
# mounts a new /proc only where the whole of the existing one is visible; where mounts hide
# parts of it (/proc/keys, /proc/kcore, ..., as container runtimes do), it refuses.
_PROC_REFUSED = "/proc: mount: Operation not permitted"


def identity_map(own_map: str) -> str:
    """A user namespace map that keeps every id this process has, as it is.

    ``own_map`` is this process's /proc/self/uid_map (or gid_map): each line
    ``inside outside count``; the ids a child namespace can map are the
    ``inside`` ones.
    """
    lines = []
    for line in own_map.splitlines():
        fields = line.split()
        if len(fields) == 3:
            lines.append(f"{fields[0]} {fields[0]} {fields[2]}\n")
    return "".join(lines)


class BuildProcess:
    """A build running in the sandbox, used like a :class:`subprocess.Popen`.

    ``pid`` is the supervisor's (PID 1 of the build's PID namespace, as the
    host sees it). Signals sent with :meth:`send_signal` are passed on to the
    build; SIGKILL kills the supervisor and with it everything in the sandbox.
    """

    def __init__(
        self, process: subprocess.Popen[bytes], control: socket.socket, prepared: Prepared
    ) -> None:
        self._process = process
        self._control = control
        self._prepared = prepared
        self.pid = process.pid
        self.returncode: int | None = None
        self.ended_mid_line = False
        """The build's output on its terminal ended without a newline (known once it exited;
        False when it had no terminal): the launcher starts a line before it says more."""

    def poll(self) -> int | None:
        if self._process.poll() is None:
            return None
        return self._finish()

    def wait(self, timeout: float | None = None) -> int:
        """The build's exit status: its code, or minus the signal that killed it."""
        self._process.wait(timeout)
        return self._finish()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self._process.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _finish(self) -> int:
        if self.returncode is None:
            # The supervisor has exited: its last words, if any, are in the socket.
            status = None
            reader = LineReader(self._control.recv)
            self._control.setblocking(False)
            with contextlib.suppress(OSError):
                while (line := reader.read_line()) is not None:
                    verb, arguments = parse_message(line)
                    if verb == "status":
                        status = int(arguments[0])
                        self.ended_mid_line = arguments[1:] == ["1"]
            self._control.close()
            self._prepared.restore_terminal()  # the supervisor did, unless it was killed
            if status is None:  # the supervisor itself was killed
                self.returncode = self._process.returncode
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def release(self) -> None:
        """Remove the placeholders made for absent protected paths (see ``hostfs.py``) that are
        still empty. Call it once the launcher has written what it writes there; the sandbox's
        ``close`` does."""
        self._prepared.release()


def _start_bare(
    module: str, args: tuple[str, ...], pass_fds: tuple[int, ...], stdio: Stdio
) -> subprocess.Popen[bytes]:
    """Start ``module`` in a bare interpreter from /, with ``args`` and then ``pass_fds``."""
    return subprocess.Popen(
        bare_command(module, *args, *(str(fd) for fd in pass_fds)),
        pass_fds=pass_fds,
        cwd="/",
        stdin=stdio[0],
        stdout=stdio[1],
        stderr=stdio[2],
    )


def _start_supervisor(
    netns_fd: int, pass_fds: tuple[int, ...], stdio: Stdio
) -> subprocess.Popen[bytes]:
    """Start the supervisor as PID 1 of a new PID namespace inside the sandbox's network."""

    def start() -> subprocess.Popen[bytes]:
        linux.setns(netns_fd, linux.CLONE_NEWNET)
        linux.unshare(linux.CLONE_NEWPID)  # for this thread's children only
        return _start_bare("fetchproxy.sandbox.supervisor", (), pass_fds, stdio)

    return in_new_thread(start)


def _start_entry(
    userns_fd: int, netns_fd: int, pass_fds: tuple[int, ...], stdio: Stdio
) -> subprocess.Popen[bytes]:
    """Start the supervisor through ``userns.py``'s entry, which joins the user sandbox."""
    fds = (userns_fd, netns_fd, *pass_fds)
    return _start_bare("fetchproxy.sandbox.userns", ("entry",), fds, stdio)


def _write_maps(pid: int) -> None:
    for name in ("uid_map", "gid_map"):
        mapping = identity_map(Path(f"/proc/self/{name}").read_text(encoding="ascii"))
        linux.write_proc_file(f"/proc/{pid}/{name}", mapping)


def _failure(line: bytes | None, argv: Sequence[str], *, user: bool) -> SandboxError:
    """The error for the supervisor's last line; ``user``: in the unprivileged sandbox."""
    verb, arguments = parse_message(line) if line is not None else ("", [])
    if verb != "error" or len(arguments) != 3:
        return SandboxError("the sandbox's supervisor exited during setup without saying why")
    errno, step, detail = int(arguments[0]), arguments[1], arguments[2]
    if step == STEP_EXEC:
        return BuildStartError(
            f"cannot run the build command {argv[0]!r} in the sandbox: {detail}",
            errno=errno,
            detail=detail,
        )
    if user and errno == EPERM and detail == _PROC_REFUSED:
        return SandboxError(
            "cannot set up the sandbox for the build: the kernel refuses the unprivileged "
            "sandbox a fresh /proc, because mounts hide parts of this machine's /proc (as in "
            f"most containers). Run fetchproxy as root for the root sandbox, {NO_SANDBOX_HINT}.",
            errno=errno,
        )
    return SandboxError(f"cannot set up the sandbox for the build: {detail}", errno=errno)


def spawn(
    netns_fd: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    files: Mapping[str, bytes] | None = None,
    keep: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    protected: Sequence[Path] = (),
    fresh_home: bool = False,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    userns_fd: int | None = None,
    dns: NetworkFiles | None = None,
) -> BuildProcess:
    """Run ``argv`` in the sandbox whose network namespace is ``netns_fd``.

    See :meth:`BuildOwner.spawn`. ``userns_fd``: the user namespace that owns
    ``netns_fd``, for the unprivileged sandbox. ``dns``: the build's resolv.conf and
    /etc/hosts (None: a resolv.conf naming no reachable server, and the host's hosts).
    """
    if not argv:
        raise ValueError("the build command is empty")
    stdio = (stdin, stdout, stderr)
    prepared = prepare(
        argv,
        env=env,
        cwd=cwd,
        files=files or {},
        keep=keep,
        writable=writable,
        protected=protected,
        fresh_home=fresh_home,
        stdio=stdio,
        user_namespace=userns_fd is not None,
        dns=dns,
    )
    try:
        process, parent = _start(netns_fd, userns_fd, prepared.config, stdio)
        try:
            _handshake(process, parent, argv, user=userns_fd is not None)
        except BaseException:
            process.kill()
            process.wait()
            parent.close()
            raise
    except BaseException:
        prepared.undo()
        raise
    return BuildProcess(process, parent, prepared)


def _start(
    netns_fd: int, userns_fd: int | None, config: dict[str, Any], stdio: Stdio
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start the supervisor with ``config``; the process and the launcher's end of its socket."""
    config_fd = os.memfd_create("fetchproxy-sandbox-config")
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with os.fdopen(os.dup(config_fd), "wb") as f:
            marshal.dump(config, f)
        os.lseek(config_fd, 0, os.SEEK_SET)
        fds = (child.fileno(), config_fd)
        if userns_fd is None:
            process = _start_supervisor(netns_fd, fds, stdio)
        else:
            process = _start_entry(userns_fd, netns_fd, fds, stdio)
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
        os.close(config_fd)
    return process, parent


def _handshake(
    process: subprocess.Popen[bytes], control: socket.socket, argv: Sequence[str], *, user: bool
) -> None:
    """Write the maps when the supervisor asks; return once the build runs, else raise."""
    control.settimeout(_HANDSHAKE_TIMEOUT)
    reader = LineReader(control.recv)
    try:
        line = reader.read_line()
        if line == b"map":
            _write_maps(process.pid)
            control.sendall(format_message("go"))
            line = reader.read_line()
    except TimeoutError:
        raise SandboxError(
            f"the sandbox's supervisor (pid {process.pid}) did not finish "
            f"setting up within {_HANDSHAKE_TIMEOUT:.0f} s"
        ) from None
    except OSError as error:
        raise SandboxError(
            f"cannot set up the sandbox's user namespace: {error}", errno=error.errno
        ) from error
    if line != b"running":
        raise _failure(line, argv, user=user)
    control.settimeout(None)


class BuildOwner(abc.ABC):
    """What both sandboxes share: they run builds and keep them; closing kills any still running."""

    def __init__(self) -> None:
        self._builds: list[BuildProcess] = []
        self._dns: NetworkFiles | None = None
        """The builds' own resolv.conf and /etc/hosts (None: no DNS server is reachable)."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill the builds still running, release their placeholders (a subclass then drops its
        namespaces)."""
        builds, self._builds = self._builds, []
        for build in builds:
            if build.poll() is None:
                build.kill()
                build.wait()
            build.release()

    @abc.abstractmethod
    def _build_namespaces(self) -> tuple[int, int | None]:
        """The network namespace builds run in, and the user namespace that owns it, if any."""

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None = None,
        files: Mapping[str, bytes] | None = None,
        keep: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        fresh_home: bool = False,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
    ) -> BuildProcess:
        """Run ``argv`` in the sandbox; see docs/sandbox.md for what the build sees.

        ``env`` is the build's whole environment (PATH is looked up in it); ``cwd``
        defaults to the current directory. What the build writes persists only in ``cwd``
        and in ``writable`` (made as directories when missing); everywhere else it lands in
        a throwaway layer. ``protected``: host paths read-only to the build even inside
        those (the store, the lock, the journal, the event log); an absent one inside them
        is reserved by an empty file until :meth:`close`. fetchproxy's own installation is
        always read-only. ``keep``: more host paths the build must see under /tmp, /run, or
        a fresh home (read-only). ``fresh_home``: an empty tmpfs over the build's home
        directories (``HOME``, and the passwd entry's), with ``XDG_*_HOME`` set inside.
        ``files`` appear read-only as /run/fetchproxy/<name>. ``stdin``/``stdout``/``stderr``:
        descriptors, None to inherit; a terminal among them is relayed through a pty of the
        sandbox's own.
        """
        netns_fd, userns_fd = self._build_namespaces()
        build = spawn(
            netns_fd,
            argv,
            env=env,
            cwd=cwd,
            files=files,
            keep=keep,
            writable=writable,
            protected=protected,
            fresh_home=fresh_home,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            userns_fd=userns_fd,
            dns=self._dns,
        )
        self._builds.append(build)
        return build

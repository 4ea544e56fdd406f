"""What the supervisor is told for one build, prepared on the launcher's side.

:func:`prepare` turns a ``spawn`` call into the supervisor's configuration: the build's
mounts (facts from ``hostfs.py``, decided by ``mountplan.py``), its terminal
(``terminal.py``), its seccomp filter (``seccomp.py``), its environment (with a fresh home:
:func:`fresh_home_environment`). What it changed on the host for the run (placeholders for
absent protected paths) and the launcher's terminal settings travel with it, for
:meth:`Prepared.undo` once the build is over.
"""

from __future__ import annotations

import contextlib
import os
import termios
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fetchproxy.sandbox import hostfs
from fetchproxy.sandbox.mountplan import (
    MountPlan,
    NetworkFiles,
    Paths,
    dirs_to_expand,
    plan_layers,
    plan_mounts,
)
from fetchproxy.sandbox.seccomp import tty_input_filter
from fetchproxy.sandbox.support import SandboxError
from fetchproxy.sandbox.terminal import plan_terminal

Stdio = tuple[int | None, int | None, int | None]
XDG_DIRS = {
    "XDG_CACHE_HOME": ".cache",
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
}


def fresh_home_environment(env: Mapping[str, str], home: str) -> dict[str, str]:
    """``env`` for a build whose home is empty: ``HOME`` set, the XDG directories in it.

    An XDG variable that led elsewhere would keep a warm cache in reach of the build.
    """
    fresh = {**env, "HOME": env.get("HOME") or home}
    for name, relative in XDG_DIRS.items():
        fresh[name] = f"{fresh['HOME'].rstrip('/')}/{relative}"
    return fresh


def mount_plan(
    *,
    paths: Paths,
    files: Mapping[str, bytes],
    user_namespace: bool,
    dns: NetworkFiles | None = None,
) -> MountPlan:
    """The build's mounts on this machine; ValueError for paths that contradict each other."""
    private = hostfs.private_dirs()
    mounts = hostfs.mount_table()
    listings = hostfs.list_dirs(dirs_to_expand(mounts, private)) if user_namespace else None
    resolv_conf = None
    if os.path.lexists("/etc/resolv.conf"):
        resolv_conf = os.path.realpath("/etc/resolv.conf")
    hosts = os.path.realpath("/etc/hosts") if os.path.lexists("/etc/hosts") else None
    return plan_mounts(
        layers=plan_layers(mounts, private, expand=user_namespace, listings=listings),
        user_namespace=user_namespace,
        private_dirs=private,
        paths=paths,
        files=files,
        resolv_conf=resolv_conf,
        resolv_conf_exists=resolv_conf is not None and Path(resolv_conf).exists(),
        hosts=hosts,
        hosts_exists=hosts is not None and Path(hosts).exists(),
        dns=dns,
    )


def terminal_plan(stdio: Stdio) -> dict[str, Any] | None:
    """The build's terminal (see ``terminal.py``) for these descriptors (None: the launcher's)."""
    fds = [fd if fd is not None else default for fd, default in zip(stdio, (0, 1, 2), strict=True)]
    isatty = (os.isatty(fds[0]), os.isatty(fds[1]), os.isatty(fds[2]))
    foreground = False
    if isatty[0]:
        with contextlib.suppress(OSError):  # not this process's controlling terminal
            foreground = os.tcgetpgrp(fds[0]) == os.getpgrp()
    return plan_terminal(isatty, foreground=foreground)


def _error_text(error: OSError) -> str:
    detail = error.strerror or str(error)
    return detail if error.filename is None else f"{error.filename}: {detail}"


@dataclass
class Prepared:
    """The supervisor's configuration, and what to undo on the host after the build."""

    config: dict[str, Any]
    placeholders: list[hostfs.Placeholder] = field(default_factory=list)
    terminal: tuple[int, list[Any]] | None = None  # the launcher's stdin and its settings

    def restore_terminal(self) -> None:
        """Put back the settings of the terminal the supervisor made raw (if it could not)."""
        if self.terminal is not None:
            fd, settings = self.terminal
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, settings)

    def release(self) -> None:
        """Remove the placeholders still empty (see ``hostfs.py``); idempotent."""
        placeholders, self.placeholders = self.placeholders, []
        hostfs.release(placeholders)

    def undo(self) -> None:
        self.restore_terminal()
        self.release()


def prepare(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    files: Mapping[str, bytes],
    keep: Sequence[Path],
    writable: Sequence[Path],
    protected: Sequence[Path],
    fresh_home: bool,
    stdio: Stdio,
    user_namespace: bool,
    dns: NetworkFiles | None = None,
) -> Prepared:
    """The configuration for one build; :class:`SandboxError` when the paths do not fit."""
    real_cwd = os.path.realpath(cwd if cwd is not None else Path.cwd())
    prepared = Prepared(config={})
    try:
        writable_paths = [os.path.realpath(p) for p in writable]
        for path in writable_paths:
            Path(path).mkdir(parents=True, exist_ok=True)
        readonly, prepared.placeholders = hostfs.protect(protected, [real_cwd, *writable_paths])
        homes = hostfs.home_dirs(env) if fresh_home else []
        paths = Paths(
            cwd=real_cwd,
            writable=writable_paths,
            readonly=[
                *(os.path.realpath(p) for p in keep),
                *readonly,
                *hostfs.installation_paths(),
            ],
            homes=homes,
            links=hostfs.installation_links(),
        )
        plan = mount_plan(paths=paths, files=files, user_namespace=user_namespace, dns=dns)
    except (ValueError, OSError) as error:
        prepared.release()
        detail = str(error) if isinstance(error, ValueError) else _error_text(error)
        raise SandboxError(f"cannot run the build in the sandbox: {detail}") from error
    if fresh_home:
        env = fresh_home_environment(env, homes[0] if homes else "/")
    terminal = terminal_plan(stdio)
    if terminal is not None and terminal["raw"]:
        launcher_stdin = stdio[0] if stdio[0] is not None else 0
        prepared.terminal = (launcher_stdin, termios.tcgetattr(launcher_stdin))
    prepared.config = {
        "argv": list(argv),
        "env": dict(env),
        "cwd": real_cwd,
        "plan": plan.to_spec(),
        "map_self": user_namespace,
        "terminal": terminal,
        "seccomp": tty_input_filter(os.uname().machine),
    }
    return prepared

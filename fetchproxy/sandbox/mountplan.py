"""What the build's private mount namespace looks like, decided without I/O.

The launcher resolves a few paths and calls :func:`plan_mounts`; the
supervisor (``supervisor.py``) carries the plan out as real root, before it
enters the build's user namespace, so that every mount here is locked: the
build, root only inside its user namespace, can neither unmount a tmpfs to
reach the host's ``/run`` nor make a read-only mount writable again.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fetchproxy.sandbox.linux import is_under

FILES_DIR = "/run/fetchproxy"
RESOLV_CONF_NAME = "resolv.conf"
# No route leads to 192.0.2.1 (TEST-NET-1) inside the sandbox, so a lookup
# fails at once with ENETUNREACH; the options bound the worst case to ~1 s.
RESOLV_CONF = (
    b"# fetchproxy sandbox: no DNS server is reachable; the proxy resolves names.\n"
    b"nameserver 192.0.2.1\n"
    b"options timeout:1 attempts:1\n"
)
# Directories that get a private tmpfs, when they exist (systemd's PrivateTmp
# covers /tmp and /var/tmp; /run, /var/run and /dev/shm hold the host's
# pathname sockets, pid files and shared memory).
PRIVATE_DIR_CANDIDATES = ("/tmp", "/var/tmp", "/run", "/var/run", "/var/lock", "/dev/shm")  # noqa: S108 - covered, not used
_STICKY_WORLD_WRITABLE = 0o1777
_ROOT_ONLY_WRITABLE = 0o755
# Kernel knobs a root build (uid 0 maps to the host's uid 0) could otherwise
# write: core_pattern and modprobe run programs as host root in the host's
# namespaces; sysrq-trigger reboots the machine.
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
SYS = "/sys"


@dataclass(frozen=True, kw_only=True)
class Tmpfs:
    path: str
    mode: int


@dataclass(frozen=True, kw_only=True)
class ResolvConf:
    """Where the sandbox's resolv.conf goes: written into a private tmpfs, or bound over a file."""

    path: str
    bind: bool


@dataclass(frozen=True, kw_only=True)
class MountPlan:
    tmpfs: tuple[Tmpfs, ...]
    keep: tuple[str, ...]  # host paths under a tmpfs, bound back in place
    files: tuple[tuple[str, bytes], ...]  # written read-only into FILES_DIR
    resolv_conf: ResolvConf | None

    def to_spec(self) -> dict[str, Any]:
        """Everything the supervisor needs to carry the plan out, as plain data.

        The supervisor does not import this module (nor dataclasses): it starts
        in a bare interpreter and every import is paid for by every build.
        """
        return {
            "tmpfs": [(t.path, t.mode) for t in self.tmpfs],
            "keep": list(self.keep),
            "files_dir": FILES_DIR,
            "files": list(self.files),
            "resolv_conf": None
            if self.resolv_conf is None
            else (self.resolv_conf.path, self.resolv_conf.bind),
            "resolv_conf_copy": posixpath.join(FILES_DIR, RESOLV_CONF_NAME),
            "resolv_conf_content": RESOLV_CONF,
            "proc_readonly": list(PROC_READONLY),
            "readonly_trees": [SYS],
        }


def check_file_name(name: str) -> None:
    """A name for a file in FILES_DIR: one path component, not ours."""
    if not name or "/" in name or "\0" in name or name in {".", ".."}:
        raise ValueError(
            f"sandbox file name {name!r} is not a plain file name; "
            f"files are placed as {FILES_DIR}/<name>"
        )
    if name == RESOLV_CONF_NAME:
        raise ValueError(f"sandbox file name {name!r} is reserved for the sandbox's own DNS setup")


def plan_mounts(
    *,
    private_dirs: Sequence[str],
    keep: Sequence[str],
    files: Mapping[str, bytes],
    resolv_conf: str | None,
    resolv_conf_exists: bool,
) -> MountPlan:
    """The mounts for one build.

    ``private_dirs``: existing directories (real paths) to cover with a tmpfs;
    must include ``/run``. ``keep``: real paths that stay visible, typically the
    working directory, when they lie under one of them. ``resolv_conf``: the
    real path /etc/resolv.conf leads to (None when there is none).
    """
    for name in files:
        check_file_name(name)
    if posixpath.dirname(FILES_DIR) not in private_dirs:
        raise ValueError(f"{posixpath.dirname(FILES_DIR)} must be a private directory")
    for path in (*private_dirs, *keep):
        if not posixpath.isabs(path) or posixpath.normpath(path) != path:
            raise ValueError(f"sandbox path {path!r} must be absolute and normalized")
    # A tmpfs hides what is below it: /run/lock (where /var/lock leads) needs none of its own.
    outermost = [
        d
        for d in sorted(set(private_dirs))
        if not any(o != d and is_under(d, o) for o in private_dirs)
    ]
    tmpfs = tuple(
        Tmpfs(path=d, mode=_ROOT_ONLY_WRITABLE if d == "/run" else _STICKY_WORLD_WRITABLE)
        for d in outermost
    )
    for path in keep:
        if path in private_dirs:
            raise ValueError(
                f"the working directory (or a kept path) is {path}, which the sandbox makes "
                f"private; keeping it would hand the build the host's {path}. Run the build "
                "from a directory of its own"
            )
    covered = [p for p in sorted(set(keep)) if any(is_under(p, d) for d in private_dirs)]
    # A kept directory brings its subtree along: bind only the outermost ones.
    kept = tuple(p for p in covered if not any(q != p and is_under(p, q) for q in covered))
    resolv = None
    if resolv_conf is not None:
        in_private = any(is_under(resolv_conf, d) for d in private_dirs)
        in_kept = any(is_under(resolv_conf, k) for k in kept)
        if in_private and not in_kept:
            resolv = ResolvConf(path=resolv_conf, bind=False)
        elif resolv_conf_exists:
            resolv = ResolvConf(path=resolv_conf, bind=True)
    return MountPlan(
        tmpfs=tmpfs,
        keep=kept,
        files=tuple(sorted(files.items())),
        resolv_conf=resolv,
    )

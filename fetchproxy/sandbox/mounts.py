"""Carrying out a mount plan (``mountplan.py``'s ``to_spec()``) in the supervisor.

In a private mount namespace, still in the host's tree: descriptors for every host path the
plan binds (some are about to be covered); a tmpfs over /run to build in; the new root there
(``NEW_ROOT``, bound onto itself so that it is a mount), made of the plan's layers, whose
upper directories (``LAYERS``) lie outside it; the replaced trees; the binds; read-only
remounts; then ``pivot_root`` into it and the host's tree detached. The supervisor's caller
then enters the build's user namespace, which locks all of it.

Runs in the supervisor's bare interpreter: ``os`` and ``linux`` only.
"""

# os.path, not pathlib: importing pathlib would cost every build ~4 ms.
# ruff: noqa: PTH101, PTH102, PTH103, PTH110, PTH118, PTH120, PTH123, PTH211

from __future__ import annotations

import os
import stat

from fetchproxy.sandbox import linux

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every build ~3 ms
if TYPE_CHECKING:
    from typing import Any

STAGING = "/run"
NEW_ROOT = "/run/root"
LAYERS = "/run/layers"
LOCKED_DOWN = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC
BUILDING_UMASK = 0o022
"""The umask the build's tree is made with, whatever the launcher's: the directories made for
it (``/`` as an overlay's upper directory shows it, mount points, /run/fetchproxy) are 0755 and
its files 0444, so every user in the build can reach them (apt's downloads run as ``_apt`` and
read the CA bundle). The build itself gets the launcher's umask back."""


def inside(path: str) -> str:
    """Where the build's ``path`` is while its root is being built."""
    return NEW_ROOT if path == "/" else NEW_ROOT + path


def remount_readonly(path: str, flags: int) -> None:
    # MS_BIND: change this mount only, never the file system (shared with the host).
    linux.mount(None, path, None, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | flags)


def bind_readonly(path: str) -> None:
    linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC)
    remount_readonly(path, LOCKED_DOWN)


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _mount_point(where: str, *, directory: bool) -> None:
    """Make sure ``where`` exists (in a tmpfs or an upper layer: never on the host)."""
    if directory:
        os.makedirs(where, exist_ok=True)
    elif not os.path.lexists(where):
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.close(os.open(where, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _bind(fd: int, where: str) -> None:
    _mount_point(where, directory=stat.S_ISDIR(os.fstat(fd).st_mode))
    linux.mount(f"/proc/self/fd/{fd}", where, None, linux.MS_BIND | linux.MS_REC)


def _open_sources(plan: dict[str, Any]) -> dict[str, int]:
    """O_PATH descriptors for the host paths the plan mounts, before any is covered.

    A bind's path must exist (OSError naming it); a layer's may be missing (hidden under
    another mount on the host: there is nothing to show).
    """
    sources: dict[str, int] = {}
    try:
        for kind, path, _mode, _target in plan["layers"]:
            if kind in ("overlay", "file", "readonly") and path not in sources:
                try:  # noqa: SIM105 - contextlib would cost every build ~2 ms
                    sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except FileNotFoundError:
                    pass
        for path, _writable in plan["binds"]:
            if path not in sources:
                sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except BaseException:
        for fd in sources.values():
            os.close(fd)
        raise
    return sources


def _layers(plan: dict[str, Any], sources: dict[str, int], readonly: list[str]) -> None:
    for index, (kind, path, mode, target) in enumerate(plan["layers"]):
        where = inside(path)
        if kind == "dir":
            os.makedirs(where, exist_ok=True)
            os.chmod(where, mode)
        elif kind == "symlink":
            os.symlink(target, where)
        elif path not in sources:
            continue
        elif kind == "overlay" and stat.S_ISDIR(os.fstat(sources[path]).st_mode):
            os.makedirs(where, exist_ok=True)
            upper, work = f"{LAYERS}/{index}/upper", f"{LAYERS}/{index}/work"
            os.makedirs(upper)
            os.mkdir(work)
            options = f"lowerdir=/proc/self/fd/{sources[path]},upperdir={upper},workdir={work}"
            options += plan["overlay_options"]
            try:
                linux.mount("overlay", where, "overlay", linux.MS_NODEV, options)
            except OSError:  # not a directory, or a file system overlayfs refuses: read-only
                _bind(sources[path], where)
                readonly.append(path)
        else:  # "file", "readonly", a file mounted on the host: the host's, read-only
            _bind(sources[path], where)
            readonly.append(path)


def _replaced_trees(plan: dict[str, Any], readonly: list[str]) -> None:
    proc = inside("/proc")
    os.makedirs(proc, exist_ok=True)
    linux.mount("proc", proc, "proc", LOCKED_DOWN)
    for path in plan["proc_readonly"]:
        if os.path.exists(inside(path)):
            bind_readonly(inside(path))
    os.makedirs(inside(plan["sys"]), exist_ok=True)
    linux.mount(plan["sys"], inside(plan["sys"]), None, linux.MS_BIND | linux.MS_REC)
    readonly.append(plan["sys"])
    dev = inside("/dev")
    os.makedirs(dev, exist_ok=True)
    linux.mount("tmpfs", dev, "tmpfs", linux.MS_NOSUID | linux.MS_NOEXEC, "mode=755")
    for name in plan["devices"]:
        _mount_point(f"{dev}/{name}", directory=False)
        linux.mount(f"/dev/{name}", f"{dev}/{name}", None, linux.MS_BIND)
    os.mkdir(f"{dev}/pts")
    pts_options = "newinstance,ptmxmode=0666,mode=620"
    linux.mount("devpts", f"{dev}/pts", "devpts", linux.MS_NOSUID | linux.MS_NOEXEC, pts_options)
    for name, target in plan["dev_links"]:
        os.symlink(target, f"{dev}/{name}")
    for path, mode in plan["tmpfs"]:
        os.makedirs(inside(path), exist_ok=True)
        flags = linux.MS_NOSUID | linux.MS_NODEV
        linux.mount("tmpfs", inside(path), "tmpfs", flags, f"mode={mode:o}")
    for path, target in plan["links"]:
        if not os.path.lexists(inside(path)):  # the host's is visible everywhere but in a tmpfs
            os.makedirs(os.path.dirname(inside(path)), exist_ok=True)
            os.symlink(target, inside(path))


def _files(plan: dict[str, Any]) -> None:
    files_dir = inside(plan["files_dir"])
    os.makedirs(files_dir, mode=0o755)
    for name, data in plan["files"]:
        write_file(os.path.join(files_dir, name), data)
    if plan["resolv_conf"] is not None:
        path, bind = plan["resolv_conf"]
        if bind:
            copy = inside(plan["resolv_conf_copy"])
            write_file(copy, plan["resolv_conf_content"])
            _mount_point(inside(path), directory=False)
            linux.mount(copy, inside(path), None, linux.MS_BIND)
            remount_readonly(inside(path), LOCKED_DOWN)
        else:
            os.makedirs(os.path.dirname(inside(path)), mode=0o755, exist_ok=True)
            write_file(inside(path), plan["resolv_conf_content"])
    if plan["hosts"] is not None:
        _place(plan["hosts"], plan["hosts_copy"], plan["hosts_content"])
    bind_readonly(files_dir)


def _place(where: tuple[str, bool], copy: str, content: bytes) -> None:
    """``content`` in place of the host file ``where`` (a path, and whether to bind over it)."""
    path, bind = where
    if bind:
        write_file(inside(copy), content)
        _mount_point(inside(path), directory=False)
        linux.mount(inside(copy), inside(path), None, linux.MS_BIND)
        remount_readonly(inside(path), LOCKED_DOWN)
    else:
        os.makedirs(os.path.dirname(inside(path)), mode=0o755, exist_ok=True)
        write_file(inside(path), content)


def _remount_readonly(tops: list[str]) -> None:
    """Make every mount at or below ``tops`` (the build's paths) read-only, keeping its flags."""
    wanted = [inside(top) for top in tops]
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        mounts = linux.parse_mountinfo(f.read())
    for point, options in mounts:
        if any(linux.is_under(point, top) for top in wanted):
            flags = 0
            for option in options:
                flags |= linux.MOUNT_OPTION_FLAGS.get(option, 0)
            remount_readonly(point, flags)


def apply_mount_plan(plan: dict[str, Any]) -> None:
    """Carry out ``MountPlan.to_spec()`` and enter the new root (in a new mount namespace).

    An OSError names the build's path (``/proc``), not where it was being built.
    """
    umask = os.umask(BUILDING_UMASK)
    try:
        _apply(plan)
    except OSError as error:
        name = error.filename
        if isinstance(name, str) and linux.is_under(name, NEW_ROOT):
            raise OSError(error.errno, error.strerror, name[len(NEW_ROOT) :] or "/") from None
        raise
    finally:
        os.umask(umask)


def _apply(plan: dict[str, Any]) -> None:
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    sources = _open_sources(plan)
    try:
        linux.mount("tmpfs", STAGING, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=700")
        os.mkdir(NEW_ROOT, 0o755)
        linux.mount(NEW_ROOT, NEW_ROOT, None, linux.MS_BIND)
        readonly: list[str] = []
        _layers(plan, sources, readonly)
        _replaced_trees(plan, readonly)
        _files(plan)
        for path, writable in plan["binds"]:
            _bind(sources[path], inside(path))
            if not writable:
                readonly.append(path)
        _remount_readonly(readonly)
    finally:
        for fd in sources.values():
            os.close(fd)
    os.chdir(NEW_ROOT)
    linux.pivot_root(".", ".")
    linux.umount2(".", linux.MNT_DETACH)
    os.chdir("/")

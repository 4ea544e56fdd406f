"""The host facts a build's mount plan is made of, read on the launcher's side (``build.py``).

``mountplan.py`` decides; this module looks: the mount table, the directories the user
sandbox expands, the paths of fetchproxy's own installation, the build's home directories.

It also **reserves** protected paths that do not exist yet. A bind mount needs something to
be mounted on, and a path in the build's working directory (a journal the launcher writes
later, a lock not recorded yet) is one the build could create itself. So an empty file is made
there before the build starts (with any missing parent directories), bound read-only into the
sandbox like any protected path, and removed by :func:`release` once the run is over if it is
still the same empty file. The launcher writes such a file in place (open, write), never by
renaming another file over it while a build runs: a rename would detach the read-only mount
in the sandbox.
"""

# Paths are plain strings here, normalized and compared as mountplan.py takes them.
# ruff: noqa: PTH100, PTH102, PTH106, PTH108, PTH110, PTH114, PTH115, PTH117, PTH118, PTH119, PTH120

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import fetchproxy
from fetchproxy.sandbox.linux import is_under, parse_mount_types
from fetchproxy.sandbox.mountplan import PRIVATE_DIR_CANDIDATES, Entry, EntryKind


def private_dirs() -> list[str]:
    """The directories that get a private tmpfs on this machine (real paths, deduplicated)."""
    found = []
    for candidate in PRIVATE_DIR_CANDIDATES:
        real = os.path.realpath(candidate)
        if Path(real).is_dir() and real not in found:
            found.append(real)
    return found


def mount_table() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount this process sees."""
    return parse_mount_types(Path("/proc/self/mountinfo").read_text(errors="surrogateescape"))


def _kind(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def list_dirs(directories: Sequence[str]) -> dict[str, list[Entry] | None]:
    """The entries of each directory; None for one this process may not list."""
    listings: dict[str, list[Entry] | None] = {}
    for directory in directories:
        try:
            with os.scandir(directory) as entries:
                found = []
                for entry in entries:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    kind = _kind(mode)
                    target = os.readlink(entry.path) if kind == "symlink" else ""
                    found.append(
                        Entry(name=entry.name, kind=kind, mode=stat.S_IMODE(mode), target=target)
                    )
                listings[directory] = found
        except OSError:
            listings[directory] = None
    return listings


@functools.cache
def installation_paths() -> tuple[str, ...]:
    """Where this Python and fetchproxy live: read-only to every build.

    The virtual environment (when there is one), the standard library and site-packages,
    the interpreter's executable and shared library, and fetchproxy's package directory.
    """
    import sysconfig  # noqa: PLC0415 - once per launcher, only when a build is started

    paths = {os.path.dirname(fetchproxy.__file__), os.path.realpath(sys.executable)}
    if sys.prefix != sys.base_prefix:
        paths |= {sys.prefix, sys.exec_prefix}
    paths |= {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        library = sysconfig.get_config_var("INSTSONAME") or ""
        paths.add(os.path.join(sysconfig.get_config_var("LIBDIR") or "", library))
    real = {os.path.realpath(p) for p in paths if p and os.path.exists(p)}
    return tuple(sorted(real))


@functools.cache
def installation_links() -> tuple[tuple[str, str], ...]:
    """The symlinks from ``sys.executable`` to the interpreter (a venv's ``python`` leads to
    the base interpreter, often through a symlink beside it): (path, target)."""
    links = []
    path = os.path.abspath(sys.executable)
    for _ in range(40):  # the kernel's own limit on symlinks in a row
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        links.append((path, target))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return tuple(links)


def home_dirs(env: Mapping[str, str]) -> list[str]:
    """The build's home directories (real paths): its ``HOME`` and its user's passwd entry's."""
    homes = []
    candidates = [env.get("HOME", "")]
    with contextlib.suppress(KeyError):  # no passwd entry for this uid
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    for candidate in candidates:
        if candidate and os.path.isabs(candidate):
            real = os.path.realpath(candidate)
            if real not in homes:
                homes.append(real)
    return homes


def _symlink_on_the_way(path: str, writable: Sequence[str]) -> str | None:
    """A symlink among ``path``'s components that lies in a writable path, if any."""
    parts = path.strip("/").split("/")
    for end in range(1, len(parts) + 1):
        prefix = "/" + "/".join(parts[:end])
        if os.path.islink(prefix):
            parent = os.path.realpath(os.path.dirname(prefix))
            if any(is_under(parent, w) for w in writable):
                return prefix
    return None


def _real_protected_path(given: Path, writable: Sequence[str]) -> str:
    absolute = os.path.abspath(given)
    link = _symlink_on_the_way(absolute, writable)
    if link is not None:
        raise ValueError(
            f"the protected path {given} is reached through the symlink {link}, which the "
            f"build may replace; pass the path it leads to, {os.path.realpath(absolute)}"
        )
    return os.path.realpath(absolute)


@dataclass
class Placeholder:
    """An empty file made to reserve an absent protected path, and the directories made for it."""

    path: str
    device: int
    inode: int
    made_dirs: list[str] = field(default_factory=list)


def _reserve(path: str) -> Placeholder:
    missing = []
    parent = os.path.dirname(path)
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    made = []
    try:
        for directory in reversed(missing):
            os.mkdir(directory)
            made.append(directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o666)  # as the launcher would make it (the umask applies)
    except OSError:
        for directory in reversed(made):
            os.rmdir(directory)
        raise
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return Placeholder(path=path, device=info.st_dev, inode=info.st_ino, made_dirs=made)


def protect(paths: Sequence[Path], writable: Sequence[str]) -> tuple[list[str], list[Placeholder]]:
    """The real paths to bind read-only for ``paths``, and the placeholders made for them.

    ``writable``: the real paths the build may change (its working directory first). A
    protected path reached through a symlink inside one of them is refused (ValueError): the
    build could point the symlink elsewhere. An absent one outside them needs nothing: what
    the build writes there is thrown away.
    """
    readonly: list[str] = []
    placeholders: list[Placeholder] = []
    try:
        for given in paths:
            real = _real_protected_path(given, writable)
            if os.path.lexists(real):
                readonly.append(real)
            elif any(is_under(real, w) for w in writable):
                placeholders.append(_reserve(real))
                readonly.append(real)
    except BaseException:
        release(placeholders)
        raise
    return readonly, placeholders


def release(placeholders: Sequence[Placeholder]) -> None:
    """Remove the placeholders still empty and unchanged, then the directories made for them."""
    for placeholder in placeholders:
        try:
            info = os.lstat(placeholder.path)
        except FileNotFoundError:
            info = None
        if (
            info is not None
            and stat.S_ISREG(info.st_mode)
            and info.st_size == 0
            and (info.st_dev, info.st_ino) == (placeholder.device, placeholder.inode)
        ):
            os.unlink(placeholder.path)
        for directory in reversed(placeholder.made_dirs):
            try:
                os.rmdir(directory)
            except OSError:
                break  # no longer empty: the launcher put something there

"""What the build's file system looks like, decided without I/O.

The build gets a root of its own, built by the supervisor (``mounts.py``) and entered with
``pivot_root``; the host's root is then detached. In that root:

- **Layers**: every host file system appears as an overlay whose lower layer is the host's
  tree and whose upper layer is a tmpfs the build never sees. The build can change anything
  it could change on the host; the changes live in memory and die with the run. In the root
  sandbox each host mount gets one overlay (:func:`plan_layers` with ``expand=False``). A user
  namespace may not use a tree with mounts below it as a lower layer (that would show what
  the mounts hide), so the user sandbox expands such directories: a tmpfs directory whose
  entries are overlays, symlinks and read-only files (``expand=True``, from ``listings``).
- **Replaced trees**: a fresh ``/proc`` (kernel knobs read-only), the host's ``/sys``
  read-only, a private ``/dev`` (a few devices and a ``devpts`` of its own: no host terminal,
  disk or console), a private tmpfs over ``/tmp``, ``/run`` and the like.
- **Fresh home** (optional): an empty tmpfs over the build's home directories. What must stay
  visible under it (the working directory, fetchproxy's installation, kept paths) is bound
  back, and the interpreter's symlinks on the way are made again.
- **Binds**, in this order: the *writable* paths (the working directory and the ones the user
  names: the host's own files, changes persist); then the *read-only* ones (kept, protected and
  installation paths: the host's files, read-only even inside a writable path). Directories
  between a writable path and a read-only path inside it are bound onto themselves, so the
  build cannot rename them away and put files of its own in the read-only path's place.

Every mount is made as real root (or as the owner of the sandbox's user namespace) before the
build's user namespace exists, so the kernel locks them all: the build, root only in its user
namespace, cannot unmount a layer to reach the host's files nor remount a read-only bind
writable.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fetchproxy.sandbox.linux import is_under

FILES_DIR = "/run/fetchproxy"
RESOLV_CONF_NAME = "resolv.conf"
HOSTS_NAME = "hosts"
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
_HOME_MODE = 0o700
# Kernel knobs a root build (uid 0 maps to the host's uid 0) could otherwise
# write: core_pattern and modprobe run programs as host root in the host's
# namespaces; sysrq-trigger reboots the machine.
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
SYS = "/sys"
# Trees the sandbox replaces whole; host mounts below them play no part.
REPLACED = ("/proc", SYS, "/dev")
# The devices of the private /dev, bound from the host's; /dev/pts is a devpts of its own.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
# File systems that are not data: no layer is made for them (their mount point stays an empty
# directory). autofs would ask the host's automounter, which mounts in the host's namespace.
NOT_DATA = frozenset(
    {
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devpts",
        "devtmpfs",
        "efivarfs",
        "fusectl",
        "hugetlbfs",
        "mqueue",
        "nsfs",
        "proc",
        "pstore",
        "rpc_pipefs",
        "securityfs",
        "selinuxfs",
        "sysfs",
        "tracefs",
    }
)

EntryKind = Literal["dir", "file", "symlink", "other"]


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One entry of a host directory the user sandbox expands."""

    name: str
    kind: EntryKind
    mode: int = 0o755
    target: str = ""  # a symlink's


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One step of building the root: an overlay over the host's ``path``, a directory of the
    root's own tmpfs, a symlink copied from the host, or a host file (or a directory the
    launcher may not list) bound read-only."""

    kind: Literal["overlay", "dir", "symlink", "file", "readonly"]
    path: str
    mode: int = 0o755
    target: str = ""


@dataclass(frozen=True, kw_only=True)
class Tmpfs:
    path: str
    mode: int


@dataclass(frozen=True, kw_only=True)
class Bind:
    """A host path bound at the same place; ``writable``: the host's, changes persist."""

    path: str
    writable: bool


@dataclass(frozen=True, kw_only=True)
class NetworkFiles:
    """The sandbox's own resolv.conf and /etc/hosts (``--intercept transparent``: the DNS
    stub in the edge, and only localhost)."""

    resolv_conf: bytes
    hosts: bytes


@dataclass(frozen=True, kw_only=True)
class ResolvConf:
    """Where the sandbox's resolv.conf goes: written into a private tmpfs, or bound over a file."""

    path: str
    bind: bool


@dataclass(frozen=True, kw_only=True)
class MountPlan:
    layers: tuple[Layer, ...]
    user_namespace: bool  # overlays need ``userxattr`` there
    tmpfs: tuple[Tmpfs, ...]  # private directories, then the fresh home
    links: tuple[tuple[str, str], ...]  # made where missing (in a tmpfs), after the tmpfs
    binds: tuple[Bind, ...]
    files: tuple[tuple[str, bytes], ...]  # written read-only into FILES_DIR
    resolv_conf: ResolvConf | None
    resolv_conf_content: bytes = RESOLV_CONF
    hosts: ResolvConf | None = None
    hosts_content: bytes | None = None  # None: the host's /etc/hosts stays as it is

    def to_spec(self) -> dict[str, Any]:
        """Everything the supervisor needs to carry the plan out, as plain data.

        The supervisor does not import this module (nor dataclasses): it starts
        in a bare interpreter and every import is paid for by every build.
        """
        return {
            "layers": [(layer.kind, layer.path, layer.mode, layer.target) for layer in self.layers],
            "overlay_options": ",userxattr" if self.user_namespace else "",
            "tmpfs": [(t.path, t.mode) for t in self.tmpfs],
            "links": list(self.links),
            "binds": [(b.path, b.writable) for b in self.binds],
            "files_dir": FILES_DIR,
            "files": list(self.files),
            "resolv_conf": None
            if self.resolv_conf is None
            else (self.resolv_conf.path, self.resolv_conf.bind),
            "resolv_conf_copy": posixpath.join(FILES_DIR, RESOLV_CONF_NAME),
            "resolv_conf_content": self.resolv_conf_content,
            "hosts": None if self.hosts is None else (self.hosts.path, self.hosts.bind),
            "hosts_copy": posixpath.join(FILES_DIR, HOSTS_NAME),
            "hosts_content": self.hosts_content,
            "proc_readonly": list(PROC_READONLY),
            "sys": SYS,
            "devices": list(DEVICES),
            "dev_links": list(DEV_LINKS),
        }


def check_file_name(name: str) -> None:
    """A name for a file in FILES_DIR: one path component, not ours."""
    if not name or "/" in name or "\0" in name or name in {".", ".."}:
        raise ValueError(
            f"sandbox file name {name!r} is not a plain file name; "
            f"files are placed as {FILES_DIR}/<name>"
        )
    if name in {RESOLV_CONF_NAME, HOSTS_NAME}:
        raise ValueError(f"sandbox file name {name!r} is reserved for the sandbox's own DNS setup")


def _outermost(paths: Sequence[str]) -> list[str]:
    """The paths not inside another one, sorted (a bind brings its subtree along)."""
    unique = sorted(set(paths))
    return [p for p in unique if not any(q != p and is_under(p, q) for q in unique)]


def _replaced(path: str, private_dirs: Sequence[str]) -> bool:
    return any(is_under(path, r) for r in (*REPLACED, *private_dirs))


def _skipped(mounts: Sequence[tuple[str, str]], private_dirs: Sequence[str]) -> list[str]:
    """Mount points whose file system (the last one mounted there, the one on top) gets no
    layer (see NOT_DATA), outside replaced trees."""
    top = dict(mounts)
    return sorted(
        p for p, t in top.items() if t in NOT_DATA and p != "/" and not _replaced(p, private_dirs)
    )


def dirs_to_expand(mounts: Sequence[tuple[str, str]], private_dirs: Sequence[str]) -> list[str]:
    """The host directories whose entries the user sandbox needs (``listings``): those with a
    host mount below them (of any kind: the kernel counts them all), which a user namespace
    may not use as a lower layer."""
    skipped = _skipped(mounts, private_dirs)
    found = set()
    for point, _ in mounts:
        parent = posixpath.dirname(point)
        while True:
            hidden = any(is_under(parent, s) for s in skipped)
            if not hidden and not _replaced(parent, private_dirs):
                found.add(parent)
            if parent == "/":
                break
            parent = posixpath.dirname(parent)
    return sorted(found)


def plan_layers(
    mounts: Sequence[tuple[str, str]],
    private_dirs: Sequence[str],
    *,
    expand: bool,
    listings: Mapping[str, Sequence[Entry] | None] | None = None,
) -> tuple[Layer, ...]:
    """The throwaway layers that make up the build's root, in the order they are mounted.

    ``mounts``: the host's (mount point, file system type), as /proc/self/mountinfo lists
    them. ``expand``: lower layers may not have mounts below them (user sandbox); then
    ``listings`` holds the entries of :func:`dirs_to_expand`'s directories (None for one
    that cannot be listed).
    """
    listings = listings or {}
    skipped = _skipped(mounts, private_dirs)
    if not expand:
        points = sorted({p for p, _ in mounts if not _replaced(p, private_dirs)})
        return tuple(
            Layer(kind="dir" if point in skipped else "overlay", path=point)
            for point in points
            if not any(is_under(point, s) and point != s for s in skipped)
        )
    expanded = set(dirs_to_expand(mounts, private_dirs))
    layers: list[Layer] = []

    def expand_dir(directory: str) -> None:
        for entry in sorted(listings.get(directory) or (), key=lambda e: e.name):
            path = posixpath.join(directory, entry.name)
            if _replaced(path, private_dirs):
                continue  # the replacement makes its own mount point
            if entry.kind == "symlink":
                layers.append(Layer(kind="symlink", path=path, target=entry.target))
            elif entry.kind == "file":
                layers.append(Layer(kind="file", path=path))
            elif entry.kind == "dir" and path in expanded and listings.get(path) is None:
                layers.append(Layer(kind="readonly", path=path))  # unlistable: cannot expand
            elif entry.kind == "dir" and (path in skipped or path in expanded):
                layers.append(Layer(kind="dir", path=path, mode=entry.mode))
                if path in expanded:
                    expand_dir(path)
            elif entry.kind == "dir":
                layers.append(Layer(kind="overlay", path=path))

    expand_dir("/")
    return tuple(layers)


def _check_paths(label: str, paths: Sequence[str]) -> None:
    for path in paths:
        if not posixpath.isabs(path) or posixpath.normpath(path) != path:
            raise ValueError(f"sandbox {label} {path!r} must be absolute and normalized")


def _intermediates(readonly: Sequence[str], writable: Sequence[str]) -> list[str]:
    """Directories strictly between a writable path and a read-only path inside it."""
    found = set()
    for path in readonly:
        roots = [w for w in writable if w != path and is_under(path, w)]
        if not roots:
            continue
        root = max(roots, key=len)
        parent = posixpath.dirname(path)
        while parent != root and is_under(parent, root):
            found.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(found)


@dataclass(frozen=True, kw_only=True)
class Paths:
    """The host paths a build's mounts are made of (real, absolute and normalized)."""

    cwd: str
    writable: Sequence[str] = ()  # persist
    readonly: Sequence[str] = ()  # kept, protected and installation paths
    homes: Sequence[str] = ()  # get an empty tmpfs (fresh home)
    # (path, target): symlinks on the way to a read-only path (the interpreter's), made again
    # where a tmpfs hides the host's
    links: Sequence[tuple[str, str]] = ()


def _check_binds(paths: Paths, private_dirs: Sequence[str]) -> None:
    writable = [paths.cwd, *paths.writable]
    _check_paths("path", [*private_dirs, *writable, *paths.readonly, *paths.homes])
    for path in (*writable, *paths.readonly):
        if path in private_dirs:
            raise ValueError(
                f"the working directory (or a kept path) is {path}, which the sandbox makes "
                f"private; keeping it would hand the build the host's {path}. Run the build "
                "from a directory of its own"
            )
    for path in writable:
        if path == "/":
            what = "working directory" if path == paths.cwd else "writable path"
            raise ValueError(
                f"the build's {what} is /, which would let it change every file; run the "
                "build from a directory of its own"
            )
        for readonly in paths.readonly:
            if is_under(path, readonly):
                what = "working directory" if path == paths.cwd else f"writable path {path}"
                raise ValueError(
                    f"the build's {what} lies inside {readonly}, which must stay read-only "
                    "to the build"
                )
    for home in paths.homes:
        if home == "/" or home in private_dirs or any(is_under(home, p) for p in REPLACED):
            raise ValueError(f"the home directory {home} cannot be replaced by an empty one")
        if home in writable:
            raise ValueError(
                f"a fresh home cannot replace {home}: it is the build's working directory or a "
                "writable path; run the build from a directory of its own"
            )


def plan_mounts(
    *,
    layers: Sequence[Layer],
    user_namespace: bool,
    private_dirs: Sequence[str],
    paths: Paths,
    files: Mapping[str, bytes],
    resolv_conf: str | None,
    resolv_conf_exists: bool,
    hosts: str | None = None,
    hosts_exists: bool = False,
    dns: NetworkFiles | None = None,
) -> MountPlan:
    """The mounts for one build.

    ``layers``: from :func:`plan_layers`. ``private_dirs``: existing directories (real paths)
    to cover with a tmpfs; must include ``/run``. ``resolv_conf``: the real path
    /etc/resolv.conf leads to (None when there is none); ``hosts`` the same for /etc/hosts.
    ``dns``: the sandbox's own resolv.conf and hosts (None: the resolv.conf that names no
    reachable server, and the host's hosts). Raises ValueError for paths that contradict each
    other.
    """
    for name in files:
        check_file_name(name)
    if posixpath.dirname(FILES_DIR) not in private_dirs:
        raise ValueError(f"{posixpath.dirname(FILES_DIR)} must be a private directory")
    _check_binds(paths, private_dirs)
    # A tmpfs hides what is below it: /run/lock (where /var/lock leads) needs none of its own.
    tmpfs = [
        Tmpfs(path=d, mode=_ROOT_ONLY_WRITABLE if d == "/run" else _STICKY_WORLD_WRITABLE)
        for d in _outermost(private_dirs)
    ]
    # every home, nested ones too: the build's HOME must exist in its parent's empty tmpfs
    tmpfs += [Tmpfs(path=home, mode=_HOME_MODE) for home in sorted(set(paths.homes))]
    writable = _outermost([paths.cwd, *paths.writable])
    readonly = _outermost(paths.readonly)
    binds = [Bind(path=p, writable=True) for p in writable]
    binds += [Bind(path=p, writable=True) for p in _intermediates(readonly, writable)]
    binds += [Bind(path=p, writable=False) for p in readonly]
    resolv = _placed(resolv_conf, resolv_conf_exists, private_dirs, binds)
    hosts_file = None
    if dns is not None:
        hosts_file = _placed(hosts, hosts_exists, private_dirs, binds)
    return MountPlan(
        layers=tuple(layers),
        user_namespace=user_namespace,
        tmpfs=tuple(tmpfs),
        links=tuple(sorted(set(paths.links))),
        binds=tuple(binds),
        files=tuple(sorted(files.items())),
        resolv_conf=resolv,
        resolv_conf_content=RESOLV_CONF if dns is None else dns.resolv_conf,
        hosts=hosts_file,
        hosts_content=None if dns is None else dns.hosts,
    )


def _placed(
    path: str | None,
    exists: bool,  # noqa: FBT001
    private_dirs: Sequence[str],
    binds: Sequence[Bind],
) -> ResolvConf | None:
    """Where a file of the sandbox's own DNS setup goes, for the real path ``path`` of the
    host's (None: there is none): written into a private tmpfs, or bound over the file."""
    if path is None:
        return None
    in_private = any(is_under(path, d) for d in private_dirs)
    in_bound = any(is_under(path, b.path) for b in binds)
    if in_private and not in_bound:
        return ResolvConf(path=path, bind=False)
    if exists:
        return ResolvConf(path=path, bind=True)
    return None

"""The Linux system calls the sandbox needs and Python 3.11 lacks, via ctypes.

``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``, ``prctl`` and
``install_seccomp_filter`` raise :class:`OSError` with the errno and the call's
name, like the ``os`` functions they stand in for. This module imports only the
standard library: the sandbox's supervisor process runs it in a bare interpreter
(``python -I -S``).
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000

MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# pivot_root(2) has no libc wrapper; its number per machine (os.uname().machine).
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

# Per-mount flags as /proc/self/mountinfo spells them; a read-only bind
# remount must repeat them or it clears them.
MOUNT_OPTION_FLAGS = {
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def _check(result: int, call: str, path: str | None = None) -> None:
    if result == -1:
        errno = ctypes.get_errno()
        if path is None:
            raise OSError(errno, f"{call}: {os.strerror(errno)}")
        raise OSError(errno, f"{call}: {os.strerror(errno)}", path)


def unshare(flags: int) -> None:
    """Move the calling thread (or process, for user and mount namespaces) into new namespaces."""
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """Move the calling thread into the namespace ``fd`` refers to."""
    _check(_libc.setns(fd, nstype), "setns")


def mount(
    source: str | None,
    target: str,
    fstype: str | None = None,
    flags: int = 0,
    data: str | None = None,
) -> None:
    """mount(2); ``target`` is named in the error."""
    _check(
        _libc.mount(
            None if source is None else os.fsencode(source),
            os.fsencode(target),
            None if fstype is None else fstype.encode(),
            flags,
            None if data is None else data.encode(),
        ),
        "mount",
        target,
    )


def umount2(target: str, flags: int = 0) -> None:
    """umount2(2); ``target`` is named in the error."""
    _check(_libc.umount2(os.fsencode(target), flags), "umount2", target)


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2): make ``new_root`` the root of this mount namespace."""
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(38, f"pivot_root: no system call number known for {os.uname().machine}")
    _check(_libc.syscall(number, os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def prctl(option: int, arg2: int = 0) -> None:
    """prctl(2) with one argument."""
    _check(_libc.prctl(option, arg2, 0, 0, 0), "prctl")


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def install_seccomp_filter(program: bytes) -> None:
    """Install a classic BPF seccomp filter (``struct sock_filter`` records, 8 bytes each).

    Without ``no_new_privs`` the kernel requires CAP_SYS_ADMIN in the calling thread's user
    namespace: the build's root has it in its own.
    """
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(code))
    result = _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)
    _check(result, "prctl(PR_SET_SECCOMP)")


def write_proc_file(path: str, data: str) -> None:
    """Write ``data`` to a /proc file in one write(2) (the kernel takes a map in a single write)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
    except OSError as error:
        raise OSError(error.errno, error.strerror, path) from None


def open_netns() -> int:
    """A new file descriptor for the calling thread's network namespace."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def netns_inode(fd: int | None = None) -> int:
    """The inode that names a network namespace: ``fd``'s, else the calling thread's."""
    if fd is None:
        return os.stat("/proc/thread-self/ns/net").st_ino  # noqa: PTH116 - no pathlib here
    return os.fstat(fd).st_ino


def is_under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it (both absolute and normalized)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def parse_mountinfo(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(mount point, per-mount options) for each line of /proc/<pid>/mountinfo."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) >= 6:
            mounts.append((_unescape(fields[4]), tuple(fields[5].split(","))))
    return mounts


def parse_mount_types(text: str) -> list[tuple[str, str]]:
    """(mount point, file system type) for each line of /proc/<pid>/mountinfo, in order."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        # optional fields end with a lone "-"; the file system type follows it
        separator = fields.index("-", 6) if "-" in fields[6:] else len(fields)
        if separator + 1 < len(fields):
            mounts.append((_unescape(fields[4]), fields[separator + 1]))
    return mounts


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` for a space)."""
    if "\\" not in field:
        return field
    raw = field.encode()
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == ord("\\") and raw[i + 1 : i + 4].isdigit():
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode(errors="surrogateescape")

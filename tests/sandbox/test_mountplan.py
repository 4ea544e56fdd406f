"""The build's mount plan, decided without I/O."""

from __future__ import annotations

import pytest

from fetchproxy.sandbox.mountplan import (
    RESOLV_CONF,
    Bind,
    Entry,
    Layer,
    MountPlan,
    NetworkFiles,
    Paths,
    ResolvConf,
    Tmpfs,
    check_file_name,
    dirs_to_expand,
    plan_layers,
    plan_mounts,
)

PRIVATE = ["/tmp", "/var/tmp", "/run", "/run/lock", "/dev/shm"]
HOST_MOUNTS = [
    ("/", "ext4"),
    ("/proc", "proc"),
    ("/proc/sys/fs/binfmt_misc", "binfmt_misc"),
    ("/sys", "sysfs"),
    ("/sys/fs/cgroup", "cgroup2"),
    ("/dev", "devtmpfs"),
    ("/dev/pts", "devpts"),
    ("/run", "tmpfs"),
    ("/run/user/1000", "tmpfs"),
    ("/home", "btrfs"),
    ("/home/me/.cache/gvfs", "fuse.gvfsd-fuse"),
    ("/boot", "autofs"),  # systemd's automount, triggered: ext4 on top
    ("/boot", "ext4"),
    ("/boot/efi", "vfat"),
    ("/net", "autofs"),
    ("/net/server", "nfs4"),
    ("/mnt/data", "xfs"),
    ("/var/lib/docker/overlay2/abc/merged", "overlay"),
]


def plan(
    *,
    cwd: str = "/home/me/project",
    writable: tuple[str, ...] = (),
    readonly: tuple[str, ...] = (),
    homes: tuple[str, ...] = (),
    files: dict[str, bytes] | None = None,
    resolv_conf: str | None = "/etc/resolv.conf",
    resolv_conf_exists: bool = True,
) -> MountPlan:
    return plan_mounts(
        layers=(),
        user_namespace=False,
        private_dirs=PRIVATE,
        paths=Paths(cwd=cwd, writable=writable, readonly=readonly, homes=homes),
        files=files or {},
        resolv_conf=resolv_conf,
        resolv_conf_exists=resolv_conf_exists,
    )


# ------------------------------------------------------------------------------------- layers


def test_the_root_sandbox_gives_every_host_mount_a_layer_of_its_own() -> None:
    assert plan_layers(HOST_MOUNTS, PRIVATE, expand=False) == (
        Layer(kind="overlay", path="/"),
        Layer(kind="overlay", path="/boot"),
        Layer(kind="overlay", path="/boot/efi"),
        Layer(kind="overlay", path="/home"),
        Layer(kind="overlay", path="/home/me/.cache/gvfs"),
        Layer(kind="overlay", path="/mnt/data"),
        Layer(kind="dir", path="/net"),  # autofs on top: no layer, nor for what is below it
        Layer(kind="overlay", path="/var/lib/docker/overlay2/abc/merged"),
    )


def test_the_user_sandbox_lists_the_directories_with_mounts_below() -> None:
    # /proc, /sys, /dev, /run are replaced; /net (autofs) gets no layer, so nothing below it
    assert dirs_to_expand(HOST_MOUNTS, PRIVATE) == [
        "/",
        "/boot",
        "/home",
        "/home/me",
        "/home/me/.cache",
        "/mnt",
        "/var",
        "/var/lib",
        "/var/lib/docker",
        "/var/lib/docker/overlay2",
        "/var/lib/docker/overlay2/abc",
    ]


def test_the_user_sandbox_expands_directories_with_mounts_below_into_their_entries() -> None:
    mounts = [("/", "ext4"), ("/proc", "proc"), ("/mnt/data", "xfs"), ("/srv", "autofs")]
    listings: dict[str, list[Entry] | None] = {
        "/": [
            Entry(name="bin", kind="symlink", target="usr/bin"),
            Entry(name="etc", kind="dir"),
            Entry(name="mnt", kind="dir", mode=0o750),
            Entry(name="proc", kind="dir"),
            Entry(name="srv", kind="dir"),
            Entry(name="swapfile", kind="file", mode=0o600),
            Entry(name="tmp", kind="dir", mode=0o1777),
            Entry(name="socket", kind="other"),
        ],
        "/mnt": [Entry(name="data", kind="dir"), Entry(name="usb", kind="dir")],
    }
    assert plan_layers(mounts, PRIVATE, expand=True, listings=listings) == (
        Layer(kind="symlink", path="/bin", target="usr/bin"),
        Layer(kind="overlay", path="/etc"),
        Layer(kind="dir", path="/mnt", mode=0o750),
        Layer(kind="overlay", path="/mnt/data"),
        Layer(kind="overlay", path="/mnt/usb"),
        Layer(kind="dir", path="/srv"),
        Layer(kind="file", path="/swapfile"),
    )


def test_a_directory_the_launcher_may_not_list_is_bound_read_only() -> None:
    mounts = [("/", "ext4"), ("/secret/inner", "ext4")]
    listings: dict[str, list[Entry] | None] = {
        "/": [Entry(name="secret", kind="dir", mode=0o700)],
        "/secret": None,
    }
    assert plan_layers(mounts, PRIVATE, expand=True, listings=listings) == (
        Layer(kind="readonly", path="/secret"),
    )


# -------------------------------------------------------------------------------------- binds


def test_each_private_directory_gets_a_tmpfs_unless_one_above_covers_it() -> None:
    assert plan().tmpfs == (
        Tmpfs(path="/dev/shm", mode=0o1777),
        Tmpfs(path="/run", mode=0o755),
        Tmpfs(path="/tmp", mode=0o1777),
        Tmpfs(path="/var/tmp", mode=0o1777),
    )


def test_a_fresh_home_is_a_tmpfs_after_the_private_directories() -> None:
    tmpfs = plan(cwd="/home/me/project", homes=("/root/me", "/home/me", "/root")).tmpfs
    assert tmpfs[-3:] == (
        Tmpfs(path="/home/me", mode=0o700),
        Tmpfs(path="/root", mode=0o700),
        Tmpfs(path="/root/me", mode=0o700),  # HOME, inside the passwd entry's home
    )


def test_writable_paths_come_first_then_the_read_only_ones() -> None:
    binds = plan(
        writable=("/home/me/.gradle", "/home/me/.gradle/caches"),
        readonly=("/opt/venv", "/opt/venv/lib", "/home/me/project/fetchproxy.lock.toml"),
    ).binds
    assert binds == (
        Bind(path="/home/me/.gradle", writable=True),
        Bind(path="/home/me/project", writable=True),
        Bind(path="/home/me/project/fetchproxy.lock.toml", writable=False),
        Bind(path="/opt/venv", writable=False),
    )


def test_directories_between_a_writable_path_and_a_read_only_one_in_it_are_pinned() -> None:
    """Bound onto themselves, they are mount points: the build cannot rename them away and
    make a directory of its own where the launcher will look for the read-only file."""
    binds = plan(readonly=("/home/me/project/locks/ci/fetchproxy.lock.toml",)).binds
    assert binds == (
        Bind(path="/home/me/project", writable=True),
        Bind(path="/home/me/project/locks", writable=True),
        Bind(path="/home/me/project/locks/ci", writable=True),
        Bind(path="/home/me/project/locks/ci/fetchproxy.lock.toml", writable=False),
    )


def test_resolv_conf_is_bound_over_a_file_or_written_into_a_private_directory() -> None:
    assert plan().resolv_conf == ResolvConf(path="/etc/resolv.conf", bind=True)
    stub = "/run/systemd/resolve/stub-resolv.conf"
    assert plan(resolv_conf=stub, resolv_conf_exists=False).resolv_conf == ResolvConf(
        path=stub, bind=False
    )
    assert plan(resolv_conf=None).resolv_conf is None
    assert plan(resolv_conf="/etc/missing.conf", resolv_conf_exists=False).resolv_conf is None


def test_resolv_conf_inside_a_bound_directory_is_bound_over() -> None:
    inside = plan(cwd="/run/mine", resolv_conf="/run/mine/resolv.conf")
    assert inside.resolv_conf == ResolvConf(path="/run/mine/resolv.conf", bind=True)


def test_the_spec_carries_everything_the_supervisor_needs() -> None:
    mount_plan = plan_mounts(
        layers=(Layer(kind="overlay", path="/"),),
        user_namespace=True,
        private_dirs=PRIVATE,
        paths=Paths(cwd="/tmp/work", readonly=("/opt/venv",)),
        files={"b.pem": b"B", "a.pem": b"A"},
        resolv_conf="/etc/resolv.conf",
        resolv_conf_exists=True,
    )
    assert mount_plan.to_spec() == {
        "layers": [("overlay", "/", 0o755, "")],
        "overlay_options": ",userxattr",
        "tmpfs": [("/dev/shm", 0o1777), ("/run", 0o755), ("/tmp", 0o1777), ("/var/tmp", 0o1777)],
        "links": [],
        "binds": [("/tmp/work", True), ("/opt/venv", False)],
        "files_dir": "/run/fetchproxy",
        "files": [("a.pem", b"A"), ("b.pem", b"B")],
        "resolv_conf": ("/etc/resolv.conf", True),
        "resolv_conf_copy": "/run/fetchproxy/resolv.conf",
        "resolv_conf_content": RESOLV_CONF,
        "hosts": None,
        "hosts_copy": "/run/fetchproxy/hosts",
        "hosts_content": None,
        "proc_readonly": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"],
        "sys": "/sys",
        "devices": ["null", "zero", "full", "random", "urandom", "tty"],
        "dev_links": [
            ("ptmx", "pts/ptmx"),
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ],
    }


def test_transparent_interception_brings_its_own_resolv_conf_and_hosts() -> None:
    dns = NetworkFiles(resolv_conf=b"nameserver 169.254.77.1\n", hosts=b"127.0.0.1 localhost\n")
    spec = plan_mounts(
        layers=(Layer(kind="overlay", path="/"),),
        user_namespace=False,
        private_dirs=PRIVATE,
        paths=Paths(cwd="/tmp/work"),
        files={},
        resolv_conf="/run/systemd/resolve/stub-resolv.conf",
        resolv_conf_exists=True,
        hosts="/etc/hosts",
        hosts_exists=True,
        dns=dns,
    ).to_spec()
    assert spec["resolv_conf"] == ("/run/systemd/resolve/stub-resolv.conf", False)  # in a tmpfs
    assert spec["resolv_conf_content"] == b"nameserver 169.254.77.1\n"
    assert spec["hosts"] == ("/etc/hosts", True)
    assert spec["hosts_content"] == b"127.0.0.1 localhost\n"
    with pytest.raises(ValueError, match="reserved"):
        check_file_name("hosts")


# ----------------------------------------------------------------------------- refused plans


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/etc/passwd", "nul\0"])
def test_file_names_are_plain_names(name: str) -> None:
    with pytest.raises(ValueError, match="is not a plain file name") as raised:
        check_file_name(name)
    assert str(raised.value) == (
        f"sandbox file name {name!r} is not a plain file name; "
        "files are placed as /run/fetchproxy/<name>"
    )


def test_resolv_conf_is_a_reserved_file_name() -> None:
    with pytest.raises(ValueError, match="reserved") as raised:
        plan(files={"resolv.conf": b""})
    assert str(raised.value) == (
        "sandbox file name 'resolv.conf' is reserved for the sandbox's own DNS setup"
    )


def test_paths_must_be_absolute_and_normalized() -> None:
    with pytest.raises(ValueError, match="must be absolute") as raised:
        plan(cwd="/tmp/a/../b")
    assert str(raised.value) == "sandbox path '/tmp/a/../b' must be absolute and normalized"


def test_run_must_be_private() -> None:
    with pytest.raises(ValueError, match="/run must be a private directory"):
        plan_mounts(
            layers=(),
            user_namespace=False,
            private_dirs=["/tmp"],
            paths=Paths(cwd="/home/me/project"),
            files={},
            resolv_conf=None,
            resolv_conf_exists=False,
        )


def test_a_private_directory_itself_cannot_be_kept() -> None:
    with pytest.raises(ValueError, match="makes private") as raised:
        plan(cwd="/tmp")
    assert str(raised.value) == (
        "the working directory (or a kept path) is /tmp, which the sandbox makes private; "
        "keeping it would hand the build the host's /tmp. Run the build from a directory of "
        "its own"
    )


@pytest.mark.parametrize(
    ("cwd", "writable", "message"),
    [
        (
            "/",
            (),
            "the build's working directory is /, which would let it change every file; run the "
            "build from a directory of its own",
        ),
        (
            "/opt/venv/src",
            (),
            "the build's working directory lies inside /opt/venv, which must stay read-only to "
            "the build",
        ),
        (
            "/home/me/project",
            ("/opt/venv",),
            "the build's writable path /opt/venv lies inside /opt/venv, which must stay "
            "read-only to the build",
        ),
    ],
)
def test_what_must_stay_read_only_cannot_be_writable(
    cwd: str, writable: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match="build") as raised:
        plan(cwd=cwd, writable=writable, readonly=("/opt/venv",))
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("cwd", "home", "message"),
    [
        ("/home/me/project", "/", "the home directory / cannot be replaced by an empty one"),
        ("/home/me/project", "/tmp", "the home directory /tmp cannot be replaced by an empty one"),
        (
            "/home/me",
            "/home/me",
            "a fresh home cannot replace /home/me: it is the build's working directory or a "
            "writable path; run the build from a directory of its own",
        ),
    ],
)
def test_a_fresh_home_needs_a_home_of_its_own(cwd: str, home: str, message: str) -> None:
    with pytest.raises(ValueError, match="home") as raised:
        plan(cwd=cwd, homes=(home,))
    assert str(raised.value) == message

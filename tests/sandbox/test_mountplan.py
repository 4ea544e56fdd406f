"""The build's mount plan, decided without I/O."""

from __future__ import annotations

import pytest

from fetchproxy.sandbox.mountplan import (
    RESOLV_CONF,
    MountPlan,
    ResolvConf,
    Tmpfs,
    check_file_name,
    plan_mounts,
)

PRIVATE = ["/tmp", "/var/tmp", "/run", "/run/lock", "/dev/shm"]


def plan(
    *,
    keep: tuple[str, ...] = ("/home/me/project",),
    files: dict[str, bytes] | None = None,
    resolv_conf: str | None = "/etc/resolv.conf",
    resolv_conf_exists: bool = True,
) -> MountPlan:
    return plan_mounts(
        private_dirs=PRIVATE,
        keep=keep,
        files=files or {},
        resolv_conf=resolv_conf,
        resolv_conf_exists=resolv_conf_exists,
    )


def test_each_private_directory_gets_a_tmpfs_unless_one_above_covers_it() -> None:
    assert plan().tmpfs == (
        Tmpfs(path="/dev/shm", mode=0o1777),
        Tmpfs(path="/run", mode=0o755),
        Tmpfs(path="/tmp", mode=0o1777),
        Tmpfs(path="/var/tmp", mode=0o1777),
    )


def test_a_working_directory_under_tmp_is_kept_and_one_elsewhere_needs_nothing() -> None:
    assert plan(keep=("/home/me/project",)).keep == ()
    assert plan(keep=("/tmp/pytest-of-root/t0",)).keep == ("/tmp/pytest-of-root/t0",)


def test_only_the_outermost_kept_paths_are_bound() -> None:
    kept = plan(keep=("/tmp/a/b", "/tmp/a", "/tmp/ab", "/run/x", "/tmp/a")).keep
    assert kept == ("/run/x", "/tmp/a", "/tmp/ab")


def test_resolv_conf_is_bound_over_a_file_or_written_into_a_private_directory() -> None:
    assert plan().resolv_conf == ResolvConf(path="/etc/resolv.conf", bind=True)
    stub = "/run/systemd/resolve/stub-resolv.conf"
    assert plan(resolv_conf=stub, resolv_conf_exists=False).resolv_conf == ResolvConf(
        path=stub, bind=False
    )
    assert plan(resolv_conf=None).resolv_conf is None
    assert plan(resolv_conf="/etc/missing.conf", resolv_conf_exists=False).resolv_conf is None


def test_resolv_conf_inside_a_kept_directory_is_bound_over() -> None:
    inside = plan(keep=("/run/mine",), resolv_conf="/run/mine/resolv.conf")
    assert inside.resolv_conf == ResolvConf(path="/run/mine/resolv.conf", bind=True)


def test_the_spec_carries_everything_the_supervisor_needs() -> None:
    spec = plan(files={"b.pem": b"B", "a.pem": b"A"}).to_spec()
    assert spec == {
        "tmpfs": [("/dev/shm", 0o1777), ("/run", 0o755), ("/tmp", 0o1777), ("/var/tmp", 0o1777)],
        "keep": [],
        "files_dir": "/run/fetchproxy",
        "files": [("a.pem", b"A"), ("b.pem", b"B")],
        "resolv_conf": ("/etc/resolv.conf", True),
        "resolv_conf_copy": "/run/fetchproxy/resolv.conf",
        "resolv_conf_content": RESOLV_CONF,
        "proc_readonly": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"],
        "readonly_trees": ["/sys"],
    }


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
        plan(keep=("/tmp/a/../b",))
    assert str(raised.value) == "sandbox path '/tmp/a/../b' must be absolute and normalized"


def test_run_must_be_private() -> None:
    with pytest.raises(ValueError, match="/run must be a private directory"):
        plan_mounts(
            private_dirs=["/tmp"], keep=(), files={}, resolv_conf=None, resolv_conf_exists=False
        )


def test_a_private_directory_itself_cannot_be_kept() -> None:
    with pytest.raises(ValueError, match="makes private") as raised:
        plan(keep=("/tmp",))
    assert str(raised.value) == (
        "the working directory (or a kept path) is /tmp, which the sandbox makes private; "
        "keeping it would hand the build the host's /tmp. Run the build from a directory of "
        "its own"
    )

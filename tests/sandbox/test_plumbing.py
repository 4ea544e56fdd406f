"""The small pure parts: mountinfo, user-namespace maps, the supervisor's line protocol,
whether a build's terminal output ended its line, capabilities, and the messages when the
sandbox cannot be built."""

from __future__ import annotations

import textwrap

import pytest

from fetchproxy.sandbox.build import identity_map
from fetchproxy.sandbox.linux import is_under, parse_mountinfo
from fetchproxy.sandbox.supervisor import LineReader, format_message, parse_message
from fetchproxy.sandbox.support import effective_capabilities, missing_capabilities
from fetchproxy.sandbox.terminal import mid_line_after
from tests.sandbox.conftest import NO_CAPABILITIES, needs_root, run_as


def test_mountinfo_gives_mount_points_unescaped_with_their_options() -> None:
    text = (
        "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 22 0:26 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
        "31 22 0:27 / /mnt/with\\040space ro,nosuid - tmpfs tmpfs ro\n"
    )
    assert parse_mountinfo(text) == [
        ("/", ("rw", "relatime")),
        ("/sys", ("rw", "nosuid", "nodev", "noexec", "relatime")),
        ("/mnt/with space", ("ro", "nosuid")),
    ]


def test_is_under_compares_whole_components() -> None:
    assert is_under("/sys", "/sys")
    assert is_under("/sys/fs/cgroup", "/sys")
    assert not is_under("/system", "/sys")
    assert is_under("/anything", "/")


def test_the_identity_map_keeps_the_ids_this_process_has() -> None:
    assert identity_map("         0          0 4294967295\n") == "0 0 4294967295\n"
    assert identity_map("0 100000 65536\n1000 1000 1\n") == "0 0 65536\n1000 1000 1\n"


def test_protocol_messages_round_trip() -> None:
    assert format_message("status", 256) == b"status 256\n"
    assert parse_message(b"status 256") == ("status", ["256"])
    assert parse_message(b"running") == ("running", [])
    error = format_message("error", 2, "exec", "No such file or directory")
    assert parse_message(error.rstrip(b"\n")) == (
        "error",
        ["2", "exec", "No such file or directory"],
    )
    assert format_message("error", 5, "setup", "line one\nline two") == (
        b"error 5 setup line one line two\n"
    )


def test_line_reader_splits_a_stream_and_ends_with_none() -> None:
    chunks = [b"map\nrun", b"ning\n", b"status 0\n", b""]
    reader = LineReader(lambda _size: chunks.pop(0))
    assert [reader.read_line() for _ in range(4)] == [b"map", b"running", b"status 0", None]


def test_capabilities_are_read_from_the_status_text() -> None:
    root = effective_capabilities("Name:\tx\nCapEff:\t000001ffffffffff\n")
    assert missing_capabilities(root) == []
    assert missing_capabilities(effective_capabilities("CapEff:\t0000000000001000\n")) == [
        "CAP_SYS_ADMIN",
        "CAP_SETUID",
        "CAP_SETGID",
    ]
    assert effective_capabilities("Name:\tx\n") == 0


NOT_ROOT_MESSAGE = (
    "the network sandbox needs root: it creates network namespaces and a veth "
    "pair, and this process (uid 0) lacks CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID, "
    "CAP_SETGID. Run fetchproxy as root (for example with sudo), or use --no-sandbox to run "
    "the build without network isolation."
)


@pytest.mark.root
def test_without_root_the_sandbox_says_why_and_names_the_way_out() -> None:
    needs_root()  # to drop privileges; as root without capabilities, as in a plain container
    code = textwrap.dedent(
        """
        import json
        from fetchproxy.sandbox import Sandbox, SandboxError, sandbox_support
        supported, reason = sandbox_support()
        try:
            with Sandbox():
                raised = None
        except SandboxError as error:
            raised = str(error)
        print(json.dumps([supported, reason, raised]))
        """
    )
    assert run_as(NO_CAPABILITIES, code) == [False, NOT_ROOT_MESSAGE, NOT_ROOT_MESSAGE]


@pytest.mark.parametrize(
    ("data", "was", "mid_line"),
    [
        (b"[INFO] BUILD SUCCESS", False, True),
        (b"a whole line\n", True, False),
        (b"done\n\x1b[0m", True, False),  # a colour reset after the newline
        (b"done\n\x1b[?25h\x1b[0m", True, False),  # the cursor shown again, then a reset
        (b"done\n\x1b]0;title\x07", True, False),  # a window title (OSC, ended by BEL)
        (b"done\n\x1b]8;;\x1b\\", True, False),  # a hyperlink's end (OSC, ended by ST)
        (b"\x1b[0m", True, True),  # no newline: as it was
        (b"\x1b[0m", False, False),
        (b"50%\r", False, True),  # a carriage return: the next line would overwrite it
        (b"done\n\x1b[0", False, True),  # an escape cut short: taken for text
        (b"done\n\x1b[0m more", False, True),
        (b"", True, True),
    ],
)
def test_whether_the_build_left_the_cursor_mid_line(data: bytes, was: bool, mid_line: bool) -> None:
    assert mid_line_after(data, was=was) is mid_line

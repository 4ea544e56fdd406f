"""Real clients through the real sandbox: ``git clone`` over smart HTTP and ``pip install``.

Each build is recorded with ``fetchproxy record -- BUILD`` against an HTTPS origin on the host's
127.0.0.2 (:mod:`tests.support.real_origins`), the origin is stopped, and the build is replayed with
``fetchproxy replay --exact -- BUILD``: it must give the same installed result, and the replay
must have *served* every lock entry (a replay that passes without a single request proves
nothing — local configuration can satisfy a build without the network). The build's working
copy, pip target and HOME live under its working directory, the only part of the host's /tmp a
sandboxed build sees.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetchproxy.keys.gitbody import canonical_body
from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    events,
    fetchproxy,
    lock_entries,
    prepare_work,
)
from tests.clients.support.git_http import BRANCHES, git_origin
from tests.clients.support.pip_index import (
    PIP_WHEELS,
    PipRecording,
    installed,
    pip_install,
    pip_recording,
)
from tests.support.real_origins import HTTPSOrigin, OriginRequest, git_env

__all__ = ["git_origin", "pip_recording"]  # fixtures, imported to be used here

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

UPLOAD_PACK_REQUEST = "application/x-git-upload-pack-request"


# ------------------------------------------------------------------------------------------ git


@dataclass(frozen=True)
class Clone:
    """What a clone gave: refs, HEAD, history length, and the checked-out files."""

    refs: str
    head: str
    commits: int
    files: dict[str, bytes]


def clone_result(path: Path) -> Clone:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args],
            env=git_env(path),
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    files = {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(path).parts
    }
    return Clone(
        refs=git("for-each-ref", "--format=%(objectname) %(refname)"),
        head=git("rev-parse", "HEAD").strip(),
        commits=int(git("rev-list", "--count", "HEAD")),
        files=files,
    )


def upload_pack_bodies(requests: list[OriginRequest]) -> list[bytes]:
    return [r.body for r in requests if r.header("content-type") == UPLOAD_PACK_REQUEST]


def inflated(body: bytes) -> bytes:
    return gzip.decompress(body) if body.startswith(b"\x1f\x8b") else body


def test_git_clone_replays_with_the_origin_stopped(tmp_path: Path, git_origin: HTTPSOrigin) -> None:
    work, store = prepare_work(tmp_path), tmp_path / "store"
    url = f"{git_origin.url}/repo.git"
    build = f"git clone -q {url} full && git clone -q --depth 1 --branch b07 {url} shallow"

    recorded = fetchproxy(
        work, store, "record", "--upstream-ca", git_origin.ca_path, "--", "sh", "-c", build
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    full, shallow = clone_result(work / "full"), clone_result(work / "shallow")
    origin_refs = subprocess.run(
        ["git", "-C", str(tmp_path / "git-origin" / "repo.git"), "rev-parse", "b00", "b07"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [full.head, shallow.head] == origin_refs
    assert (full.commits, shallow.commits) == (2, 1)
    assert full.files == {"README": b"branch 0, commit 2\n"}
    assert full.refs.count("refs/remotes/origin/b") == BRANCHES
    # Two GETs of info/refs (one key), and for each clone an ls-refs and a fetch POST (v2).
    assert [r.method for r in git_origin.requests] == ["GET", "POST", "POST"] * 2
    assert lock_entries(work) == 5
    assert f'url = "{url}/git-upload-pack"' in (work / LOCK).read_text()

    git_origin.stop()
    seen = len(git_origin.requests)
    shutil.rmtree(work / "full")
    shutil.rmtree(work / "shallow")
    replayed = fetchproxy(work, store, "replay", "--exact", "--", "sh", "-c", build)
    assert_replay_served(replayed, work, requests=seen)
    assert clone_result(work / "full") == full
    assert clone_result(work / "shallow") == shallow
    assert len(git_origin.requests) == seen


LAPTOP_AGENT, CI_AGENT = "git/2.39.5", "git/2.43.0"


def _clone_command(protocol: str, agent: str, url: str, directory: str) -> str:
    return (
        f"GIT_USER_AGENT={agent} git -c protocol.version={protocol} "
        f"-c transfer.advertiseSID=true clone {url} {directory}"
    )


@pytest.mark.parametrize("protocol", ["0", "2"])
def test_git_recorded_at_a_terminal_replays_in_ci(
    tmp_path: Path, git_origin: HTTPSOrigin, protocol: str
) -> None:
    """The DESIGN.md trap: a laptop records at a terminal with one git, CI replays with another.

    git's upload-pack bodies then differ in ``agent=``, ``session-id=`` and ``no-progress``
    (asked for only when stderr is not a terminal); keyed on the raw bytes every POST would miss.
    """
    work, store = prepare_work(tmp_path), tmp_path / "store"
    url = f"{git_origin.url}/repo.git"
    laptop = _clone_command(protocol, LAPTOP_AGENT, url, "laptop")
    # `script` gives git a real terminal (a pty) inside the sandbox.
    record_build = f"script -qec 'test -t 2 && {laptop}' /dev/null"
    recorded = fetchproxy(
        work, store, "record", "--upstream-ca", git_origin.ca_path, "--", "sh", "-c", record_build
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "Receiving objects: 100%" in recorded.stdout  # git showed progress: a terminal
    laptop_bodies = upload_pack_bodies(git_origin.requests)

    # What the CI side sends, seen at the origin: the same clone, directly, not at a terminal.
    before = len(git_origin.requests)
    subprocess.run(
        ["sh", "-c", _clone_command(protocol, CI_AGENT, url, str(tmp_path / "direct"))],
        env=git_env(tmp_path, GIT_SSL_CAINFO=str(git_origin.ca_path)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
    )
    ci_bodies = upload_pack_bodies(git_origin.requests[before:])
    assert len(laptop_bodies) == len(ci_bodies) == (1 if protocol == "0" else 2)
    assert laptop_bodies[-1].startswith(b"\x1f\x8b")  # 40 wants: git gzipped the body
    for on_laptop, in_ci in zip(laptop_bodies, ci_bodies, strict=True):
        assert on_laptop != in_ci
        assert f"agent={LAPTOP_AGENT}".encode() in inflated(on_laptop)
        assert f"agent={CI_AGENT}".encode() in inflated(in_ci)
        path = "/repo.git/git-upload-pack"
        assert canonical_body(path, UPLOAD_PACK_REQUEST, on_laptop) == canonical_body(
            path, UPLOAD_PACK_REQUEST, in_ci
        )
    # The clone's fetch request: session ids on both sides; progress only at the terminal.
    assert b"session-id=" in inflated(laptop_bodies[-1])
    assert b"session-id=" in inflated(ci_bodies[-1])
    assert b"no-progress" not in inflated(laptop_bodies[-1])
    assert b"no-progress" in inflated(ci_bodies[-1])

    git_origin.stop()
    ci = _clone_command(protocol, CI_AGENT, url, "ci")
    replayed = fetchproxy(
        work, store, "replay", "--exact", "--", "sh", "-c", f"test ! -t 2 && {ci}"
    )
    assert_replay_served(replayed, work, requests=1 + len(laptop_bodies))
    assert lock_entries(work) == 1 + len(laptop_bodies)  # info/refs and the POSTs
    assert clone_result(work / "ci") == clone_result(work / "laptop")


def test_git_protocol_v0_replay_of_a_v2_recording_is_refused(
    tmp_path: Path, git_origin: HTTPSOrigin
) -> None:
    """Recorded with git's default protocol v2 (git >= 2.26), replayed by a v0 client.

    Ubuntu 20.04's git 2.25 speaks v0 by default. The origin would answer its info/refs GET
    with another body than the recorded one; replay must refuse it, never serve the v2 answer.
    """
    work, store = prepare_work(tmp_path), tmp_path / "store"
    url = f"{git_origin.url}/repo.git"
    recorded = fetchproxy(
        work,
        store,
        "record",
        "--upstream-ca",
        git_origin.ca_path,
        "--",
        *("git", "-c", "protocol.version=2", "clone", "-q", url, "v2"),
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert git_origin.requests[0].header("git-protocol") == "version=2"
    git_origin.stop()
    replayed = fetchproxy(
        work, store, "replay", "--", "git", "-c", "protocol.version=0", "clone", "-q", url, "v0"
    )
    assert f"fetchproxy:   refused GET {url}/info/refs?service=git-upload-pack" in (
        replayed.stderr
    ), replayed.stdout + replayed.stderr
    assert replayed.returncode == 128  # git's own status: the remote refused


# ------------------------------------------------------------------------------------------ pip


def test_pip_installs_the_same_from_the_replay(tmp_path: Path, pip_recording: PipRecording) -> None:
    site = pip_recording.site
    assert sorted(site) == [
        "demo_dep-1.0.dist-info/INSTALLER",
        "demo_dep-1.0.dist-info/METADATA",
        "demo_dep-1.0.dist-info/RECORD",
        "demo_dep-1.0.dist-info/WHEEL",
        "demo_dep/__init__.py",
        "demo_pkg-1.0.dist-info/INSTALLER",
        "demo_pkg-1.0.dist-info/METADATA",
        "demo_pkg-1.0.dist-info/RECORD",
        "demo_pkg-1.0.dist-info/REQUESTED",
        "demo_pkg-1.0.dist-info/WHEEL",
        "demo_pkg/__init__.py",
    ]
    work = prepare_work(tmp_path)
    shutil.copy(pip_recording.lock, work / LOCK)
    replayed = fetchproxy(
        work, pip_recording.store, "replay", "--exact", "--", *pip_install(pip_recording.index_url)
    )
    assert_replay_served(replayed, work, requests=4)
    assert lock_entries(work) == 4
    assert installed(work / "site") == site
    imported = subprocess.run(
        [sys.executable, "-c", "import demo_pkg; print(demo_pkg.VERSION, demo_pkg.GREETING)"],
        cwd=work / "site",
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout == "1.0 hello from demo-dep\n"


def test_a_replay_pip_satisfies_from_local_files_served_nothing_and_exact_fails(
    tmp_path: Path, pip_recording: PipRecording
) -> None:
    """A pip.conf with find-links makes the build pass offline; only the served count tells."""
    work = prepare_work(tmp_path)
    shutil.copy(pip_recording.lock, work / LOCK)
    (work / "wheels").mkdir()
    for wheel in PIP_WHEELS:
        (work / "wheels" / wheel.filename).write_bytes(wheel.data)
    (work / "pip.conf").write_text(f"[install]\nno-index = true\nfind-links = {work / 'wheels'}\n")
    replayed = fetchproxy(
        work,
        pip_recording.store,
        "replay",
        "--exact",
        "--",
        *pip_install(pip_recording.index_url),
        env={"PIP_CONFIG_FILE": str(work / "pip.conf")},
    )
    assert installed(work / "site") == pip_recording.site  # the build itself succeeded
    assert replayed.returncode == 3
    assert f"fetchproxy: served 0 fetches (0 B) from {LOCK}; refused 0" in replayed.stderr
    assert "fetchproxy: 4 of 4 lock entries went unused" in replayed.stderr
    assert (
        f"fetchproxy: --exact: the build did not use exactly {LOCK} (0 refused, 4 unused)"
        in replayed.stderr
    )
    assert [event["event"] for event in events(work)] == ["unused"] * 4

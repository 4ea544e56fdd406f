"""The git diff driver, for real: ``git diff``, ``git log -p`` and ``git show`` of a lock in a
temporary repository, set up as docs/reviewing-locks.md says (``.gitattributes`` plus
``diff.fetchproxy.command`` and ``diff.fetchproxy.textconv``), through ``python -m fetchproxy``.

Git runs with ``HOME`` in the temporary directory and no system config, so nothing of the
user's configuration is read or written.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import render_lock
from fetchproxy.lock.model import Fetch, Lock

FOO = "https://files.example.org/pkg/foo-1.0.tar.gz"
BAR1 = "https://files.example.org/pkg/bar-1.0.tar.gz"
BAR2 = "https://files.example.org/pkg/bar-2.0.tar.gz"
PAYLOAD = "https://evil.example.net/payload.sh"
FOO_OLD = "blake3:401eb897b5a00277d3772c0d468d2033e253da460fd26b2dcaa14d68e4300434"
FOO_NEW = "blake3:2447d3731a1a3df1ff85468be201999c5c2c7a9fa400d7278dd764befd1c5f63"
BAR1_DIGEST = "blake3:0aa9dfd37af5435397c767f6ad635d6784554162d404df56a99bc272de218c7d"
BAR2_DIGEST = "blake3:e2e4d9b763a50bdb87b30071a87c0ac564b73a6f05cdfc998f0e03b0b8127f6e"
PAYLOAD_DIGEST = "blake3:ec90915fa26ab012a89a88ecc8b47e4dd76c4adfd6abd1fc10e321b0fca18d1d"


def fetch(url: str, body: bytes, size: int) -> Fetch:
    return Fetch(
        key=RequestKey(method="GET", url=url), status=200, digest=digest_bytes(body), size=size
    )


OLD = Lock.from_fetches([fetch(FOO, b"foo 1.0", 10485760), fetch(BAR1, b"bar 1.0", 1153434)])
NEW = Lock.from_fetches(
    [
        fetch(FOO, b"foo 1.0, re-tagged", 10590617),
        fetch(BAR2, b"bar 2.0", 1258291),
        fetch(PAYLOAD, b"payload", 512),
    ]
)
LOCK = "fetchproxy.lock.toml"

SEMANTIC_BODY = """\
evil.example.net  (new host)
  + GET https://evil.example.net/payload.sh  (512 B, blake3:ec90915fa26a…)
files.example.org
  - GET https://files.example.org/pkg/bar-1.0.tar.gz  (1.1 MiB)
  + GET https://files.example.org/pkg/bar-2.0.tar.gz  (1.2 MiB, blake3:e2e4d9b763a5…)
  ! GET https://files.example.org/pkg/foo-1.0.tar.gz  CONTENT DRIFT: blake3:401eb897b5a0… \
(10.0 MiB) → blake3:2447d3731a1a… (10.1 MiB)
new hosts: evil.example.net
summary: 2 added, 1 removed, 1 changed (1 content drift), 1 new host; +11.3 MiB -11.1 MiB
"""


@dataclass
class Repo:
    path: Path
    env: dict[str, str]

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert result.returncode == 0, f"git {shlex.join(args)}: {result.stderr}"
        return result.stdout

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def blob(self, revision: str) -> str:
        """The 7-hex name git gives the driver for the lock at ``revision``."""
        return self.git("rev-parse", f"{revision}:{LOCK}").strip()[:7]

    def write_lock(self, lock: Lock) -> None:
        (self.path / LOCK).write_text(render_lock(lock))


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Reviewer",
        "GIT_AUTHOR_EMAIL": "reviewer@example.org",
        "GIT_COMMITTER_NAME": "Reviewer",
        "GIT_COMMITTER_EMAIL": "reviewer@example.org",
        "GIT_PAGER": "cat",
        "LC_ALL": "C.UTF-8",
    }
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    repo = Repo(tmp_path / "repo", env)
    repo.path.mkdir()
    repo.git("init", "-q", "-b", "main")
    # The set-up of docs/reviewing-locks.md, with `fetchproxy` spelled as this interpreter.
    fetchproxy = f"{shlex.quote(sys.executable)} -m fetchproxy"
    (repo.path / ".gitattributes").write_text("*.lock.toml diff=fetchproxy\n")
    repo.git("config", "diff.fetchproxy.command", f"{fetchproxy} lock diff --git-external-diff")
    repo.git("config", "diff.fetchproxy.textconv", f"{fetchproxy} lock show --git-textconv")
    return repo


def test_git_diff_of_a_lock_change_is_the_semantic_diff(repo: Repo) -> None:
    repo.write_lock(OLD)
    repo.commit("lock")
    repo.write_lock(NEW)
    old = repo.blob("HEAD")
    assert repo.git("diff") == (
        f"fetchproxy lock diff: {LOCK}@{old} → {LOCK} (working tree)\n" + SEMANTIC_BODY
    )
    repo.commit("update")
    new = repo.blob("HEAD")
    expected = f"fetchproxy lock diff: {LOCK}@{old} → {LOCK}@{new}\n" + SEMANTIC_BODY
    assert repo.git("diff", "HEAD~1", "HEAD") == expected
    assert repo.git("log", "-p", "--ext-diff", "--format=%s", "-1") == "update\n\n" + expected
    assert repo.git("show", "--ext-diff", "--format=%s") == "update\n\n" + expected


def test_git_log_without_ext_diff_shows_the_textconv_listing(repo: Repo) -> None:
    repo.write_lock(OLD)
    repo.commit("lock")
    repo.write_lock(NEW)
    repo.commit("update")
    old, new = repo.blob("HEAD~1"), repo.blob("HEAD")
    assert repo.git("log", "-p", "--format=%s", "-1") == (
        "update\n\n"
        f"diff --git a/{LOCK} b/{LOCK}\n"
        f"index {old}..{new} 100644\n"
        f"--- a/{LOCK}\n"
        f"+++ b/{LOCK}\n"
        "@@ -1,5 +1,8 @@\n"
        "-# fetchproxy lock: 2 fetches from 1 host, 11.1 MiB of bodies\n"
        "+# fetchproxy lock: 3 fetches from 2 hosts, 11.3 MiB of bodies\n"
        "+\n"
        "+evil.example.net:\n"
        f"+  GET {PAYLOAD}  →  200, 512 B, {PAYLOAD_DIGEST}\n"
        " \n"
        " files.example.org:\n"
        f"-  GET {BAR1}  →  200, 1153434 B, {BAR1_DIGEST}\n"
        f"-  GET {FOO}  →  200, 10485760 B, {FOO_OLD}\n"
        f"+  GET {BAR2}  →  200, 1258291 B, {BAR2_DIGEST}\n"
        f"+  GET {FOO}  →  200, 10590617 B, {FOO_NEW}\n"
    )


def test_git_diff_of_a_lock_that_changed_only_in_layout(repo: Repo) -> None:
    repo.write_lock(OLD)
    repo.commit("lock")
    path = repo.path / LOCK
    path.write_text(path.read_text().replace(" = ", "="))
    assert repo.git("diff") == (
        f"fetchproxy lock diff: {LOCK}@{repo.blob('HEAD')} → {LOCK} (working tree)\n"
        "summary: no changes (2 fetches)\n"
        "note: the files hold the same entries but differ in layout; `fetchproxy lock fmt` "
        "rewrites a lock in canonical form\n"
    )


def test_git_diff_of_an_added_and_a_removed_lock(repo: Repo) -> None:
    (repo.path / "README").write_text("a project\n")
    repo.commit("start")
    repo.write_lock(OLD)
    repo.git("add", LOCK)
    added = repo.git("diff", "--cached")
    assert added.startswith(f"fetchproxy lock diff: /dev/null → {LOCK}@")
    assert added.endswith(
        "new hosts: files.example.org\n"
        "summary: 2 added, 0 removed, 0 changed, 1 new host; +11.1 MiB -0 B\n"
    )
    repo.commit("lock")
    (repo.path / LOCK).unlink()
    assert repo.git("diff") == (
        f"fetchproxy lock diff: {LOCK}@{repo.blob('HEAD')} → /dev/null\n"
        "files.example.org\n"
        f"  - GET {BAR1}  (1.1 MiB)\n"
        f"  - GET {FOO}  (10.0 MiB)\n"
        "summary: 0 added, 2 removed, 0 changed; +0 B -11.1 MiB\n"
    )


def test_git_diff_of_a_broken_lock_still_shows_the_change(repo: Repo) -> None:
    repo.write_lock(OLD)
    repo.commit("lock")
    text = render_lock(OLD)
    (repo.path / LOCK).write_text(text.replace("version = 1", "version = 7"))
    old = repo.blob("HEAD")
    assert repo.git("diff") == (
        f"fetchproxy lock diff: {LOCK}@{old} → {LOCK} (working tree)\n"
        f"fetchproxy lock diff: not a valid lock: {LOCK} (working tree):2: version: unknown lock "
        "version 7 — this lock was written by a newer fetchproxy; upgrade fetchproxy to read it\n"
        "fetchproxy lock diff: showing the text diff instead\n"
        f"--- {LOCK}@{old}\n"
        f"+++ {LOCK} (working tree)\n"
        "@@ -1,5 +1,5 @@\n"
        " # @generated by fetchproxy record — review changes, do not edit by hand.\n"
        "-version = 1\n"
        "+version = 7\n"
        " \n"
        " [[fetch]]\n"
        ' method = "GET"\n'
    )
    repo.commit("broken")
    log = repo.git("log", "-p", "--format=%s", "-1")
    assert "+# fetchproxy: not a valid lock: " in log
    assert "+version = 7\n" in log

"""The merge driver, for real: two branches that both re-recorded their lock (``fetchproxy
record -- curl …`` in the root sandbox), merged by ``git merge`` with the driver set up as
docs/reviewing-locks.md says (``merge.fetchproxy.driver`` and ``.gitattributes``).

Git runs with ``HOME`` in the temporary directory and no system config, so nothing of the
user's configuration is read or written.
"""

from __future__ import annotations

import http.server
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetchproxy.lock.file import LockFileError, load_lock
from tests.support.cli import run_fetchproxy

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

LOCK = "fetchproxy.lock.toml"
FILES: dict[str, bytes] = {}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = FILES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib signature
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    FILES.clear()
    FILES.update({f"/{name}": f"{name} 1\n".encode() for name in "abcd"})
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class Repo:
    path: Path
    env: dict[str, str]
    origin: str

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"git {shlex.join(args)}: {done.stdout}{done.stderr}"
        return done

    def record(self, *names: str) -> None:
        """Re-record the lock from a build that fetches ``names``."""
        build = " && ".join(f"curl -sSf -o /dev/null {self.origin}/{n}" for n in names)
        done = run_fetchproxy("record", "--", "sh", "-c", build, cwd=self.path, env=self.env)
        assert done.returncode == 0, done.stderr
        self.git("add", LOCK)
        self.git("commit", "-qm", f"record {' '.join(names)}")

    def urls(self) -> list[str]:
        return [f.key.url.rsplit("/", 1)[1] for f in load_lock(self.path / LOCK).fetches]


@pytest.fixture
def repo(tmp_path: Path, origin: str) -> Repo:
    path = tmp_path / "repo"
    path.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.org",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.org",
        "LC_ALL": "C.UTF-8",
        "FETCHPROXY_STORE": str(tmp_path / "store"),
    }
    repo = Repo(path, env, origin)
    repo.git("init", "-q", "-b", "main")
    # docs/reviewing-locks.md, with `fetchproxy` spelled as this interpreter runs it
    fetchproxy = f"{shlex.quote(sys.executable)} -m fetchproxy"
    repo.git("config", "merge.fetchproxy.name", "fetchproxy lock merge")
    repo.git("config", "merge.fetchproxy.driver", f"{fetchproxy} lock merge %O %A %B")
    (path / ".gitattributes").write_text("*.lock.toml merge=fetchproxy\n")
    (path / ".gitignore").write_text("*.log.jsonl\n")  # each run's event log
    repo.git("add", ".gitattributes", ".gitignore")
    repo.record("a", "b")
    return repo


def test_a_merge_of_two_re_recorded_branches_is_clean(repo: Repo) -> None:
    repo.git("checkout", "-qb", "topic")
    repo.record("a", "c")  # topic drops b, adds c
    repo.git("checkout", "-q", "main")
    repo.record("a", "b", "d")  # main adds d
    merged = repo.git("merge", "-q", "--no-edit", "topic", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "fetchproxy lock merge: " in merged.stderr  # our driver ran, not git's line merge
    assert repo.urls() == ["a", "c", "d"]
    assert repo.git("status", "--porcelain").stdout == ""
    # the merged lock replays, every entry
    done = run_fetchproxy(
        "replay", "--exact", "--", "sh", "-c",
        " && ".join(f"curl -sSf -o /dev/null {repo.origin}/{n}" for n in "acd"),
        cwd=repo.path, env=repo.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_two_answers_to_one_request_are_a_conflict_nothing_reads(repo: Repo) -> None:
    repo.git("checkout", "-qb", "topic")
    FILES["/a"] = b"a 2, as topic recorded it\n"
    repo.record("a", "b", "c")
    topic_a = load_lock(repo.path / LOCK).fetches[0].digest
    repo.git("checkout", "-q", "main")
    FILES["/a"] = b"a 3, as main recorded it\n"
    repo.record("a", "b", "d")
    main_a = load_lock(repo.path / LOCK).fetches[0].digest

    merged = repo.git("merge", "--no-edit", "topic", check=False)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert f"CONFLICT (content): Merge conflict in {LOCK}" in merged.stdout
    assert "1 conflict:" in merged.stderr
    text = (repo.path / LOCK).read_text()
    line = text.split("\n").index("<<<<<<< ours") + 1
    with pytest.raises(LockFileError) as caught:
        load_lock(repo.path / LOCK)
    assert str(caught.value) == (
        f"{repo.path / LOCK}:{line}: a merge conflict marker (two answers to GET "
        f"{repo.origin}/a: ours: {main_a}, theirs: {topic_a}): resolve the conflict, then run "
        "`fetchproxy lock fmt`"
    )
    # neither lock fmt nor a replay picks a side
    fmt = run_fetchproxy("lock", "fmt", cwd=repo.path, env=repo.env)
    assert fmt.returncode == 2
    assert f"{LOCK}:{line}: a merge conflict marker (two answers to GET" in fmt.stderr
    assert (repo.path / LOCK).read_text() == text
    replay = run_fetchproxy("replay", "--", "true", cwd=repo.path, env=repo.env)
    assert replay.returncode == 2
    # the rest merged: c from topic, d from main, both sides kept b
    resolved = re.sub(r"<<<<<<< ours\n.*?=======\n(.*?)>>>>>>> theirs\n", r"\1", text, flags=re.S)
    (repo.path / LOCK).write_text(resolved)
    assert run_fetchproxy("lock", "fmt", cwd=repo.path, env=repo.env).returncode == 0
    assert repo.urls() == ["a", "b", "c", "d"]
    assert load_lock(repo.path / LOCK).fetches[0].digest == topic_a
    repo.git("add", LOCK)
    repo.git("commit", "-qm", "merge topic, taking its a")

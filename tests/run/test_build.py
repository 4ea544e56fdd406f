"""`fetchproxy record -- BUILD` and `fetchproxy replay -- BUILD`: curl inside the real sandbox.

The origin listens on the host's loopback at 127.0.0.2 (the build's no_proxy covers only its own
127.0.0.1), so it is reachable only through the proxy, whose upstream connections are made in
the host namespace.
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fetchproxy.lock.file import load_lock
from tests.support.cli import run_fetchproxy, with_test_origins

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

BODY = b"payload for the build\n" * 100


class _Handler(http.server.BaseHTTPRequestHandler):
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def do_GET(self) -> None:
        if self.path != "/file.txt":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib signature
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _Handler)
    _Handler.connections = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetchproxy(
    tmp_path: Path, *args: str, prefix: Sequence[str] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy ARGS`` in ``tmp_path``, its store there too; ``env``: more variables;
    ``prefix``: what runs it (as :func:`run_fetchproxy` takes it)."""
    store = str(tmp_path / "store")
    environment = {**os.environ, "FETCHPROXY_STORE": store, **env}
    return run_fetchproxy(*args, cwd=tmp_path, env=environment, prefix=prefix)


SIGINT_AT_ITS_DEFAULT = ("env", "--default-signal=INT")
"""A build's SIGINT is as its launcher's was, and a shell without job control starts what it
runs in the background with SIGINT ignored (a CI job started that way, say): the run is
started with SIGINT at its default, so that a build can be stopped by one."""


def namespaces_and_veths() -> tuple[str, str]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return netns.stdout, "\n".join(line for line in links.stdout.splitlines() if "veth" in line)


def test_record_then_replay_through_the_sandbox(tmp_path: Path, origin: str) -> None:
    before = namespaces_and_veths()
    build = (
        f"curl -sSf -o got.txt {origin}/file.txt && "
        f"curl -sS --noproxy '*' --max-time 5 {origin}/file.txt; echo direct=$?"
    )
    recorded = fetchproxy(tmp_path, "record", "--", "sh", "-c", build)
    assert recorded.returncode == 0, recorded.stderr
    assert (tmp_path / "got.txt").read_bytes() == BODY
    # Without the proxy, the build has no route to the host at all: curl exit 7, at once.
    assert "direct=7" in recorded.stdout
    assert "fetchproxy: recorded 1 fetch (2.1 KiB) into fetchproxy.lock.toml" in recorded.stderr
    assert _Handler.connections == 1  # the proxy's upstream connection, from the host netns
    lock = (tmp_path / "fetchproxy.lock.toml").read_text()
    assert f'url = "{origin}/file.txt"' in lock

    (tmp_path / "got.txt").unlink()
    _Handler.connections = 0
    replayed = fetchproxy(
        tmp_path, "replay", "--", "curl", "-sSf", "-o", "got.txt", f"{origin}/file.txt"
    )
    assert replayed.returncode == 0, replayed.stderr
    assert (tmp_path / "got.txt").read_bytes() == BODY
    assert _Handler.connections == 0  # replay never contacts the origin
    assert namespaces_and_veths() == before


def test_replay_refuses_what_the_lock_lacks_and_exits_3(tmp_path: Path, origin: str) -> None:
    assert (
        fetchproxy(tmp_path, "record", "--", "curl", "-sSf", f"{origin}/file.txt").returncode == 0
    )
    replayed = fetchproxy(
        tmp_path, "replay", "--", "sh", "-c", f"curl -sS {origin}/other.txt; true"
    )
    assert replayed.returncode == 3
    assert f"fetchproxy: refused GET {origin}/other.txt: not in the lock" in replayed.stdout
    assert "replay refused 1 request(s): it is not hermetic (exit status 3)" in replayed.stderr
    events = (tmp_path / "fetchproxy.lock.log.jsonl").read_text()
    assert '"reason": "not-in-lock"' in events
    assert f'"nearest": {{"method": "GET", "url": "{origin}/file.txt"}}' in events


def test_a_run_removes_what_a_killed_run_left_in_the_temp_dir(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    stale = temp / "fetchproxy-run-x1y2z3" / "ca"
    stale.mkdir(parents=True)
    (stale / "mitmproxy-ca.pem").write_text("a killed run's CA key\n")
    (stale.parent / ".run-lock").write_text("")  # its run's flock went with the run
    (tmp_path / "fetchproxy.lock.toml").write_text("version = 1\n")
    result = fetchproxy(tmp_path, "replay", "--", "true", TMPDIR=str(temp))
    assert result.returncode == 0, result.stderr
    assert not stale.parent.exists()
    assert list(temp.iterdir()) == []  # its own directory is gone too


def test_the_builds_own_failure_is_the_exit_status(tmp_path: Path) -> None:
    result = fetchproxy(tmp_path, "record", "--", "sh", "-c", "exit 5")
    assert result.returncode == 5
    assert "the build failed (exit status 5): fetchproxy.lock.toml is unchanged" in result.stderr
    assert not (tmp_path / "fetchproxy.lock.toml").exists()
    assert not (tmp_path / "fetchproxy.lock.toml.journal").exists()  # it recorded nothing


def test_a_failed_build_leaves_the_lock_and_its_fetches_are_recoverable(
    tmp_path: Path, origin: str
) -> None:
    lock, journal = tmp_path / "fetchproxy.lock.toml", tmp_path / "fetchproxy.lock.toml.journal"
    first = fetchproxy(tmp_path, "record", "--", "curl", "-sSf", "-o", "a", f"{origin}/file.txt")
    assert first.returncode == 0, first.stderr
    previous = lock.read_bytes()

    def failing(*paths: str, keep: bool = False) -> None:
        build = "; ".join(f"curl -sS -o /dev/null {origin}{path}" for path in paths) + "; exit 5"
        failed = fetchproxy(
            tmp_path, "record", *(["--keep"] if keep else []), "--", "sh", "-c", build
        )
        assert failed.returncode == 5, failed.stderr
        assert (
            "the build failed (exit status 5): fetchproxy.lock.toml is unchanged" in failed.stderr
        )
        assert "`fetchproxy lock recover --lock fetchproxy.lock.toml` makes that" in failed.stderr
        assert lock.read_bytes() == previous  # a failed build does not rewrite the lock
        assert journal.exists()
        again = fetchproxy(tmp_path, "record", "--", "true")
        assert again.returncode == 2  # the journal waits for a decision
        assert "a record that was interrupted or failed left this journal" in again.stderr

    def urls() -> list[str]:
        return [fetch.key.url for fetch in load_lock(lock).fetches]

    failing("/gone")  # a fresh record: recovering makes the lock what it fetched
    recovered = fetchproxy(tmp_path, "lock", "recover")
    assert recovered.returncode == 0, recovered.stderr
    assert "recovered 1 fetch from fetchproxy.lock.toml.journal\n" in recovered.stdout
    assert urls() == [f"{origin}/gone"]
    assert not journal.exists()
    previous = lock.read_bytes()

    failing("/gone", "/other", keep=True)  # --keep: recovering adds to the lock, removes nothing
    recovered = fetchproxy(tmp_path, "lock", "recover")
    assert recovered.returncode == 0, recovered.stderr
    assert "recovered 1 fetch from fetchproxy.lock.toml.journal on top of its 1 entry (--keep)" in (
        recovered.stdout
    )
    assert urls() == [f"{origin}/gone", f"{origin}/other"]


@pytest.mark.parametrize("through", ["a hard link in the sandbox", "the lock, unsandboxed"])
def test_a_failed_build_that_changed_the_lock_is_not_called_unchanged(
    tmp_path: Path, through: str
) -> None:
    """The lock is read-only to the build by its path, but a hard link to it in the working
    directory is a path the build may write, and an unsandboxed build writes the lock itself:
    when such a build fails, record leaves the lock and says it changed, not that it is
    unchanged."""
    lock = tmp_path / "fetchproxy.lock.toml"
    assert fetchproxy(tmp_path, "record", "--", "true").returncode == 0
    before = lock.read_bytes()
    if through == "a hard link in the sandbox":
        (tmp_path / "alias.toml").hardlink_to(lock)
        args = ["record", "--", "sh", "-c", "echo '# edited' >> alias.toml; exit 4"]
    else:
        args = [
            "record",
            "--no-sandbox",
            "--",
            "sh",
            "-c",
            "echo '# edited' >> " + str(lock) + "; exit 4",
        ]
    result = fetchproxy(tmp_path, *args)
    assert result.returncode == 4, result.stderr
    assert lock.read_bytes() == before + b"# edited\n"  # the build's change, and only that
    assert (
        "fetchproxy: the build failed (exit status 4): fetchproxy left fetchproxy.lock.toml as it "
        "was, but it changed during the run (not by fetchproxy): check it before you commit it\n"
    ) in result.stderr
    assert "is unchanged" not in result.stderr


def test_a_build_stopped_by_a_signal_leaves_the_lock(tmp_path: Path, origin: str) -> None:
    build = f"curl -sSf -o a {origin}/file.txt; kill -INT $$"
    result = fetchproxy(tmp_path, "record", "--", "sh", "-c", build, prefix=SIGINT_AT_ITS_DEFAULT)
    assert result.returncode == 128 + signal.SIGINT, result.stderr
    assert "the build was stopped by SIGINT: fetchproxy.lock.toml is unchanged" in result.stderr
    assert not (tmp_path / "fetchproxy.lock.toml").exists()
    assert (tmp_path / "fetchproxy.lock.toml.journal").exists()
    (tmp_path / "fetchproxy.lock.toml.journal").unlink()  # to record afresh
    unnamed = fetchproxy(tmp_path, "record", "--", "sh", "-c", "kill -s 40 $$")
    assert unnamed.returncode == 128 + 40, unnamed.stderr  # a real-time signal has no name
    assert "the build was stopped by signal 40: fetchproxy.lock.toml is unchanged" in (
        unnamed.stderr
    )


def test_what_record_cannot_write_or_read_stops_it_before_the_build(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a file where a directory should be\n")
    lock = tmp_path / "fetchproxy.lock.toml"
    cases = [
        (("--store", str(not_a_dir)), f"cannot create a temp file in {not_a_dir}/tmp"),
        (("--lock", str(not_a_dir / "app.lock.toml")), f"cannot write {not_a_dir}/app.lock.toml"),
        (("--log", str(not_a_dir / "log.jsonl")), f"cannot write {not_a_dir}/log.jsonl"),
    ]
    for args, message in cases:
        result = fetchproxy(tmp_path, "record", *args, "--", "touch", "built")
        assert result.returncode == 2, result.stderr
        assert message in result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "built").exists()  # the build never ran
    lock.write_text("version = 1\n")
    bad_log = ("--log", str(not_a_dir / "log.jsonl"))
    for mode in ("replay", "record"):  # replay writes its event log too
        result = fetchproxy(tmp_path, mode, *bad_log, "--", "touch", "built")
        assert result.returncode == 2, result.stderr
        assert f"cannot write {not_a_dir}/log.jsonl: " in result.stderr
        assert "the event log goes elsewhere with --log PATH" in result.stderr
        assert not (tmp_path / "built").exists()
    for text, message in (
        ("version = 2\n", "fetchproxy.lock.toml:1: version: unknown lock version 2"),
        ("version = 1\n[[fetch]\n", "fetchproxy.lock.toml:2"),
    ):
        lock.write_text(text)
        result = fetchproxy(tmp_path, "record", "--", "touch", "built")
        assert result.returncode == 2, result.stderr
        assert message in result.stderr
        assert "record does not overwrite a lock it cannot read" in result.stderr
        assert lock.read_text() == text
        assert not (tmp_path / "built").exists()


def test_bad_lock_is_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "fetchproxy.lock.toml").write_text("version = 7\n")
    result = fetchproxy(tmp_path, "replay", "--", "true")
    assert result.returncode == 2
    assert "fetchproxy.lock.toml:1: version: unknown lock version 7" in result.stderr


def test_a_build_is_required(tmp_path: Path) -> None:
    result = fetchproxy(tmp_path, "record")
    assert result.returncode == 2
    assert "needs a build: fetchproxy record -- BUILD..." in result.stderr


def test_sigterm_is_forwarded_to_the_build_and_the_lock_is_left_as_it_was(
    tmp_path: Path, origin: str
) -> None:
    before = namespaces_and_veths()
    build = (
        f"curl -sSf -o got.txt {origin}/file.txt; "
        "trap 'echo build got TERM; exit 7' TERM; touch ready; "
        "while :; do sleep 0.1; done"
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fetchproxy",
            *with_test_origins(["record", "--", "sh", "-c", build]),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FETCHPROXY_STORE": str(tmp_path / "store")},
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the build never got ready"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 7, err
    assert "build got TERM" in out
    assert "fetchproxy: recorded 1 fetch (2.1 KiB) for fetchproxy.lock.toml" in err
    assert not (tmp_path / "fetchproxy.lock.toml").exists()  # an interrupted record writes none
    assert f'"url": "{origin}/file.txt"' in (tmp_path / "fetchproxy.lock.toml.journal").read_text()
    assert namespaces_and_veths() == before


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param([], id="root"),
        pytest.param(
            ["setpriv", "--bounding-set=-all,+setfcap", "--inh-caps=-all", "--no-new-privs"],
            id="user",
        ),
    ],
)
def test_on_a_terminal_the_summary_starts_a_line_of_its_own(
    tmp_path: Path, prefix: list[str]
) -> None:
    """A build whose output ends mid-line (Maven's does) does not get fetchproxy's summary
    glued to its last line: the sandbox relays the build's terminal, so it knows."""
    (tmp_path / "fetchproxy.lock.toml").write_text("version = 1\n")
    env = {**os.environ, "FETCHPROXY_STORE": str(tmp_path / "store")}

    def on_a_terminal(build: str) -> str:
        controller, device = os.openpty()
        try:
            process = subprocess.Popen(
                ["setsid", "--ctty", *prefix, sys.executable, "-m", "fetchproxy", "replay",
                 "--", "sh", "-c", build],
                cwd=tmp_path, env=env, stdin=device, stdout=device, stderr=device,
            )  # fmt: skip
            assert process.wait(timeout=60) == 0
            os.close(device)
            device = -1
            shown = b""
            while True:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: nothing holds the terminal any more, all of it read
                    break
                if not chunk:
                    break
                shown += chunk
            return shown.decode()
        finally:
            os.close(controller)
            if device >= 0:
                os.close(device)

    cut = on_a_terminal("printf 'no newline at the end'")
    assert "no newline at the end\r\nfetchproxy: " in cut, cut
    whole = on_a_terminal("printf 'a whole line\\n'")
    # no empty line after a whole one (each terminal turns its \n into \r\n: \r\r\n)
    assert re.search(r"a whole line\r+\nfetchproxy: ", whole), whole

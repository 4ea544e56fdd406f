"""``store push``, ``store pull``, ``store gc --remote`` and ``serve`` with a remote, as users run
them, against a real RGW: summaries, progress on a terminal, failures named by the lock's entries,
where the remote comes from (option, variable, fetchproxy.toml), and never a secret."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.file import load_lock, write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.store import DiskStore
from fetchproxy.store.remote_url import RemoteURL
from tests.support.cli import run_fetchproxy
from tests.support.s3 import S3Endpoint, make_remote, use_credentials
from tests.sync.origins import FileOrigin

MiB = 1 << 20


def make_lock(path: Path, store: DiskStore, bodies: dict[str, bytes]) -> Lock:
    """A lock of ``GET https://files.example.org/NAME`` entries whose bodies are in ``store``."""
    fetches = []
    for name, body in bodies.items():
        digest = store.put(body)
        key = RequestKey(method="GET", url=f"https://files.example.org/{name}")
        fetches.append(Fetch(key=key, status=200, digest=digest, size=len(body)))
    lock = Lock.from_fetches(fetches)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_lock(path, lock)
    return lock


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "FETCHPROXY_REMOTE"}
    return run_fetchproxy(*args, cwd=cwd, env={**base, **env}, test_origins=False)


def no_secret(s3: S3Endpoint, done: subprocess.CompletedProcess[str]) -> None:
    for secret in s3.secrets:
        assert secret not in done.stdout + done.stderr


def test_push_then_pull_elsewhere(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL
) -> None:
    here = DiskStore(tmp_path / "here")
    lock = make_lock(tmp_path / "fetchproxy.lock.toml", here, {"a": b"a" * 5000, "b": b"bb"})
    remote = str(remote_url)
    pushed = cli("store", "push", "--store", str(here.root), "--remote", remote, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith(f"fetchproxy: pushed 2 blobs (4.9 KiB) to {remote} in ")
    assert pushed.stderr == ""  # no terminal: no progress, only the summary
    again = cli("store", "push", "--store", str(here.root), "--remote", remote, cwd=tmp_path)
    assert again.returncode == 0
    assert "pushed 0 blobs (0 B)" in again.stdout
    assert again.stdout.rstrip().endswith("; 2 already there")

    # Another machine: the remote from the environment, the store created by the pull.
    there = tmp_path / "there"
    pulled = cli("store", "pull", "--store", str(there), cwd=tmp_path, FETCHPROXY_REMOTE=remote)
    assert pulled.returncode == 0, pulled.stderr
    assert f"pulled 2 blobs (4.9 KiB) from {remote}" in pulled.stdout
    assert sorted(DiskStore(there).digests()) == sorted(lock.digests())
    twice = cli("store", "pull", "--store", str(there), cwd=tmp_path, FETCHPROXY_REMOTE=remote)
    assert "pulled 0 blobs" in twice.stdout
    assert "2 in the store already" in twice.stdout
    no_secret(aws_env, pushed)
    no_secret(aws_env, pulled)


def test_the_remote_from_fetchproxy_toml_and_failures_named_by_entry(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL
) -> None:
    here = DiskStore(tmp_path / "here")
    project = tmp_path / "project"
    make_lock(project / "fetchproxy.lock.toml", here, {"kept": b"kept bytes"})
    (project / "fetchproxy.toml").write_text(f'[store]\nremote = "{remote_url}"\n')
    pushed = cli("store", "push", "--store", str(here.root), cwd=project)
    assert pushed.returncode == 0, pushed.stderr
    assert f"to {remote_url}" in pushed.stdout

    # A lock naming a blob neither the local store nor the remote holds.
    other = DiskStore(tmp_path / "elsewhere")
    lonely = tmp_path / "lonely" / "fetchproxy.lock.toml"
    lock = make_lock(lonely, other, {"lost.tar.gz": b"nowhere to be found"})
    [lost] = lock.fetches
    failed = cli("store", "push", "--lock", str(lonely), "--store", str(here.root),
                 "--remote", str(remote_url), cwd=tmp_path)  # fmt: skip
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[:2] == [
        f"fetchproxy: error: cannot push 1 of 1 blob to {remote_url}:",
        f"  GET https://files.example.org/lost.tar.gz ({lost.digest}): not in the local store "
        f"{here.root}, nor in {remote_url}",
    ]
    assert f"`fetchproxy store push --lock {lonely}`" in failed.stderr

    missing = cli("store", "pull", "--lock", str(lonely), "--store", str(tmp_path / "new"),
                  "--remote", str(remote_url), cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 1
    assert f"cannot pull 1 of 1 blob from {remote_url}:" in missing.stderr
    assert "GET https://files.example.org/lost.tar.gz: cannot download " in missing.stderr
    assert "no such object (HTTP 404 NoSuchKey)" in missing.stderr
    assert "Nothing that failed was put in the local store." in missing.stderr

    nowhere = cli("store", "pull", "--lock", str(lonely), cwd=tmp_path)
    assert nowhere.returncode == 2
    assert "no remote store: give --remote s3://BUCKET/PREFIX" in nowhere.stderr
    bad = cli("store", "pull", "--remote", "s3://Bad_Bucket/x", cwd=tmp_path)
    assert bad.returncode == 2
    assert "is not a valid bucket name" in bad.stderr


def test_progress_on_a_terminal(tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL) -> None:
    here = DiskStore(tmp_path / "here")
    make_lock(tmp_path / "fetchproxy.lock.toml", here, {"big": os.urandom(40 * MiB)})
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fetchproxy", "store", "push", "--store", str(here.root),
             "--remote", str(remote_url)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=terminal, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        while select.select([controller], [], [], 0.5)[0]:
            try:
                chunk = os.read(controller, 1 << 16)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0, shown
    text = shown.decode()
    # The first report is drawn whenever it comes (the blob half sent or all of it, as fast as
    # the store takes it); what a line says is pinned in test_progress.py.
    assert re.fullmatch(
        r"(\r\x1b\[Kfetchproxy: push: [01]/1 blobs, [0-9.]+ [KMG]?i?B of 40\.0 MiB, "
        r"[0-9.]+ [KMG]?i?B/s)+\r\x1b\[K",  # redrawn in place, cleared before the summary
        text,
    ), text
    assert "pushed 1 blob (40.0 MiB)" in done.stdout


def test_remote_gc_keeps_what_the_locks_name_and_the_young(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "store")
    old = make_lock(tmp_path / "old" / "fetchproxy.lock.toml", store, {"a": b"A", "b": b"B"})
    kept = make_lock(tmp_path / "kept" / "fetchproxy.lock.toml", store, {"b": b"B", "c": b"C"})
    remote = make_remote(remote_url)
    remote.push([*old.digests(), *kept.digests()], store)
    foreign = f"{remote_url.prefix}/blake3/README"
    remote.client._client.put_object(Bucket=remote_url.bucket, Key=foreign, Body=b"hello")
    [gone] = old.digests() - kept.digests()
    keep = str(tmp_path / "kept" / "fetchproxy.lock.toml")

    young = cli("store", "gc", "--remote", str(remote_url), "--keep-lock", keep, cwd=tmp_path)
    assert young.returncode == 0, young.stderr
    assert "deleted 0 objects (0 B); kept 2 objects used by 1 lock, 1 object newer than the " \
        "grace period (7 d) and 1 other key" in young.stdout  # fmt: skip

    time.sleep(1.1)  # object times have a resolution of one second
    dry = cli("store", "gc", "--remote", "--keep-lock", keep, "--grace", "0", "--dry-run",
              cwd=tmp_path, FETCHPROXY_REMOTE=str(remote_url))  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert f"would delete {remote_url.key_of(gone)} (1 B)" in dry.stdout
    assert f"kept {foreign}: it names no blob" in dry.stdout
    assert {o.digest for o in remote.list_objects()} >= {gone}

    # gc runs with delete rights; a reader's are refused, and nothing goes.
    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=aws_env.reader_secret)
    refused = cli("store", "gc", "--remote", str(remote_url), "--keep-lock", keep, "--grace", "0",
                  cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2
    assert "AccessDenied" in refused.stderr
    use_credentials(monkeypatch, aws_env, key=aws_env.writer_key, secret=aws_env.writer_secret)
    done = cli("store", "gc", "--remote", str(remote_url), "--keep-lock", keep, "--grace", "0",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"deleted {remote_url.key_of(gone)} (1 B)" in done.stdout
    left = {o.digest for o in remote.list_objects()}
    assert left == {*kept.digests(), None}  # the kept lock's blobs, and the foreign key

    empty = tmp_path / "empty" / "fetchproxy.lock.toml"
    empty.parent.mkdir()
    write_lock(empty, Lock())
    by_age = cli("store", "gc", "--remote", str(remote_url), "--keep-lock", str(empty),
                 cwd=tmp_path)  # fmt: skip
    assert by_age.returncode == 2
    assert "refusing to delete by age alone" in by_age.stderr
    no_secret(aws_env, done)


def _listening(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """Wait for serve's ``listening on`` line; the port, and the lines before it."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("fetchproxy: listening on http://127.0.0.1:"), line
    return int(line.rsplit(":", 1)[1]), []


def test_serve_record_uploads_and_serve_replay_pulls_before_it_listens(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL
) -> None:
    body = os.urandom(300_000)
    env = {k: v for k, v in os.environ.items() if k != "FETCHPROXY_REMOTE"}
    with FileOrigin({"/f.bin": body}) as origin:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "fetchproxy", "serve", "record", "--listen", "127.0.0.1:0",
             "--store", str(tmp_path / "store-a"), "--remote", str(remote_url)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            port, _ = _listening(recorder)
            proxy = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"})
            with urllib.request.build_opener(proxy).open(origin.url("/f.bin"), timeout=30) as got:
                assert got.read() == body
        finally:
            recorder.send_signal(signal.SIGTERM)
            _, err = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, err
    assert f"uploaded 1 blob (293.0 KiB) to {remote_url}" in err
    assert {o.digest for o in make_remote(remote_url).list_objects()} >= {digest_bytes(body)}

    fresh = tmp_path / "store-b"
    replayer = subprocess.Popen(
        [sys.executable, "-m", "fetchproxy", "serve", "replay", "--listen", "127.0.0.1:0",
         "--store", str(fresh), "--remote", str(remote_url)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _listening(replayer)
        # It listens only once the blob is in the store, verified.
        assert DiskStore(fresh).contains(Digest(digest_bytes(body)))
    finally:
        replayer.send_signal(signal.SIGTERM)
        _, err = replayer.communicate(timeout=60)
    assert replayer.returncode == 0, err
    assert f"pulled 1 blob (293.0 KiB) from {remote_url}" in err.splitlines()[0]

    make_remote(remote_url).delete([remote_url.key_of(Digest(digest_bytes(body)))])
    missing = subprocess.run(
        [sys.executable, "-m", "fetchproxy", "serve", "replay", "--listen", "127.0.0.1:0",
         "--store", str(tmp_path / "store-c"), "--remote", str(remote_url)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert "listening" not in missing.stdout
    assert "no such object (HTTP 404 NoSuchKey)" in missing.stderr
    assert load_lock(tmp_path / "fetchproxy.lock.toml").digests() == {digest_bytes(body)}

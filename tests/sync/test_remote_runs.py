"""``record`` and ``replay -- BUILD`` with a remote store: curl in the real sandbox, a real RGW.

Record on one machine (a store, a working directory), replay on another (a fresh store, another
``$HOME``, only the lock copied) with the origin stopped; two records pushing the same blobs at
once; an upload that fails at the end of a record; read-only credentials (replay pulls, record
refuses before the build); and what stops a replay before its build starts: the store going away
mid-pull, a wrong secret, an object replaced by other bytes under its digest's name. The origin
listens on the host's loopback (127.0.0.70), so a sandboxed record must be allowed to reach it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.lock.file import load_lock
from fetchproxy.store import DiskStore
from fetchproxy.store.remote_url import RemoteURL
from tests.store.relay import Relay
from tests.support.cli import run_fetchproxy
from tests.support.s3 import S3Endpoint, make_remote, use_credentials
from tests.sync.origins import HOST, FileOrigin

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

MiB = 1 << 20
FILES = {"/a.bin": os.urandom(200_000), "/b.bin": os.urandom(3 * MiB), "/c.txt": b"small\n"}
ALLOW = ("--allow-origin", HOST)


def build(origin: FileOrigin, paths: list[str] | None = None, then: str = "") -> list[str]:
    """A build that fetches ``paths`` from ``origin`` with curl into the working directory."""
    fetches = "; ".join(
        f"curl -sSf --max-time 30 -o {path.strip('/')}.out {origin.url(path)}"
        for path in (paths or list(FILES))
    )
    return ["--", "sh", "-ec", f"touch started; {fetches}; {then or 'true'}"]


def fetchproxy(
    cwd: Path, *args: str, store: Path, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy ARGS`` as a user runs it in ``cwd``, with ``store`` as the default store."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("FETCHPROXY_REMOTE", "XDG_CACHE_HOME")}
    env["FETCHPROXY_STORE"] = str(store)
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
    return run_fetchproxy(*args, cwd=cwd, env=env, test_origins=False, timeout=300)


def assert_clean(store: DiskStore) -> None:
    for digest in store.digests():
        store.verify(digest)
    assert store.temp_files() == []


def outputs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.out"))}


def no_secret(s3: S3Endpoint, *texts: str) -> None:
    for text in texts:
        for secret in s3.secrets:
            assert secret not in text


@pytest.fixture
def origin() -> Iterator[FileOrigin]:
    with FileOrigin(FILES) as server:
        yield server


@pytest.fixture
def recorded(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL, origin: FileOrigin
) -> Path:
    """A record on the first machine, with the remote: its working directory."""
    here = tmp_path / "here"
    done = fetchproxy(here, "record", *ALLOW, "--remote", str(remote_url), *build(origin),
                      store=tmp_path / "store-here")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"uploaded 3 blobs (3.2 MiB) to {remote_url}" in done.stderr
    no_secret(aws_env, done.stdout, done.stderr)
    return here


def test_record_here_replay_on_a_fresh_machine_with_the_origin_stopped(  # noqa: PLR0917 -- fixtures
    tmp_path: Path,
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    origin: FileOrigin,
    recorded: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lock = load_lock(recorded / "fetchproxy.lock.toml")
    held = {obj.digest for obj in make_remote(remote_url).list_objects()}
    assert lock.digests() <= held  # every blob the lock names, before the lock was written
    origin.stop()
    asked = len(origin.seen)

    there = tmp_path / "there"
    there.mkdir()
    shutil.copy(recorded / "fetchproxy.lock.toml", there)
    # Replay jobs get read-only credentials.
    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=aws_env.reader_secret)
    store = tmp_path / "store-there"
    done = fetchproxy(there, "replay", "--remote", str(remote_url), *build(origin),
                      store=store, home=tmp_path / "home-there")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"pulled 3 blobs (3.2 MiB) from {remote_url}" in done.stderr
    assert "served 3 fetches (3.2 MiB)" in done.stderr
    assert outputs(there) == outputs(recorded)
    assert outputs(there) == {f"{p.strip('/')}.out": body for p, body in FILES.items()}
    assert len(origin.seen) == asked  # the origin heard nothing of the replay
    assert_clean(DiskStore(store))
    no_secret(aws_env, done.stdout, done.stderr)

    again = fetchproxy(there, "replay", "--remote", str(remote_url), *build(origin),
                       store=store, home=tmp_path / "home-there")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "pulled" not in again.stderr  # everything local: no transfer, no client


def test_two_records_pushing_the_same_blobs_at_once(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL, origin: FileOrigin
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FETCHPROXY_REMOTE"}
    runs = []
    for name in ("one", "two"):
        cwd = tmp_path / name
        cwd.mkdir()
        argv = [sys.executable, "-m", "fetchproxy", "record", *ALLOW, "--remote", str(remote_url),
                "--store", str(tmp_path / f"store-{name}"), *build(origin)]  # fmt: skip
        runs.append(
            subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results = [run.communicate(timeout=300) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err
        assert f"to {remote_url}" in err
    one = load_lock(tmp_path / "one" / "fetchproxy.lock.toml")
    two = load_lock(tmp_path / "two" / "fetchproxy.lock.toml")
    assert one.digests() == two.digests()
    fresh = DiskStore(tmp_path / "fresh")
    make_remote(remote_url).pull(one.digests(), fresh)
    assert set(fresh.digests()) == set(one.digests())
    assert_clean(fresh)


def test_a_failed_upload_keeps_the_lock_and_the_journal_and_names_the_blobs(
    tmp_path: Path,
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    origin: FileOrigin,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = tmp_path / "here"
    store = tmp_path / "store"
    first = fetchproxy(here, "record", "--no-remote", *ALLOW, *build(origin, ["/c.txt"]),
                       store=store)  # fmt: skip
    assert first.returncode == 0, first.stderr
    lock_path = here / "fetchproxy.lock.toml"
    before = lock_path.read_bytes()

    with Relay(aws_env.port) as relay:
        use_credentials(monkeypatch, aws_env, key=aws_env.writer_key,
                        secret=aws_env.writer_secret, endpoint=relay.endpoint)  # fmt: skip
        # The build tells when it has fetched, then waits: the store goes away meanwhile.
        wait = (
            "touch fetched; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; "
            "i=$((i+1)); done"
        )
        argv = [sys.executable, "-m", "fetchproxy", "record", *ALLOW, "--remote", str(remote_url),
                "--store", str(store), *build(origin, ["/a.bin", "/b.bin"], then=wait)]  # fmt: skip
        run = subprocess.Popen(argv, cwd=here, env=dict(os.environ), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not (here / "fetched").exists():
                assert run.poll() is None, run.communicate()
                assert time.monotonic() < deadline, "the build did not fetch"
                time.sleep(0.05)
            relay.stop()
            (here / "go").touch()
            _, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert run.returncode == 1, err
    assert lock_path.read_bytes() == before
    journal = here / "fetchproxy.lock.toml.journal"
    assert journal.exists()
    assert f"2 of 2 blobs could not be uploaded to {remote_url}, so the lock would name blobs " \
        "the remote lacks: fetchproxy.lock.toml is unchanged" in err  # fmt: skip
    for path in ("/a.bin", "/b.bin"):
        assert f"GET {origin.url(path)}" in err
    assert "the connection to the store failed" in err
    assert "`fetchproxy lock recover --lock fetchproxy.lock.toml`" in err
    no_secret(aws_env, err)

    # Once the store is back: recover, then push — the remote holds what the lock names.
    use_credentials(monkeypatch, aws_env, key=aws_env.writer_key, secret=aws_env.writer_secret)
    assert fetchproxy(here, "lock", "recover", store=store).returncode == 0
    pushed = fetchproxy(here, "store", "push", "--remote", str(remote_url), store=store)
    assert pushed.returncode == 0, pushed.stderr
    assert f"pushed 2 blobs (3.2 MiB) to {remote_url}" in pushed.stdout
    held = {obj.digest for obj in make_remote(remote_url).list_objects()}
    assert load_lock(lock_path).digests() <= held


def test_read_only_credentials_cannot_record_and_the_build_never_starts(
    tmp_path: Path,
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    origin: FileOrigin,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=aws_env.reader_secret)
    here = tmp_path / "here"
    done = fetchproxy(here, "record", *ALLOW, "--remote", str(remote_url), *build(origin),
                      store=tmp_path / "store")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"record cannot upload to the remote store {remote_url}, so nothing was started" in (
        done.stderr
    )
    assert "HTTP 403 AccessDenied" in done.stderr
    assert "read-only credentials cannot push" in done.stderr
    assert not (here / "started").exists()
    assert not (here / "fetchproxy.lock.toml.journal").exists()
    lock = here / "fetchproxy.lock.toml"
    assert not lock.exists() or lock.stat().st_size == 0
    assert origin.seen == []
    no_secret(aws_env, done.stdout, done.stderr)


@pytest.fixture
def big_lock(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL
) -> tuple[Path, dict[str, bytes]]:
    """A lock of 6 x 3 MiB + 10 small files recorded with the remote; the origin stopped."""
    files = {f"/big{i}.bin": os.urandom(3 * MiB) for i in range(6)}
    files |= {f"/small{i}.txt": os.urandom(4096) for i in range(10)}
    with FileOrigin(files) as origin:
        done = fetchproxy(tmp_path / "here", "record", *ALLOW, "--remote", str(remote_url),
                          *build(origin, list(files)), store=tmp_path / "store-here")  # fmt: skip
        assert done.returncode == 0, done.stderr
        argv = build(origin, list(files))
    there = tmp_path / "there"
    there.mkdir()
    shutil.copy(tmp_path / "here" / "fetchproxy.lock.toml", there)
    (there / "build").write_text(argv[-1])
    return there, files


def test_the_store_stopping_mid_pull_stops_the_replay_before_its_build(
    tmp_path: Path,
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    big_lock: tuple[Path, dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    there, files = big_lock
    script = (there / "build").read_text()
    store = tmp_path / "store-there"
    with Relay(aws_env.port, stop_after=5 * MiB) as relay:
        use_credentials(monkeypatch, aws_env, key=aws_env.reader_key,
                        secret=aws_env.reader_secret, endpoint=relay.endpoint)  # fmt: skip
        done = fetchproxy(there, "replay", "--remote", str(remote_url), "--", "sh", "-ec", script,
                          store=store)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "blobs the lock names are not in the store" in done.stderr
    assert f"could not be pulled from {remote_url}; the build was not started" in done.stderr
    assert relay.endpoint in done.stderr
    assert "Run it again once the store is reachable" in done.stderr
    assert not (there / "started").exists()
    pulled = DiskStore(store)
    assert_clean(pulled)  # nothing half-published: what is there verifies, no temp file
    assert len(list(pulled.digests())) < len(files)

    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=aws_env.reader_secret)
    again = fetchproxy(there, "replay", "--remote", str(remote_url), "--", "sh", "-ec", script,
                       store=store)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "pulled" in again.stderr
    assert outputs(there) == {f"{p.strip('/')}.out": body for p, body in files.items()}
    assert_clean(pulled)


def test_a_wrong_secret_stops_the_replay_before_its_build(
    tmp_path: Path,
    aws_env: S3Endpoint,
    remote_url: RemoteURL,
    recorded: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "WRONG" + aws_env.reader_secret[5:]
    use_credentials(monkeypatch, aws_env, key=aws_env.reader_key, secret=wrong)
    there = tmp_path / "there"
    there.mkdir()
    shutil.copy(recorded / "fetchproxy.lock.toml", there)
    done = fetchproxy(there, "replay", "--remote", str(remote_url), "--", "touch", "started",
                      store=tmp_path / "store-there")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "SignatureDoesNotMatch" in done.stderr
    assert "the secret key does not belong to the access key" in done.stderr
    assert "the build was not started" in done.stderr
    assert not (there / "started").exists()
    assert not (tmp_path / "store-there" / "blake3").exists()
    assert wrong not in done.stderr + done.stdout
    no_secret(aws_env, done.stdout, done.stderr)


def test_an_object_replaced_with_other_bytes_is_refused_and_never_published(
    tmp_path: Path, aws_env: S3Endpoint, remote_url: RemoteURL, recorded: Path
) -> None:
    lock = load_lock(recorded / "fetchproxy.lock.toml")
    target = next(f for f in lock.fetches if f.key.url.endswith("/a.bin"))
    forged = os.urandom(target.size)  # the right size: only the bytes give it away
    remote = make_remote(remote_url)
    key = remote_url.key_of(target.digest)
    remote.client._client.put_object(Bucket=remote_url.bucket, Key=key, Body=forged)
    there = tmp_path / "there"
    there.mkdir()
    shutil.copy(recorded / "fetchproxy.lock.toml", there)
    store = DiskStore(tmp_path / "store-there")
    done = fetchproxy(there, "replay", "--remote", str(remote_url), "--", "touch", "started",
                      store=store.root)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"GET {target.key.url}: {remote_url.location(key)} does not hold blob" in done.stderr
    assert f"its bytes hash to {digest_bytes(forged)}" in done.stderr
    assert "was refused and not put in the local store" in done.stderr
    assert not (there / "started").exists()
    assert not store.contains(target.digest)
    assert not store.contains(Digest(digest_bytes(forged)))
    assert_clean(store)

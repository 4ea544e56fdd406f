"""Crashes and concurrency: a record killed at any moment loses nothing; two records share a store.

`fetchproxy serve record` runs as a real subprocess; it is SIGKILLed at random points while
clients fetch through it. After every kill the previous lock is untouched, every blob in the
store hashes to its name, every journal entry's blob is in the store, and `lock recover` turns
the journal into a valid lock.
"""

from __future__ import annotations

import http.client
import http.server
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.lock.file import load_lock
from fetchproxy.lock.journal import journal_path, read_journal
from fetchproxy.review.storeverify import verify_store
from fetchproxy.store import DiskStore
from tests.support.cli import run_fetchproxy

BODY_SIZE = 512 * 1024


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = random.Random(self.path).randbytes(BODY_SIZE)
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), 64 * 1024):
            self.wfile.write(body[start : start + 64 * 1024])

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _serve_record(lock: Path, store: Path) -> list[str]:
    """The command line of `fetchproxy serve record` on a free port of 127.0.0.1."""
    serve = [sys.executable, "-m", "fetchproxy", "serve", "record", "--listen", "127.0.0.1:0"]
    return [*serve, "--lock", str(lock), "--store", str(store)]


class Recorder:
    """One `fetchproxy serve record` process."""

    def __init__(self, tmp: Path, lock: Path, store: Path) -> None:
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["XDG_DATA_HOME"] = str(tmp / "data")
        self.stderr = tmp / f"serve-{time.monotonic_ns()}.err"
        with self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(
                _serve_record(lock, store), stdout=subprocess.PIPE, stderr=stderr, env=env
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        assert line.startswith("fetchproxy: listening on http://"), self.stderr.read_text()
        self.url = line.split(" on ", 1)[1].strip()

    @staticmethod
    def start_failure(tmp: Path, lock: Path, store: Path) -> str:
        """The stderr of a record that must refuse to start (exit 2)."""
        result = subprocess.run(
            _serve_record(lock, store),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "XDG_DATA_HOME": str(tmp / "data")},
        )
        assert result.returncode == 2, result.stderr
        return result.stderr

    def fetch(self, url: str) -> bytes | None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": self.url}))
        try:
            with opener.open(url, timeout=20) as response:
                return bytes(response.read())
        except (OSError, http.client.HTTPException):
            return None  # the proxy was killed under us

    def close(self, sig: int) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        status = self.process.wait(timeout=60)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return status


def fetch_all(recorder: Recorder, urls: list[str]) -> list[bytes | None]:
    results: list[bytes | None] = [None] * len(urls)

    def one(i: int) -> None:
        results[i] = recorder.fetch(urls[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(urls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def assert_store_consistent(store: Path) -> None:
    report = verify_store(DiskStore(store))
    assert report.clean, report.bad


def test_sigkill_at_random_points_loses_nothing(tmp_path: Path, origin: str) -> None:
    lock = tmp_path / "app.lock.toml"
    store = tmp_path / "store"
    first = Recorder(tmp_path, lock, store)
    assert all(fetch_all(first, [f"{origin}/base/{i}" for i in range(3)]))
    assert first.close(signal.SIGTERM) == 0
    previous = lock.read_bytes()
    assert len(load_lock(lock)) == 3

    rnd = random.Random(20261129)
    recovered_rounds = 0
    for round_ in range(8):
        recorder = Recorder(tmp_path, lock, store)
        urls = [f"{origin}/round{round_}/{i}" for i in range(6)]
        clients = threading.Thread(target=fetch_all, args=(recorder, urls))
        clients.start()
        time.sleep(rnd.uniform(0.0, 0.4))
        assert recorder.close(signal.SIGKILL) == -signal.SIGKILL
        clients.join()

        assert lock.read_bytes() == previous  # the previous lock is intact
        assert_store_consistent(store)
        journal = journal_path(lock)
        if not journal.exists():  # killed before it stored a fetch: nothing to recover
            continue
        recovered_rounds += 1
        journalled = list(read_journal(journal))
        for fetch in journalled:  # every journalled body is in the store
            assert DiskStore(store).contains(fetch.digest)
        refused = Recorder.start_failure(tmp_path, lock, store)
        assert f"{journal}: a record that was interrupted or failed left this journal" in refused

        recovered = run_fetchproxy("lock", "recover", "--lock", str(lock))
        assert recovered.returncode == 0, recovered.stderr
        assert not journal.exists()
        assert {f.key.url for f in load_lock(lock).fetches} == {f.key.url for f in journalled}
        previous = lock.read_bytes()
    assert recovered_rounds >= 4  # most runs were killed after their first fetch


def test_two_records_sharing_one_store(tmp_path: Path, origin: str) -> None:
    store = tmp_path / "store"
    a = Recorder(tmp_path, tmp_path / "a.lock.toml", store)
    b = Recorder(tmp_path, tmp_path / "b.lock.toml", store)
    shared = [f"{origin}/shared/{i}" for i in range(5)]
    results: dict[str, list[bytes | None]] = {}
    threads = [
        threading.Thread(target=lambda r=r, n=n: results.__setitem__(n, fetch_all(r, shared)))
        for r, n in ((a, "a"), (b, "b"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["a"] == results["b"]
    assert all(results["a"])
    assert a.close(signal.SIGTERM) == 0
    assert b.close(signal.SIGTERM) == 0
    lock_a = load_lock(tmp_path / "a.lock.toml")
    lock_b = load_lock(tmp_path / "b.lock.toml")
    assert lock_a.fetches == lock_b.fetches
    assert len(lock_a) == 5
    assert_store_consistent(store)
    assert sorted(DiskStore(store).digests()) == sorted(lock_a.digests())

"""Crashes and concurrency: a record killed at any moment loses nothing; two records share a store.

`fetchproxy serve record` runs as a real subprocess and is SIGKILLed while clients fetch
through it. The kill points are chosen, not timed: the origin sends half of each body and waits
on a gate per URL, the test opens N gates, waits until the journal holds those N fetches, and
kills. After every kill the previous lock is untouched, every blob in the store hashes to its
name, and `lock recover` makes exactly the N fetches the lock. (bench/crash_stress.py kills at
random moments instead, and checks the same invariants.)
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from fetchproxy.lock.file import load_lock
from fetchproxy.lock.journal import journal_path, read_journal
from fetchproxy.review.storeverify import verify_store
from fetchproxy.store import DiskStore
from tests.support.cli import run_fetchproxy

BODY_SIZE = 512 * 1024


class _Handler(http.server.BaseHTTPRequestHandler):
    """Bodies of BODY_SIZE bytes; under /gated/ the second half waits for the URL's gate."""

    protocol_version = "HTTP/1.1"
    gates: ClassVar[dict[str, threading.Event]] = {}

    def do_GET(self) -> None:
        body = random.Random(self.path).randbytes(BODY_SIZE)
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        half = len(body) // 2
        self.wfile.write(body[:half])
        self.wfile.flush()
        if self.path.startswith("/gated/"):
            gate = self.gates.setdefault(self.path, threading.Event())
            if not gate.wait(timeout=120):
                return
        self.wfile.write(body[half:])

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    _Handler.gates = {}
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


def journalled(lock: Path) -> list[str]:
    """The URLs the journal of ``lock`` holds (none while it is absent or empty)."""
    journal = journal_path(lock)
    if not journal.exists() or journal.stat().st_size == 0:
        return []
    return [fetch.key.url for fetch in read_journal(journal)]


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("stored", [0, 1, 3, 6])
def test_a_record_killed_after_n_fetches_keeps_exactly_those(
    tmp_path: Path, origin: str, stored: int
) -> None:
    lock = tmp_path / "app.lock.toml"
    store = tmp_path / "store"
    first = Recorder(tmp_path, lock, store)
    assert all(fetch_all(first, [f"{origin}/base/{i}" for i in range(3)]))
    assert first.close(signal.SIGTERM) == 0
    previous = lock.read_bytes()

    recorder = Recorder(tmp_path, lock, store)
    urls = [f"{origin}/gated/{i}" for i in range(6)]
    clients = threading.Thread(target=fetch_all, args=(recorder, urls))
    clients.start()
    wait_until(lambda: len(_Handler.gates) == len(urls), "every request reached the origin")
    for url in urls[:stored]:
        _Handler.gates[url.removeprefix(origin)].set()
        wanted = urls[: urls.index(url) + 1]

        def done(wanted: list[str] = wanted) -> bool:
            return sorted(journalled(lock)) == wanted

        wait_until(done, f"{url} journalled")
    assert recorder.close(signal.SIGKILL) == -signal.SIGKILL
    for gate in _Handler.gates.values():
        gate.set()
    clients.join()

    assert lock.read_bytes() == previous  # the previous lock is intact
    assert_store_consistent(store)
    assert sorted(journalled(lock)) == urls[:stored]
    if not stored:  # killed before its first fetch: an empty journal the next run removes
        assert journal_path(lock).stat().st_size == 0
        Recorder(tmp_path, lock, store).close(signal.SIGKILL)  # it started: nothing to recover
        return
    for fetch in read_journal(journal_path(lock)):  # every journalled body is in the store
        assert DiskStore(store).contains(fetch.digest)
    refused = Recorder.start_failure(tmp_path, lock, store)
    assert f"{journal_path(lock)}: a record that was interrupted or failed left" in refused
    recovered = run_fetchproxy("lock", "recover", "--lock", str(lock))
    assert recovered.returncode == 0, recovered.stderr
    assert not journal_path(lock).exists()
    assert sorted(f.key.url for f in load_lock(lock).fetches) == urls[:stored]


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

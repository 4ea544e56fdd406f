"""``fetchproxy serve`` as users run it: a subprocess, real clients, signals, startup failures."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetchproxy.lock.file import load_lock
from fetchproxy.lock.journal import journal_path
from fetchproxy.provenance.entry import entry_from_fetch
from fetchproxy.provenance.fetchset import fetch_set_digest
from tests.support.cli import run_fetchproxy
from tests.support.clients import curl, urlfetch, urllib_opener
from tests.support.origin import GZIP_WIRE, MEDIUM, SMALL, Origin, OriginPKI

LISTENING_RE = re.compile(r"fetchproxy: listening on http://127\.0\.0\.1:(\d+)\n")


@dataclass
class Serve:
    """A ``fetchproxy serve`` process and where its output goes."""

    process: subprocess.Popen[bytes]
    stderr_path: Path
    url: str = ""

    def wait_listening(self, timeout: float = 30) -> str:
        """The proxy URL from the first stdout line; fails if the process says nothing."""
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout), f"serve said nothing in {timeout} s: {self.stderr}"
        line = self.process.stdout.readline().decode()
        match = LISTENING_RE.fullmatch(line)
        assert match is not None, f"unexpected first line {line!r}; stderr: {self.stderr}"
        self.url = f"http://127.0.0.1:{match.group(1)}"
        return self.url

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=60)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()


StartServe = Callable[..., Serve]


@dataclass(frozen=True)
class Env:
    home: Path
    environ: dict[str, str]

    @property
    def lock(self) -> Path:
        return self.home / "app.lock.toml"  # not the default name: errors must name this one

    @property
    def store(self) -> Path:
        return self.home / "store"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    """A private XDG data/cache home and no proxy or fetchproxy variables from outside."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if "proxy" not in k.lower() and not k.startswith(("FETCHPROXY_", "XDG_"))
    }
    environ |= {
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    return Env(tmp_path, environ)


@pytest.fixture
def serve(env: Env) -> Iterator[StartServe]:
    """``serve(*args)`` starts ``python -m fetchproxy serve ARGS``; all are killed at the end."""
    started: list[Serve] = []

    def start(*args: str) -> Serve:
        stderr_path = env.home / f"serve-{len(started)}.stderr"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "fetchproxy", "serve", *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=env.home,
                env=env.environ,
            )
        served = Serve(process, stderr_path)
        started.append(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.kill()  # by its own pid, only processes this test started
            served.process.wait(timeout=30)
        if served.process.stdout is not None:
            served.process.stdout.close()


def run_cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fetchproxy(*args, cwd=env.home, env=env.environ)


def is_listening(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except ConnectionRefusedError:
        return False


def test_serve_records_then_replays_and_stops_on_sigterm_and_sigint(
    env: Env, serve: StartServe, origin: Origin, origin_pki: OriginPKI
) -> None:
    ca = run_cli(env, "ca", "path")
    ca_cert = env.home / "data" / "fetchproxy" / "ca" / "fetchproxy-ca.pem"
    assert (ca.returncode, ca.stdout, ca.stderr) == (0, f"{ca_cert}\n", "")
    assert (ca_cert.parent.stat().st_mode & 0o777) == 0o700

    common = ("--listen", "127.0.0.1:0", "--lock", str(env.lock), "--store", str(env.store))
    recorder = serve("record", *common, "--upstream-ca", str(origin_pki.ca_cert))
    url = recorder.wait_listening()

    def fetch_all(proxy: str) -> list[tuple[int, bytes]]:
        clients = env.home / "clients"
        return [
            (got.status, got.body)
            for got in (
                curl(proxy, ca_cert, origin.url("/small.txt"), tmp=clients),
                curl(proxy, ca_cert, origin.url("/medium.bin"), http2=True, tmp=clients),
                urlfetch(urllib_opener(proxy, ca_cert), origin.url("/gzip.txt")),
            )
        ]

    expected = [(200, SMALL), (200, MEDIUM), (200, GZIP_WIRE)]
    assert fetch_all(url) == expected
    # HTTP/1.1 by default, even to a client that offers HTTP/2
    assert curl(url, ca_cert, origin.url("/small.txt"), http2=True, tmp=env.home).protocol == (
        "HTTP/1.1"
    )
    assert journal_path(env.lock).exists()
    assert recorder.stop(signal.SIGTERM) == 0
    assert not is_listening(url)
    assert not journal_path(env.lock).exists()
    assert recorder.stderr == f"fetchproxy: recorded 3 fetches (1.0 MiB) into {env.lock}\n"
    assert len(load_lock(env.lock)) == 3

    origin.reset()
    replayer = serve("replay", *common, "--http2")
    url = replayer.wait_listening()
    assert fetch_all(url) == expected
    # --http2: HTTP/2 to clients that offer it
    h2 = curl(url, ca_cert, origin.url("/small.txt"), http2=True, tmp=env.home / "clients")
    assert (h2.status, h2.protocol) == (200, "HTTP/2")
    unknown = curl(url, ca_cert, origin.url("/unknown"), tmp=env.home / "clients")
    assert unknown.status == 403
    assert replayer.stop(signal.SIGINT) == 0
    assert not is_listening(url)
    served = re.escape(fetch_set_digest(entry_from_fetch(f) for f in load_lock(env.lock).fetches))
    assert re.fullmatch(
        re.escape(
            f"fetchproxy: served 4 fetches (1.0 MiB) from {env.lock}; refused 1\n"
            f"fetchproxy:   refused GET {origin.url('/unknown')}\n"
        )
        + rf"fetchproxy: fetch-set digest {served} \(3 entries: the whole lock\)\n",
        replayer.stderr,
    ), replayer.stderr
    assert origin.connections == 0
    # the event log went beside the lock
    log = env.home / "app.lock.log.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["refused", "used", "used", "used", "fetch-set"]
    assert (events[-1]["exact"], events[-1]["refused"], events[-1]["sandbox"]) == (
        False,
        1,
        "none",
    )


def test_a_port_in_use_is_a_clear_error(env: Env, serve: StartServe) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        served = serve("record", "--listen", f"127.0.0.1:{port}", "--lock", str(env.lock))
        assert served.process.wait(timeout=60) == 2
    assert served.process.stdout is not None
    assert served.process.stdout.read() == b""
    assert served.stderr == (
        f"fetchproxy: error: cannot listen on 127.0.0.1:{port}: [Errno 98] HTTP(S) proxy failed "
        f"to listen on 127.0.0.1:{port} with [Errno 98] error while attempting to bind on "
        f"address ('127.0.0.1', {port}): address already in use — another program listens "
        "there; choose another port (0 picks a free one)\n"
    )
    assert not env.lock.exists()
    assert not env.lock.with_name(env.lock.name + ".journal").exists()  # no stale journal


def test_a_bad_lock_is_named_with_its_line_and_nothing_listens(env: Env, serve: StartServe) -> None:
    env.lock.write_text('version = 1\n\n[[fetch]]\nmethod = "GET"\nurl = 5\n')
    served = serve("replay", "--listen", "127.0.0.1:0", "--lock", str(env.lock))
    assert served.process.wait(timeout=60) == 2
    assert served.stderr == f"fetchproxy: error: {env.lock}:5: fetch[0].url: 5 is not a string\n"


def test_a_missing_lock_and_missing_blobs_stop_replay_before_it_listens(
    env: Env, serve: StartServe
) -> None:
    served = serve("replay", "--listen", "127.0.0.1:0", "--lock", str(env.lock))
    assert served.process.wait(timeout=60) == 2
    assert served.stderr == (
        f"fetchproxy: error: {env.lock}: no such lock — record one with "
        "`fetchproxy record -- BUILD...`\n"
    )
    digest = "blake3:" + "ab" * 32
    env.lock.write_text(
        "version = 1\n\n[[fetch]]\n"
        'method = "GET"\nurl = "https://example.org/a.tar.gz"\nstatus = 200\n'
        f'digest = "{digest}"\nsize = 3\n'
    )
    args = ("--listen", "127.0.0.1:0", "--lock", str(env.lock), "--store", str(env.store))
    served = serve("replay", *args)
    assert served.process.wait(timeout=60) == 2
    assert served.stderr == (
        f"fetchproxy: error: {env.lock}: 1 recorded body is missing from the store "
        f"{env.store} ({digest}) — record again with `fetchproxy record`, or point --store at "
        "the store it was recorded into\n"
    )


def test_a_listen_address_that_is_not_host_port_is_a_usage_error(env: Env) -> None:
    done = run_cli(env, "serve", "record", "--listen", "8080")
    assert done.returncode == 2
    assert done.stderr.endswith(
        "fetchproxy serve: error: argument --listen: '8080' is not HOST:PORT "
        "(e.g. 127.0.0.1:8080)\n"
    )


def test_a_refused_start_leaves_the_files_beside_the_default_lock_alone(tmp_path: Path) -> None:
    """mitmproxy configures again with its defaults after refusing an option: that second
    round must not truncate the event log of a lock in the current directory."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "app.lock.toml").write_text("not a lock\n")
    beside = tmp_path / "fetchproxy.lock.log.jsonl"
    beside.write_text('{"event": "refused"}\n')
    for mode in ("record", "replay"):
        argv = ["serve", mode, "--listen", "127.0.0.1:0", "--lock", "sub/app.lock.toml"]
        result = run_fetchproxy(*argv, "--http2", cwd=tmp_path)  # replay on mitmproxy too
        assert result.returncode == 2, result.stderr
        assert "sub/app.lock.toml:1" in result.stderr
        assert beside.read_text() == '{"event": "refused"}\n'


def test_third_party_messages_on_stderr_and_in_the_log_quote_no_secret(
    env: Env, serve: StartServe
) -> None:
    """mitmproxy's own lines quote what a client or an origin sent: `invalid content-length
    header: 'hunter2-SECRET'`, and `Cannot parse ClientHello: 1603…` (the client's bytes in
    hex, token and all). stderr and the event log say both, with the quoted value and the hex
    dump cut out."""
    log = env.home / "events.jsonl"
    recorder = serve(
        "record", "--listen", "127.0.0.1:0", "--lock", str(env.lock), "--store", str(env.store),
        "--log", str(log),
    )  # fmt: skip
    host, port = recorder.wait_listening().removeprefix("http://").rsplit(":", 1)

    def tunnel(first: bytes) -> bytes:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"CONNECT 127.0.0.2:9 HTTP/1.1\r\nHost: 127.0.0.2:9\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.sendall(first)
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
            return got

    tunnel(b"\x16\x03\x01\x00\x20" + b"GET /?token=SECRET-1 HTTP/1.1\r\n" * 2)  # "TLS", then not
    got = tunnel(
        b"POST /p?token=SECRET-2 HTTP/1.1\r\nHost: 127.0.0.2:9\r\n"
        b"Content-Length: hunter2-SECRET\r\n\r\n"
    )
    assert got.startswith(b"HTTP/1.1 400 ")
    recorder.stop()
    stderr = recorder.stderr
    assert "1 failed" in stderr
    assert "Client TLS handshake failed. Cannot parse ClientHello: <" in stderr
    assert "invalid content-length header: '…'" in stderr
    for text in (stderr, log.read_text()):
        for secret in ("SECRET", "hunter2", b"SECRET".hex(), b"hunter2".hex()):
            assert secret not in text

"""What the real proxy refuses: misses, corrupt blobs, unverifiable origins, non-HTTP traffic.

Every refusal is checked as the client sees it (status, header, one-line body) and as the event
log records it; the origin stays up and counts its connections, which stay at zero in replay.
"""

from __future__ import annotations

import http.client
import logging
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from fetchproxy.digest import Digest
from fetchproxy.lock.file import load_lock
from fetchproxy.store import DiskStore
from tests.support.cli import read_events
from tests.support.clients import Fetched
from tests.support.origin import JSON_BODY, MEDIUM, SMALL
from tests.support.proxy import REPLAY_ENGINES, ProxyThread, Rig

REFUSED = "x-fetchproxy-refused"


def record(rig: Rig, *targets: str, accept: str | None = None) -> None:
    recorder = rig.start("record")
    for target in targets:
        headers = {"Accept": accept} if accept and target == "/negotiate" else {}
        assert rig.get(recorder, target, headers=headers).status == 200
    assert recorder.stop() == 0
    rig.origin.reset()


def corrupt(store: Path, digest: Digest) -> Path:
    """Flip one bit in the middle of the blob ``digest``; the blob's path."""
    path = DiskStore(store).blob_path(digest)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return path


def refusal_line(method: str, url: str, lock: Path, why: str | None = None) -> bytes:
    return f"fetchproxy: refused {method} {url}: {why or f'not in the lock {lock}'}\n".encode()


def assert_refused(got: Fetched, body: bytes, *, status: int = 403, reason: str) -> None:
    assert (got.status, got.header(REFUSED), got.body) == (status, reason, body)
    assert got.header("content-type") == "text/plain; charset=utf-8"
    assert got.header("content-length") == str(len(body))


@REPLAY_ENGINES
def test_unknown_urls_methods_and_representations_are_refused_with_the_nearest_entry(
    rig: Rig, capfd: pytest.CaptureFixture[str]
) -> None:
    record(rig, "/small.txt", "/medium.bin", "/negotiate", accept="application/json")
    base, lock = rig.origin.base_url, rig.paths.lock
    replayer = rig.start("replay")
    capfd.readouterr()

    backup = rig.get(replayer, "/small.txt.bak")
    assert_refused(backup, refusal_line("GET", f"{base}/small.txt.bak", lock), reason="not-in-lock")
    head = rig.curl(replayer, "/small.txt", "--head", http2=True)
    assert (head.status, head.header(REFUSED), head.protocol) == (
        403,
        "not-in-lock",
        replayer.client_protocol,
    )
    csv = rig.curl(replayer, "/negotiate", "--header", "Accept: text/csv")
    assert_refused(csv, refusal_line("GET", f"{base}/negotiate", lock), reason="not-in-lock")
    # the recorded representation is still served
    assert rig.get(replayer, "/negotiate", headers={"Accept": "application/json"}).body == JSON_BODY
    assert replayer.stop() == 0

    # the only difference from a lock entry is Accept: the refusal says so, and what to do
    accept_hint = (
        f'the lock holds GET {base}/negotiate with accept = "application/json", and this '
        'request has accept = "text/csv": the only difference is the Accept header, so another '
        "client, or another version of it, made the lock. Record again with this one; or, if "
        "Accept selects nothing there, run `fetchproxy config add "
        f"fetchproxy.accept-selects-nothing {base.removeprefix('https://')}` and record again"
    )
    assert read_events(rig.paths.log, unused=True) == [
        {
            "event": "refused",
            "reason": "not-in-lock",
            "key": {"method": "GET", "url": f"{base}/small.txt.bak"},
            "nearest": {"method": "GET", "url": f"{base}/small.txt"},
        },
        {
            "event": "refused",
            "reason": "not-in-lock",
            "key": {"method": "HEAD", "url": f"{base}/small.txt"},
            "nearest": {"method": "GET", "url": f"{base}/small.txt"},
        },
        {
            "event": "refused",
            "reason": "not-in-lock",
            "key": {"method": "GET", "url": f"{base}/negotiate", "accept": "text/csv"},
            "nearest": {"method": "GET", "url": f"{base}/negotiate", "accept": "application/json"},
            "hint": accept_hint,
        },
        # at the end, the entries no request used, so closure bloat is visible
        {"event": "unused", "key": {"method": "GET", "url": f"{base}/medium.bin"}},
        {"event": "unused", "key": {"method": "GET", "url": f"{base}/small.txt"}},
    ]
    summary = (
        f"fetchproxy: served 1 fetch ({len(JSON_BODY)} B) from {lock}; refused 3\n"
        f"fetchproxy:   refused GET {base}/small.txt.bak\n"
        f"fetchproxy:   refused HEAD {base}/small.txt\n"
        f"fetchproxy:   refused GET {base}/negotiate\n"
        f"fetchproxy:     {accept_hint}\n"
        "fetchproxy: 2 of 3 lock entries went unused\n"
    )
    err = capfd.readouterr().err
    assert err.startswith(summary), err
    assert re.fullmatch(
        r"fetchproxy: fetch-set digest blake3:[0-9a-f]{64} \(1 of 3 lock entries\)\n",
        err[len(summary) :],
    ), err
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_an_unknown_host_is_refused_without_a_nearest_entry(rig: Rig) -> None:
    record(rig, "/small.txt")
    lock = rig.paths.lock
    replayer = rig.start("replay")
    for url, got in (
        (
            "https://unknown.invalid/file.tar.gz",
            rig.get(replayer, "https://unknown.invalid/file.tar.gz"),
        ),
        (
            "https://unknown.invalid/file.tar.gz",
            rig.curl(replayer, "https://unknown.invalid/file.tar.gz", http2=True),
        ),
        ("http://unknown.invalid/plain", rig.get(replayer, "http://unknown.invalid/plain")),
        ("https://localhost:1/small.txt", rig.curl(replayer, "https://localhost:1/small.txt")),
    ):
        assert_refused(got, refusal_line("GET", url, lock), reason="not-in-lock")
    replayer.stop()
    events = read_events(rig.paths.log)
    assert [e["key"] for e in events] == [
        {"method": "GET", "url": "https://unknown.invalid/file.tar.gz"},
        {"method": "GET", "url": "https://unknown.invalid/file.tar.gz"},
        {"method": "GET", "url": "http://unknown.invalid/plain"},
        {"method": "GET", "url": "https://localhost:1/small.txt"},
    ]
    assert [e["nearest"] for e in events] == [None] * 4
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_corrupt_blobs_small_and_large_are_refused_with_502(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    record(rig, "/small.txt", "/medium.bin")
    base, lock = rig.origin.base_url, rig.paths.lock
    damaged = {f.key.url: corrupt(rig.paths.store, f.digest) for f in load_lock(lock).fetches}
    replayer = rig.start("replay")
    why = f"the recorded body in the store is corrupt (lock {lock})"
    for target in ("/small.txt", "/medium.bin"):
        body = refusal_line("GET", f"{base}{target}", lock, why)
        assert_refused(rig.get(replayer, target), body, status=502, reason="corrupt-blob")
        got = rig.curl(replayer, target, http2=True)
        assert_refused(got, body, status=502, reason="corrupt-blob")
    replayer.stop()
    events = read_events(rig.paths.log)
    assert [(e["event"], e["reason"], e["key"], e["nearest"]) for e in events] == [
        ("refused", "corrupt-blob", {"method": "GET", "url": f"{base}{target}"}, None)
        for target in ("/small.txt", "/small.txt", "/medium.bin", "/medium.bin")
    ]  # their own entry, so no nearest one
    every = read_events(rig.paths.log, unused=True)
    assert [e for e in every if e["event"] == "unused"] == []  # they were asked for
    for event in events:
        key, error = event["key"], event["error"]
        assert isinstance(key, dict)
        assert isinstance(error, str)
        assert error.startswith(f"corrupt blob in {damaged[key['url']]}: ")
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    for path in damaged.values():
        assert f"corrupt blob in {path}: expected " in logged
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_a_blob_corrupted_during_replay_is_never_served_whole(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Once verified, a large blob streams from the blob server, which rehashes as it goes
    and withholds the last chunk of a corrupt blob: the client sees a cut-off body.
    A small blob is served from the verified bytes kept in memory."""
    record(rig, "/small.txt", "/medium.bin")
    replayer = rig.start("replay")
    assert rig.get(replayer, "/medium.bin").body == MEDIUM
    assert rig.get(replayer, "/small.txt").body == SMALL
    damaged = {
        f.key.url: corrupt(rig.paths.store, f.digest) for f in load_lock(rig.paths.lock).fetches
    }

    with pytest.raises(http.client.IncompleteRead) as cut:
        rig.get(replayer, "/medium.bin")
    assert len(cut.value.partial) < len(MEDIUM)
    h2 = subprocess.run(
        [
            *("curl", "--silent", "--http2", "--proxy", replayer.url),
            *("--cacert", str(rig.paths.ca_cert), "--output", os.devnull),
            *("--write-out", "%{size_download}", rig.origin.url("/medium.bin")),
        ],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert h2.returncode != 0
    assert int(h2.stdout) < len(MEDIUM)
    assert rig.get(replayer, "/small.txt").body == SMALL
    replayer.stop()
    corrupt_logs = [r.getMessage() for r in caplog.records if "corrupt blob in" in r.getMessage()]
    assert len(corrupt_logs) == 2
    medium = damaged[rig.origin.url("/medium.bin")]
    assert all(m.startswith(f"corrupt blob in {medium}: ") for m in corrupt_logs)
    medium_key = {"method": "GET", "url": rig.origin.url("/medium.bin")}
    # the two cut-off answers count as refused, not served, and are in the event log
    assert [(e["reason"], e["key"]) for e in read_events(rig.paths.log)] == [
        ("corrupt-blob", medium_key),
        ("corrupt-blob", medium_key),
    ]
    assert replayer.replay.stats.served == 3
    assert rig.origin.connections == 0


def test_record_refuses_an_origin_whose_certificate_it_cannot_verify(
    rig: Rig, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    url = rig.origin.url("/small.txt")
    recorder = rig.start("record", upstream_ca=())
    capfd.readouterr()
    for got in (rig.get(recorder, url), rig.curl(recorder, url, http2=True)):
        assert got.status == 502
        assert b"Certificate verify failed" in got.body
        assert SMALL not in got.body
    assert recorder.stop() == 0
    assert len(load_lock(rig.paths.lock)) == 0
    assert list(DiskStore(rig.paths.store).digests()) == []
    message = (
        f"record: GET {url} failed, not recorded: "
        "Certificate verify failed: unable to get local issuer certificate"
        " — if the origin uses its own CA, pass --upstream-ca PATH"
    )
    errors = [r.getMessage() for r in caplog.records if r.name == "fetchproxy.record"]
    assert errors == [message, message]
    # said once, by fetchproxy: mitmproxy's own warning for the same failure is left out
    assert "Server TLS handshake failed" not in caplog.text
    assert capfd.readouterr().err == (
        f"fetchproxy: recorded 0 fetches (0 B) into {rig.paths.lock}; 2 failed\n"
    )
    assert [e["event"] for e in read_events(rig.paths.log)] == ["failed", "failed"]
    # the origin was reached (TLS failed), so the test would notice a proxy that never tried
    assert rig.origin.connections == 2

    # the same confdir, now trusting the origin's CA: the fetch records
    trusted = rig.start("record")
    assert rig.get(trusted, url).body == SMALL
    trusted.stop()
    assert [f.key.url for f in load_lock(rig.paths.lock).fetches] == [url]


@REPLAY_ENGINES
def test_websocket_upgrades_and_raw_tcp_are_refused_in_replay(rig: Rig) -> None:
    record(rig, "/small.txt")
    replayer = rig.start("replay")
    upgrade = rig.get(
        replayer,
        "/small.txt",
        headers={
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
        },
    )
    body = refusal_line(
        "GET", rig.origin.url("/small.txt"), rig.paths.lock, f"not-http (lock {rig.paths.lock})"
    )
    assert_refused(upgrade, body, reason="not-http")
    assert raw_tcp_through(replayer, rig.origin.port) == b""
    replayer.stop()
    events = read_events(rig.paths.log)
    assert [(e["event"], e["reason"]) for e in events] == [("refused", "not-http")] * 2
    assert events[1]["address"] == str(("127.0.0.1", rig.origin.port))
    assert rig.origin.connections == 0


def raw_tcp_through(proxy: ProxyThread, port: int) -> bytes:
    """CONNECT to ``port``, then speak something that is neither TLS nor HTTP; what came back."""
    proxy_port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        assert sock.recv(1000).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        received = b""
        while chunk := sock.recv(1000):
            received += chunk
        return received


@REPLAY_ENGINES
def test_a_request_that_cannot_be_keyed_is_refused_alike_by_both_engines(rig: Rig) -> None:
    record(rig, "/small.txt")
    replayer = rig.start("replay")
    got = rig.get(replayer, "http://1.2.3.999/file")  # mitmproxy takes it; no key can name it
    assert got.status == 400
    assert got.header(REFUSED) == "invalid-request"
    assert got.header("content-type") == "text/plain; charset=utf-8"
    assert got.body == (
        b"fetchproxy: refused: invalid URL 'http://1.2.3.999/file': "
        b"'1.2.3.999' is not a valid IPv4 address\n"
    )
    assert got.header("content-length") == str(len(got.body))
    assert replayer.stop() == 0
    assert replayer.replay.stats.refused == 1
    events = read_events(rig.paths.log)
    assert [(e["event"], e["reason"]) for e in events] == [("refused", "invalid-request")]
    assert rig.origin.connections == 0

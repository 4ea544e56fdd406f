"""The replay server under load: what a client can make it hold, and what it answers past it.

Each limit is reached on purpose: a client that stops reading in the middle of a 64 MiB body,
request bodies over the limit (raw, and from curl), more connections than the cap, a process
out of file descriptors. Waits are for a state the server reaches (``wait_until``), never a
sleep; the one test that counts log lines per second measures the seconds it took.
"""

from __future__ import annotations

import http
import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fetchproxy.replay.client import STREAM_CHUNK, WRITE_HIGH, ClientConnection, Layer
from fetchproxy.replay.http1 import MAX_BODY
from fetchproxy.replay.listener import LogThrottle
from tests.replay.serving import (
    HOST,
    SMALL,
    WAIT,
    Client,
    ServerThread,
    get,
    make_files,
)
from tests.support.cli import read_events

TLS_OVERHEAD = 1.05
"""A TLS record's header and tag, at most, per 16 KiB of plaintext (with room to spare)."""


@pytest.fixture
def direct(tmp_path: Path) -> Iterator[ServerThread]:
    server = ServerThread(make_files(tmp_path, enormous=True)).start()
    yield server
    server.stop()


def connections(direct: ServerThread) -> list[ClientConnection]:
    return direct.call(lambda: list(direct.server.connections))


# --- a client that stops reading -----------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_client_that_stops_reading_mid_body_costs_a_small_fixed_buffer(
    direct: ServerThread, *, tls: bool
) -> None:
    """It cost 6.3 MB: 4 MiB of send buffer and the 1 MiB chunks read ahead of it."""
    client = Client(direct, receive_buffer=4096)
    if tls:
        client.tunnel()
        client.send(get("/enormous"))
    else:
        client.send(get(f"http://{HOST}/enormous", host=HOST))
    assert client.head().startswith("HTTP/1.1 200 ")
    (connection,) = connections(direct)
    direct.wait_until(
        lambda: connection.task is not None and connection.write_blocked,
        "the stream waits for the client",
    )
    assert connection.transport is not None
    buffered = direct.call(connection.transport.get_write_buffer_size)
    bound = (WRITE_HIGH + STREAM_CHUNK) * (TLS_OVERHEAD if tls else 1)
    assert 0 < buffered <= bound
    client.pending = b""
    received = 0
    while received < 8 * STREAM_CHUNK:  # it goes on as soon as the client reads again
        chunk = client.sock.recv(65536)
        assert chunk
        received += len(chunk)


# --- request bodies over the limit ---------------------------------------------------------


def post(target: str, *headers: str, host: str = HOST) -> bytes:
    return get(target, *headers, method="POST", host=host)


def test_a_body_announced_over_the_limit_is_answered_413_without_being_read(
    direct: ServerThread,
) -> None:
    client = Client(direct)
    client.send(post(f"http://{HOST}/upload", "Content-Length: 2000000", "Expect: 100-continue"))
    status, headers, body = client.answer()  # at once: no 100 Continue first
    assert status == f"HTTP/1.1 413 {http.HTTPStatus(413).phrase}"
    assert headers["x-fetchproxy-refused"] == "invalid-request"
    assert headers["connection"] == "close"
    assert body == (
        b"fetchproxy: refused: POST http://files.example/upload: request body of 2,000,000 "
        b"bytes over the 1,048,576-byte limit\n"
    )
    assert client.closed()
    direct.stop_serving()
    assert direct.replayer.book.stats.refused == 1
    (event,) = read_events(direct.files.log)
    assert (event["reason"], event["key"]) == ("invalid-request", None)
    assert "over the 1,048,576-byte limit" in str(event["error"])


def test_a_chunked_body_that_passes_the_limit_is_cut_off_and_the_client_still_reads_why(
    direct: ServerThread,
) -> None:
    client = Client(direct)
    client.tunnel()
    client.send(get("/upload", "Transfer-Encoding: chunked", method="POST"))
    piece = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
    for _ in range(MAX_BODY // len(piece) + 8):  # past the limit, still sending
        client.send(piece)
    status, headers, _ = client.answer()
    assert status == f"HTTP/1.1 413 {http.HTTPStatus(413).phrase}"
    assert headers["x-fetchproxy-refused"] == "invalid-request"
    (connection,) = connections(direct)
    assert direct.call(lambda: connection.layer) is Layer.LINGER  # reading, dropping
    assert connection.http.buffered == 0  # nothing of the rest is kept
    for _ in range(32):  # 2 MiB more: dropped as it comes, so sending never blocks
        client.send(piece)
    assert client.closed()  # the close_notify, then the end of the stream
    client.sock.close()
    direct.wait_until(lambda: not direct.server.connections, "the connection closed")


@pytest.mark.parametrize("expect", [True, False], ids=["expect-100", "no-expect"])
def test_curl_uploading_more_than_the_limit_gets_the_413(
    direct: ServerThread, tmp_path: Path, *, expect: bool
) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(os.urandom(MAX_BODY + 1))
    headers = tmp_path / "headers"
    argv = ["curl", "-sS", "--proxy", f"http://127.0.0.1:{direct.port}", "--noproxy", ""]
    argv += ["--data-binary", f"@{upload}", "-D", str(headers), "-o", os.devnull]
    argv += ["-w", "%{http_code}", f"http://{HOST}/upload"]
    if not expect:
        argv += ["-H", "Expect:"]  # curl sends the body at once, and is cut off in it
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "413"), done.stderr
    assert "x-fetchproxy-refused: invalid-request" in headers.read_text().lower()


# --- connections ---------------------------------------------------------------------------


def test_log_throttle_says_once_a_second_how_many_it_left_out() -> None:
    throttle = LogThrottle()
    assert throttle.allow(10.0) == 0
    assert throttle.allow(10.5) is None
    assert throttle.allow(10.99) is None
    assert throttle.allow(11.0) == 2
    assert throttle.allow(11.2) is None
    assert throttle.left_out(11.5) is None  # too early to say it is over
    assert throttle.left_out(12.0) == 1
    assert throttle.left_out(14.0) is None  # nothing left out since
    assert throttle.allow(14.0) == 0


def test_past_the_connection_cap_new_connections_are_closed_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    direct = ServerThread(make_files(tmp_path), {"max_connections": 2}).start()
    try:
        first, second = Client(direct), Client(direct)
        direct.wait_until(lambda: len(direct.server.connections) == 2, "two connections")
        caplog.set_level(logging.WARNING, "fetchproxy.replay")
        over = [Client(direct), Client(direct)]
        for client in over:
            assert client.closed()  # closed before any answer, never queued
        assert direct.call(lambda: direct.server.over_capacity) == 2
        said = [r.getMessage() for r in caplog.records if r.name == "fetchproxy.replay"]
        assert said[0] == (
            "replay: 2 connections are open, the most this server takes: closed a new one at once"
        )
        assert len(said) <= 2  # the second within the same second is counted, not said
        first.sock.close()
        direct.wait_until(lambda: len(direct.server.connections) == 1, "one closed")
        again = Client(direct)
        again.send(get(f"http://{HOST}/plain", host=HOST))
        assert again.answer()[2] == SMALL
        second.send(get(f"http://{HOST}/plain", host=HOST))
        assert second.answer()[2] == SMALL
    finally:
        direct.stop()


def test_out_of_file_descriptors_the_server_says_so_once_a_second_and_recovers(
    tmp_path: Path,
) -> None:
    """asyncio's own server logged ``accept() out of system resource`` 21,851 times in 10 s."""
    files = make_files(tmp_path)
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "fetchproxy", "serve", "replay"),
                *("--lock", str(files.lock), "--store", str(files.store.root)),
                *("--log", str(files.log), "--listen", "127.0.0.1:0"),
            ],
            env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    clients: list[socket.socket] = []
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().rsplit(":", 1)[1])
        in_use = len(list(Path(f"/proc/{process.pid}/fd").iterdir()))
        resource.prlimit(process.pid, resource.RLIMIT_NOFILE, (in_use + 4, in_use + 4))
        started = time.monotonic()
        clients += [  # 4 are served; the others wait in the backlog, unaccepted
            socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(40)
        ]
        deadline = time.monotonic() + WAIT
        while "cannot accept a connection" not in stderr_path.read_text():
            assert time.monotonic() < deadline, "the server never said it ran out"
            time.sleep(0.05)
        time.sleep(1.5)  # long enough for the rate limit to be what bounds the lines
        for sock in clients[:-1]:
            sock.close()  # descriptors free again: the waiting connections are accepted
        probe = clients[-1]
        probe.sendall(get(f"http://{HOST}/plain", host=HOST))
        assert probe.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        elapsed = time.monotonic() - started
    finally:
        for sock in clients:
            sock.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        if process.stdout is not None:
            process.stdout.close()
    said = stderr_path.read_text().splitlines()
    failures = [line for line in said if "cannot accept a connection" in line]
    recoveries = [line for line in said if "accepting connections again" in line]
    assert 1 <= len(failures) + len(recoveries) <= elapsed + 1, said
    assert re.search(r"Too many open files", failures[0])
    assert not any("out of system resource" in line for line in said)


# --- HTTP details through the server -------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_request_with_bare_lf_line_ends_is_refused_at_once(
    direct: ServerThread, *, tls: bool
) -> None:
    """It waited for the idle timeout: the head never ended in CRLF CRLF."""
    client = Client(direct)
    if tls:
        client.tunnel()
    client.send(f"GET http://{HOST}/plain HTTP/1.1\nHost: {HOST}\n\n".encode())
    status, headers, body = client.answer()
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["x-fetchproxy-refused"] == ("not-http" if tls else "invalid-request")
    assert body == b"fetchproxy: bad request: a bare LF in the request head (lines end in CRLF)\n"
    assert client.closed()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /a HTTP/2.0\r\n\r\n", 505),
        (b"GET /a HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
        (b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"POST /a HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n", 400),
        (b"GET /a HTTP/1.1\r\n bad: fold\r\n\r\n", 400),
    ],
)
def test_every_malformed_request_gets_its_standard_status_line_and_the_header(
    direct: ServerThread, request_bytes: bytes, status: int
) -> None:
    client = Client(direct)
    client.send(request_bytes)
    line, headers, _ = client.answer()
    assert line == f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}"
    assert headers["x-fetchproxy-refused"] == "invalid-request"
    assert client.closed()


def test_connections_being_made_count_once_against_the_cap(tmp_path: Path) -> None:
    """A connection made but not yet handed over by asyncio counted twice (in the made ones and
    the accepting ones), so a second client under a cap of 2 was closed with one open."""
    direct = ServerThread(make_files(tmp_path), {"max_connections": 2}).start()
    try:
        for _ in range(100):
            pair = [Client(direct), Client(direct)]
            direct.wait_until(lambda: len(direct.server.connections) == 2, "two connections")
            for client in pair:
                client.sock.close()
            direct.wait_until(lambda: not direct.server.connections, "none left")
        assert direct.call(lambda: direct.server.over_capacity) == 0
    finally:
        direct.stop()

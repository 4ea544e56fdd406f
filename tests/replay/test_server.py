"""The direct replay server's own HTTP/1.1: what real clients rarely send but a proxy must handle.

Every replay scenario with real clients runs on both engines elsewhere
(``tests/test_proxy_*.py``, the sandbox and real-client tests use the direct one); these pin
the protocol edges with raw sockets: pipelining, HEAD and ranges on one connection, plain-HTTP
proxy requests, HTTP inside a tunnel without TLS, chunked uploads with ``Expect``, HTTP/1.0,
malformed requests, non-HTTP in a tunnel, SNI, and start-up failures.
"""

from __future__ import annotations

import gzip
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from cryptography import x509

from fetchproxy.ca import generate_ca, load_ca
from fetchproxy.digest import digest_bytes
from fetchproxy.engine import ProxyStartError
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Lock
from fetchproxy.replay import blobs
from fetchproxy.replay.book import MissingBodiesError
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.client import IDLE_CHECKS, WRITE_HIGH
from fetchproxy.replay.client import ClientConnection as ReplayServerConnection
from fetchproxy.replay.server import ReplayServer
from fetchproxy.run.settings import ProxySettings
from fetchproxy.store import DiskStore
from tests.replay.serving import (
    ANSWER,
    HOST,
    HUGE,
    LARGE,
    LONG_HOST,
    MEDIUM,
    SMALL,
    UPLOAD,
    Client,
    ServerThread,
    entry,
    get,
    make_files,
)
from tests.support.badblobs import (
    DEADLINE,
    SUBPROCESS_DEADLINE,
    make_not_regular,
    unblock_fifos,
)
from tests.support.cli import read_events
from tests.support.proxy import ProxyThread
from tests.support.tools import require


@dataclass
class Served:
    """The server as a run starts it (``open_run``), in a thread."""

    proxy: ProxyThread
    ca_cert: Path
    log: Path
    clients: list[Client] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.proxy.url.rsplit(":", 1)[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    files = make_files(tmp_path)
    settings = ProxySettings(
        mode="replay",
        lock=files.lock,
        store=files.store,
        confdir=files.confdir,
        listen_port=0,
        log=files.log,
    )
    proxy = ProxyThread(settings).start()
    assert isinstance(proxy.run.engine, ReplayServer)
    running = Served(proxy, files.ca_cert, files.log)
    yield running
    for client in running.clients:
        client.sock.close()
    if proxy.status is None:
        proxy.stop()


@pytest.fixture
def direct(tmp_path: Path) -> Iterator[ServerThread]:
    """The server on its own, built by the test (its idle sweep stepped by hand)."""
    server = ServerThread(make_files(tmp_path)).start()
    yield server
    server.stop()


def test_pipelined_requests_head_and_ranges_share_one_tls_connection(served: Served) -> None:
    client = Client(served)
    client.tunnel()
    client.send(
        get("/small")
        + get("/large")
        + get("/small", method="HEAD")
        + get("/large", "Range: bytes=10-19")
    )
    status, headers, body = client.answer()
    assert (status, headers, body) == (
        "HTTP/1.1 200 OK",
        {"content-type": "text/plain", "content-length": str(len(SMALL))},
        SMALL,
    )
    assert client.answer()[2] == LARGE
    status, headers, body = client.answer(body=False)  # HEAD is a key of its own: refused,
    assert (status, headers["x-fetchproxy-refused"], body) == (
        "HTTP/1.1 403 Forbidden",
        "not-in-lock",
        b"",
    )
    assert int(headers["content-length"]) > 0  # with the length a GET would get, and no body
    status, headers, body = client.answer()
    assert (status, headers["content-range"], body) == (
        "HTTP/1.1 206 Partial Content",
        f"bytes 10-19/{len(LARGE)}",
        LARGE[10:20],
    )
    client.send(get("/small", "Connection: close"))
    assert client.answer()[2] == SMALL
    assert client.closed()
    assert served.proxy.stop() == 0
    assert served.proxy.replay.stats.served == 4
    assert served.proxy.replay.stats.refused == 1


def test_plain_http_as_a_proxy_request_and_inside_a_tunnel(served: Served) -> None:
    client = Client(served)
    client.send(get(f"http://{HOST}/plain", host=HOST))
    assert client.answer()[2] == SMALL
    tunnelled = Client(served)
    tunnelled.tunnel(f"{HOST}:8080", tls=False)
    tunnelled.send(get("/tunnelled", host=f"{HOST}:8080"))
    assert tunnelled.answer()[2] == SMALL
    assert served.proxy.stop() == 0
    assert served.proxy.replay.stats.served == 2


def test_a_chunked_gzip_upload_that_expects_100_continue_is_keyed_on_its_decoded_body(
    served: Served,
) -> None:
    client = Client(served)
    client.tunnel()
    client.send(
        get(
            "/repo/git-upload-pack",
            "Content-Type: application/x-git-upload-pack-request",
            "Content-Encoding: gzip",
            "Transfer-Encoding: chunked",
            "Expect: 100-continue",
            method="POST",
        )
    )
    assert client.head() == "HTTP/1.1 100 Continue"
    wire = gzip.compress(UPLOAD)
    client.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(wire), wire))
    assert client.answer()[:3:2] == ("HTTP/1.1 200 OK", ANSWER)


def test_a_client_that_closes_its_side_after_sending_still_gets_its_answers(
    served: Served,
) -> None:
    client = Client(served)
    client.send(get(f"http://{HOST}/plain", host=HOST) * 2)
    client.sock.shutdown(socket.SHUT_WR)
    assert [client.answer()[2] for _ in range(2)] == [SMALL, SMALL]
    assert client.closed()


def test_http_1_0_gets_an_http_1_0_answer_and_the_connection_closes(served: Served) -> None:
    client = Client(served)
    client.tunnel()
    client.send(b"GET /small HTTP/1.0\r\nHost: files.example:8443\r\n\r\n")
    status, headers, body = client.answer()
    assert (status, headers["connection"], body) == ("HTTP/1.0 200 OK", "close", SMALL)
    assert client.closed()


def test_malformed_requests_and_non_http_in_a_tunnel_are_refused(served: Served) -> None:
    broken = Client(served)
    broken.tunnel()
    broken.send(b"GET /small HTTP/1.1\r\nbad header\r\n\r\n")
    status, _, body = broken.answer()
    assert (status, body) == (
        "HTTP/1.1 400 Bad Request",
        b"fetchproxy: bad request: line 2 of the request head is not a header line\n",
    )
    assert broken.closed()
    ssh = Client(served)
    ssh.tunnel("files.example:22", tls=False)
    ssh.send(b"SSH-2.0-OpenSSH_9.2\r\n")
    assert ssh.closed()
    not_proxy = Client(served)
    not_proxy.send(b"GET /small HTTP/1.1\r\n\r\n")  # no absolute URL, tunnel or Host
    status, _, body = not_proxy.answer()
    assert status == "HTTP/1.1 400 Bad Request"
    as_if_the_origin = Client(served)  # origin form with a Host header: mitmproxy goes by it
    as_if_the_origin.send(get("/plain", host=HOST))
    assert as_if_the_origin.answer()[2] == SMALL
    assert served.proxy.stop() == 0
    events = read_events(served.log)
    assert events == [
        {
            "event": "refused",
            "key": None,
            "reason": "not-http",
            "address": "('files.example', 8443)",
            "error": "line 2 of the request head is not a header line",
        },
        {"event": "refused", "key": None, "reason": "not-http", "address": "('files.example', 22)"},
        {
            "event": "refused",
            "key": None,
            "reason": "invalid-request",
            "error": "GET /small: no absolute URL, CONNECT tunnel or Host header: the "
            "destination is unknown",
        },
    ]
    assert served.proxy.replay.stats.refused == 3


def test_the_certificate_names_the_sni_host_else_the_connect_host(served: Served) -> None:
    def names(sni: str | None, authority: str) -> list[str]:
        client = Client(served)
        client.tunnel(authority, sni=sni)
        assert isinstance(client.sock, ssl.SSLSocket)
        der = client.sock.getpeercert(binary_form=True)
        assert der is not None
        san = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
        return [str(n.value) for n in san.value]

    assert names("other.example", f"{HOST}:8443") == ["other.example"]
    assert names(None, "127.0.0.7:8443") == ["127.0.0.7"]


def test_a_tls_1_2_client_may_not_renegotiate(served: Served) -> None:
    """A second handshake could name another server (SNI) on a connection whose requests were
    checked against the first: the server refuses it, and the name is looked up once per
    connection. (OpenSSL 3 refuses a client's renegotiation by default; the contexts say so
    themselves, for every OpenSSL a Python may be built with.)"""
    openssl = require("openssl", install="apt-get install openssl")["openssl"]
    argv = [
        str(openssl), "s_client", "-proxy", f"127.0.0.1:{served.port}",
        "-connect", f"{HOST}:8443", "-servername", HOST, "-tls1_2",
        "-CAfile", str(served.ca_cert), "-verify_return_error",
    ]  # fmt: skip
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as client:
        stuck = threading.Timer(DEADLINE, client.kill)  # a read below never waits for ever
        stuck.start()
        try:
            assert client.stdin is not None
            assert client.stdout is not None
            seen = b""
            while b"Verify return code: 0 (ok)" not in seen:  # the first handshake, complete
                line = client.stdout.readline()
                assert line, seen.decode(errors="replace")
                seen += line
            client.stdin.write(b"R\n")  # s_client's command: renegotiate
            client.stdin.flush()
            rest, _ = client.communicate(timeout=DEADLINE)
        finally:
            stuck.cancel()
            if client.poll() is None:
                client.kill()
    assert b"RENEGOTIATING" in rest
    assert b"no renegotiation" in rest, rest.decode(errors="replace")
    fresh = Client(served)
    fresh.tunnel(f"{HOST}:8443")
    fresh.send(get("/small"))
    assert fresh.answer()[2] == SMALL  # the server serves on


def test_start_up_failures_listen_on_nothing(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    digest = digest_bytes(b"gone")
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([entry("https://a.example/x", b"gone", digest)]))
    confdir = tmp_path / "confdir"
    generate_ca().write(confdir)
    settings: Callable[..., ProxySettings] = lambda **kw: ProxySettings(  # noqa: E731
        mode="replay", lock=lock, store=store, confdir=confdir, log=tmp_path / "log", **kw
    )
    with pytest.raises(MissingBodiesError, match="1 recorded body is missing from the store"):
        ProxyThread(settings(listen_port=0)).start()
    store.put(b"gone")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ProxyStartError) as caught:
            ProxyThread(settings(listen_port=port)).start()
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{port}: error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use — another program listens there; "
        "choose another port (0 picks a free one)"
    )


def test_a_client_that_does_not_trust_our_ca_is_told_where_it_is(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(served)
    client.send(f"CONNECT {HOST}:8443 HTTP/1.1\r\n\r\n".encode())
    assert client.head() == "HTTP/1.1 200 Connection established"
    untrusting = ssl.create_default_context()  # the system's CAs only
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusting.wrap_socket(client.sock, server_hostname=HOST)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "fetchproxy.replay"]

    deadline = time.monotonic() + 10
    while not said() and time.monotonic() < deadline:  # the server reads the client's alert
        time.sleep(0.01)
    assert served.proxy.stop() == 0
    assert said() == [
        f"replay: a client refused the certificate for {HOST}:8443 (TLSV1_ALERT_UNKNOWN_CA) — "
        "does it trust fetchproxy's CA? `fetchproxy ca path` names it (docs/clients.md)"
    ]


def test_a_host_name_longer_than_a_certificate_cn_is_served(served: Served) -> None:
    client = Client(served)
    client.tunnel(f"{LONG_HOST}:443", sni=LONG_HOST)
    client.send(get("/small", host=LONG_HOST))
    assert client.answer()[2] == SMALL
    assert HostContexts(load_ca(served.ca_cert.parent)).for_host("bücher.example") is not None


def test_certificates_are_kept_for_the_hosts_used_last() -> None:
    contexts = HostContexts(generate_ca(), most=2)
    a, b = contexts.for_host("a.example"), contexts.for_host("b.example")
    assert contexts.for_host("a.example") is a  # kept, and now the most recent
    contexts.for_host("c.example")
    assert contexts.for_host("a.example") is a
    assert contexts.for_host("b.example") is not b  # dropped, made again


def only_connection(direct: ServerThread) -> ReplayServerConnection:
    (connection,) = direct.server.connections
    return connection


def test_a_client_that_does_not_read_cannot_make_the_server_buffer_without_bound(
    direct: ServerThread,
) -> None:
    client = Client(direct)
    client.tunnel()
    client.send(get("/medium"))
    assert client.answer()[2] == MEDIUM  # verified and cached: the answers below are instant
    count = 500  # 100 MB of answers
    client.send(get("/medium") * count)
    connection = direct.call(lambda: only_connection(direct))
    direct.wait_until(lambda: connection.write_blocked, "the server waits for the client")
    assert connection.transport is not None
    buffered = direct.call(connection.transport.get_write_buffer_size)
    assert buffered <= WRITE_HIGH + len(MEDIUM) + 4096  # the high-water mark and one answer
    for _ in range(count):
        assert client.answer()[2] == MEDIUM
    direct.stop_serving()
    assert direct.replayer.book.stats.served == count + 1


def test_no_secret_of_a_malformed_request_reaches_the_event_log(served: Served) -> None:
    for request in (
        b"GET /repo.tar.gz?token=SECRET1 HTTP/1.1\r\nUser-Agent: x\r\n\r\n",  # no destination
        b"GET ftp://files.example/x?access_token=SECRET2 HTTP/1.1\r\n\r\n",
        b"GET /small?token=SECRET3 HTTP/1.1 x\r\n\r\n",
    ):
        client = Client(served)
        client.send(request)
        assert client.answer()[0] == "HTTP/1.1 400 Bad Request"
    tunnelled = Client(served)
    tunnelled.tunnel()
    tunnelled.send(b"GET /small HTTP/1.1\r\nAuthorization Bearer SECRET4\r\n\r\n")
    assert tunnelled.answer()[0] == "HTTP/1.1 400 Bad Request"
    assert served.proxy.stop() == 0
    assert [e["reason"] for e in read_events(served.log)] == [
        "invalid-request",
        "invalid-request",
        "not-http",
    ]
    assert "SECRET" not in served.log.read_text()


def test_a_lock_whose_size_is_not_the_blob_s_is_answered_502_never_with_a_wrong_length(
    served: Served,
) -> None:
    client = Client(served)
    client.tunnel()
    client.send(get("/small") + get("/wrong-size") + get("/small"))
    assert client.answer()[2] == SMALL  # the blob is now verified and in memory
    status, headers, _ = client.answer()
    assert (status, headers["x-fetchproxy-refused"]) == ("HTTP/1.1 502 Bad Gateway", "store-error")
    assert client.answer()[2] == SMALL  # the connection is still in step
    assert served.proxy.stop() == 0
    assert [e["reason"] for e in read_events(served.log)] == ["store-error"]


def test_digits_that_are_not_ascii_are_a_bad_request_not_a_crash(served: Served) -> None:
    for request in (
        "POST /small HTTP/1.1\r\nHost: files.example:8443\r\nContent-Length: ²\r\n\r\n",
        "CONNECT files.example:²³ HTTP/1.1\r\n\r\n",
    ):
        client = Client(served)
        if request.startswith("POST"):
            client.tunnel()
        client.send(request.encode())
        status, _, body = client.answer()
        assert status == "HTTP/1.1 400 Bad Request", body
        assert client.closed()


def test_a_connection_idle_for_the_timeout_is_closed_and_one_in_use_is_not(
    direct: ServerThread,
) -> None:
    in_tunnel, plain, busy = Client(direct), Client(direct), Client(direct)
    in_tunnel.tunnel()  # TLS up, then nothing
    plain.send(b"GET http://files.example/pl")  # half a request line, then nothing
    busy.tunnel()
    direct.wait_until(lambda: len(direct.server.connections) == 3, "three connections")
    direct.sweep()  # the sweep that sees them first
    for _ in range(IDLE_CHECKS - 1):  # a request between every two sweeps: never idle
        busy.send(get("/small"))
        assert busy.answer()[2] == SMALL
        direct.sweep()
    assert direct.call(lambda: len(direct.server.connections)) == 3  # quiet, not yet for long
    busy.send(get("/small"))
    assert busy.answer()[2] == SMALL
    direct.sweep()  # the tenth quiet sweep of the other two
    assert in_tunnel.closed()
    assert plain.closed()
    busy.send(get("/small"))
    assert busy.answer()[2] == SMALL


def test_a_client_that_stops_reading_is_cut_off_after_the_idle_timeout(
    direct: ServerThread,
) -> None:
    client = Client(direct)
    client.tunnel()
    client.send(get("/medium"))
    assert client.answer()[2] == MEDIUM
    count = 500  # 100 MB: far more than the socket buffers hold
    client.send(get("/medium") * count)
    connection = direct.call(lambda: only_connection(direct))
    direct.wait_until(lambda: connection.write_blocked, "the server waits for the client")
    direct.sweep(IDLE_CHECKS + 1)
    assert direct.call(lambda: len(direct.server.connections)) == 0  # reset: never flushed
    got = 0
    with suppress(ConnectionResetError, ssl.SSLError, AssertionError):
        while client.answer()[2] == MEDIUM:
            got += 1
    assert got < count
    direct.stop_serving()
    assert direct.replayer.book.stats.served < count + 1


def test_a_client_that_stops_reading_below_the_high_water_mark_is_cut_off_too(
    direct: ServerThread,
) -> None:
    client = Client(direct, receive_buffer=4096)
    client.tunnel()
    connection = direct.call(lambda: only_connection(direct))
    assert connection.transport is not None
    buffered = connection.transport.get_write_buffer_size
    sent = 0
    while direct.call(buffered) == 0:  # small answers until some stay behind the socket
        assert sent < 20000, "the kernel took every answer"
        client.send(get("/small") * 20)
        sent += 20
        answered = partial(lambda n: connection.http.requests == n, sent)
        direct.wait_until(answered, "the requests answered")
    assert 0 < direct.call(buffered) <= WRITE_HIGH
    assert not connection.write_blocked  # below the mark: nothing tells the server to wait
    direct.sweep(IDLE_CHECKS + 1)
    assert direct.call(lambda: len(direct.server.connections)) == 0  # not left closing forever


def test_a_request_with_two_host_headers_is_refused_even_after_one_with_one(
    served: Served,
) -> None:
    client = Client(served)
    client.tunnel()
    client.send(get("/small"))
    assert client.answer()[2] == SMALL  # its key is remembered now
    client.send(get("/small", "Host: other.example"))  # the Host headers disagree
    status, _, _ = client.answer()
    assert status == "HTTP/1.1 400 Bad Request"


# --- what the server serves is what it verified -------------------------------------------


def blob_of(served: Served, body: bytes) -> Path:
    store = served.proxy.settings.store
    assert isinstance(store, DiskStore)
    return store.blob_path(digest_bytes(body))


def rest_of_connection(client: Client) -> bytes:
    """Everything the server still sends until it closes the connection."""
    data = client.pending
    with suppress(ConnectionResetError, ssl.SSLError, TimeoutError):
        while chunk := client.sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("trusted", [True, False], ids=["identity-trusted", "just-written"])
def test_a_range_of_a_blob_changed_since_it_was_verified_is_never_served(
    served: Served, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    """A blob verified once in a run, then changed in place: a range of it is cut off too.

    Its file's identity is trusted (as for any blob not written in the last seconds), or, as
    written just now, not trusted at all: either way the change is seen.
    """
    if trusted:
        monkeypatch.setattr(blobs, "RACY_NS", 0)
    client = Client(served)
    client.tunnel()
    client.send(get("/huge"))
    assert client.answer()[2] == HUGE  # verified, and whole: rehashed while it streamed
    path = blob_of(served, HUGE)
    changed = bytes(255 - b for b in HUGE)  # same size, other bytes
    original = path.stat()
    path.chmod(0o644)
    path.write_bytes(changed)
    path.chmod(0o444)
    os.utime(path, ns=(original.st_atime_ns, original.st_mtime_ns))  # even with its old mtime
    client.send(get("/huge", "Range: bytes=10-4009"))
    assert client.head().startswith("HTTP/1.1 206 ")  # sent before the blob is opened
    rest = rest_of_connection(client)
    assert changed[10:4010] not in rest
    assert len(rest) < 4000  # cut off: never the whole part
    assert served.proxy.stop() == 0
    assert served.proxy.replay.stats.refused == 1
    events = read_events(served.log)
    assert [e["reason"] for e in events] == ["corrupt-blob"]


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "device"])
@pytest.mark.parametrize("url", ["/large", "/medium"], ids=["streamed", "from-memory"])
def test_a_blob_that_is_not_a_regular_file_met_mid_run_is_answered_502(
    served: Served, tmp_path: Path, kind: str, url: str
) -> None:
    """A FIFO under a blob's name made the server wait forever for a writer."""
    client = Client(served)
    client.tunnel()
    client.send(get("/small"))
    assert client.answer()[2] == SMALL
    body = LARGE if url == "/large" else MEDIUM
    path = blob_of(served, body)
    path.chmod(0o644)
    path.unlink()
    make_not_regular(path, kind, body=body, elsewhere=tmp_path / "elsewhere")
    try:
        client.send(get(url))
        status, headers, _ = client.answer()
        assert (status, headers["x-fetchproxy-refused"]) == (
            "HTTP/1.1 502 Bad Gateway",
            "corrupt-blob",
        )
        client.send(get("/small"))
        assert client.answer()[2] == SMALL  # the connection is still in step
    finally:
        unblock_fifos(path, tmp_path / "elsewhere" / "fifo")
    assert served.proxy.stop() == 0
    assert [e["reason"] for e in read_events(served.log)] == ["corrupt-blob"]


def test_serve_replay_meeting_a_link_to_dev_zero_answers_502_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """The link made ``serve replay`` hash /dev/zero forever at 100 % CPU, deaf to SIGTERM."""
    store = DiskStore(tmp_path / "store")
    digest = store.put(LARGE)
    lock = tmp_path / "fetchproxy.lock.toml"
    write_lock(lock, Lock.from_fetches([entry(f"http://{HOST}/zero", LARGE, digest)]))
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "fetchproxy", "serve", "replay", "--lock", str(lock)),
            *("--store", str(store.root), "--listen", "127.0.0.1:0"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        path = store.blob_path(digest)
        path.chmod(0o644)
        path.unlink()  # mid-run: the blob was there when replay started
        make_not_regular(path, "link-to-dev-zero", body=LARGE, elsewhere=tmp_path / "x")
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
            sock.sendall(get(f"http://{HOST}/zero", host=HOST))
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(65536)
                assert chunk, "closed without an answer"
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=SUBPROCESS_DEADLINE) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


_IN_TUNNEL = b"POST /small HTTP/1.1\r\nHost: files.example:8443\r\n"


@pytest.mark.parametrize(
    ("layer", "request_bytes"),
    [
        ("tunnel", _IN_TUNNEL + b"Content-Length: hunter2-SECRET\r\n\r\n"),
        ("tunnel", _IN_TUNNEL + b"Content-Length: 1\r\nContent-Length: 2SECRET\r\n\r\n"),
        ("tunnel", _IN_TUNNEL + b"Transfer-Encoding: gzip-SECRET, chunked\r\n\r\n"),
        ("tunnel", b"GET /small HTTP/1.SECRET\r\nHost: files.example:8443\r\n\r\n"),
        (
            "proxy",
            b"POST http://files.example/small HTTP/1.1\r\nHost: files.example\r\n"
            b"Content-Length: hunter2-SECRET\r\n\r\n",
        ),
        ("proxy", b"CONNECT hunter2-SECRET HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("proxy", b"CONNECT [hunter2-SECRET:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("proxy", b"CONNECT files.example:SECRET HTTP/1.1\r\nHost: x\r\n\r\n"),
    ],
)
def test_errors_never_quote_what_the_client_sent(
    served: Served,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    layer: str,
    request_bytes: bytes,
) -> None:
    """`Content-Length: hunter2-SECRET` inside a tunnel was logged as `"error": "invalid
    content-length 'hunter2-SECRET'"`: a header value (or a request line's parts) may be a
    credential, and neither the event log, nor stderr, nor the answer quotes any part of it."""
    client = Client(served)
    if layer == "tunnel":
        client.tunnel()
    client.send(request_bytes)
    status, headers, body = client.answer()
    assert status.split(" ")[1] in ("400", "501", "505")
    assert headers["x-fetchproxy-refused"] in ("not-http", "invalid-request")
    assert client.closed()
    assert served.proxy.stop() == 0
    out, err = capfd.readouterr()
    said = [
        served.log.read_text(),
        out,
        err,
        body.decode(),
        *(record.getMessage() for record in caplog.records),
    ]
    for text in said:  # the parser lowercases some values
        assert "secret" not in text.lower()
        assert "hunter2" not in text.lower()
    if layer == "tunnel":  # a bad request to the proxy itself is answered, not logged
        (event,) = read_events(served.log)
        assert (event["event"], event["reason"]) == ("refused", "not-http")
        assert isinstance(event["error"], str)

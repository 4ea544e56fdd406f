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
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from fetchproxy.ca import generate_ca, load_ca
from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.engine import ProxyStartError
from fetchproxy.keys.gitbody import canonical_body
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.replay import blobs
from fetchproxy.replay import server as replayserver
from fetchproxy.replay.book import MissingBodiesError
from fetchproxy.replay.certs import HostContexts
from fetchproxy.replay.server import ReplayServer
from fetchproxy.run.settings import ProxySettings
from fetchproxy.store import DiskStore
from tests.support.badblobs import (
    DEADLINE,
    SUBPROCESS_DEADLINE,
    make_not_regular,
    unblock_fifos,
)
from tests.support.cli import read_events
from tests.support.locks import make_fetch
from tests.support.proxy import ProxyThread

SMALL = b"small file\n" * 10
LARGE = bytes(range(256)) * 4096  # 1 MiB: streamed from the store
UPLOAD = b"0032want " + b"a" * 40 + b"\n00000009done\n"
ANSWER = b"the answer to the upload\n"
HOST = "files.example"
LONG_HOST = "my-bucket-name-with-a-long-name.s3.dualstack.eu-central-1.amazonaws.com"
MEDIUM = bytes(range(256)) * 800  # 200 KiB: answered from memory
HUGE = bytes(range(256)) * 10240  # 2.5 MiB: streamed in more than one chunk


@dataclass
class Served:
    proxy: ProxyThread
    ca_cert: Path
    log: Path
    clients: list[Client] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.proxy.url.rsplit(":", 1)[1])


def entry(url: str, body: bytes, digest: Digest, *, method: str = "GET", **fields: Any) -> Fetch:
    return make_fetch(method=method, url=url, status=200, digest=digest, size=len(body), **fields)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = DiskStore(tmp_path / "store")
    small, large, answer = store.put(SMALL), store.put(LARGE), store.put(ANSWER)
    medium, huge = store.put(MEDIUM), store.put(HUGE)
    upload_key = digest_bytes(canonical_body("/repo/git-upload-pack", None, UPLOAD))
    lock = Lock.from_fetches(
        [
            entry(f"https://{HOST}:8443/small", SMALL, small, content_type="text/plain"),
            entry(f"https://{HOST}:8443/large", LARGE, large),
            entry(f"http://{HOST}/plain", SMALL, small),
            entry(f"http://{HOST}:8080/tunnelled", SMALL, small),
            entry(f"https://{HOST}:8443/medium", MEDIUM, medium),
            entry(f"https://{HOST}:8443/huge", HUGE, huge),
            entry(f"https://{LONG_HOST}/small", SMALL, small),
            entry(f"https://{HOST}:8443/wrong-size", b"12345", small),  # a lock edited by hand
            entry(
                f"https://{HOST}:8443/repo/git-upload-pack",
                ANSWER,
                answer,
                method="POST",
                body_digest=upload_key,
            ),
        ]
    )
    write_lock(tmp_path / "fetchproxy.lock.toml", lock)
    confdir = tmp_path / "confdir"
    ca_cert = generate_ca("test CA").write(confdir)
    settings = ProxySettings(
        mode="replay",
        lock=tmp_path / "fetchproxy.lock.toml",
        store=store,
        confdir=confdir,
        listen_port=0,
        log=tmp_path / "events.jsonl",
    )
    proxy = ProxyThread(settings).start()
    assert isinstance(proxy.run.engine, ReplayServer)
    running = Served(proxy, ca_cert, tmp_path / "events.jsonl")
    yield running
    for client in running.clients:
        client.sock.close()
    if proxy.status is None:
        proxy.stop()


class Client:
    """One raw connection to the proxy; ``tunnel()`` CONNECTs and (by default) starts TLS."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.sock: socket.socket | ssl.SSLSocket = socket.create_connection(
            ("127.0.0.1", served.port), timeout=10
        )
        self.pending = b""
        served.clients.append(self)

    def tunnel(
        self, authority: str = f"{HOST}:8443", *, tls: bool = True, sni: str | None = HOST
    ) -> None:
        self.send(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        assert self.head() == "HTTP/1.1 200 Connection established"
        if tls:
            context = ssl.create_default_context(cafile=self.served.ca_cert)
            context.check_hostname = sni is not None
            self.sock = context.wrap_socket(self.sock, server_hostname=sni)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.pending += data
        return bool(data)

    def head(self) -> str:
        while b"\r\n\r\n" not in self.pending:
            assert self._fill(), f"closed before a whole head: {self.pending!r}"
        head, self.pending = self.pending.split(b"\r\n\r\n", 1)
        return head.decode()

    def answer(self, *, body: bool = True) -> tuple[str, dict[str, str], bytes]:
        lines = self.head().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", "0")) if body else 0
        while len(self.pending) < length:
            assert self._fill(), "closed before the whole body"
        data, self.pending = self.pending[:length], self.pending[length:]
        return lines[0], headers, data

    def closed(self) -> bool:
        try:
            return not self._fill() and not self.pending
        except (ConnectionResetError, ssl.SSLError):
            return True


def get(target: str, *headers: str, method: str = "GET", host: str = f"{HOST}:8443") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


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


def test_a_client_that_does_not_read_cannot_make_the_server_buffer_without_bound(
    served: Served,
) -> None:
    client = Client(served)
    client.tunnel()
    client.send(get("/medium"))
    assert client.answer()[2] == MEDIUM  # verified and cached: the answers below are instant
    count = 500  # 100 MB of answers
    client.send(get("/medium") * count)
    time.sleep(1)
    run = served.proxy.run
    assert isinstance(run.engine, ReplayServer)
    buffered = [c.transport.get_write_buffer_size() for c in run.engine.connections if c.transport]
    assert max(buffered) < 8 * 1024 * 1024  # the high-water mark (4 MiB) and one answer
    for _ in range(count):
        assert client.answer()[2] == MEDIUM
    assert served.proxy.stop() == 0
    assert served.proxy.replay.stats.served == count + 1


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


@pytest.fixture
def short_idle(monkeypatch: pytest.MonkeyPatch) -> float:
    """A server started after this one closes connections idle for 0.4 s."""
    monkeypatch.setattr(replayserver, "IDLE_TIMEOUT", 0.4)
    return replayserver.IDLE_TIMEOUT


def test_a_connection_idle_for_the_timeout_is_closed_and_one_in_use_is_not(
    short_idle: float, served: Served
) -> None:
    in_tunnel, plain, busy = Client(served), Client(served), Client(served)
    in_tunnel.tunnel()  # TLS up, then nothing
    plain.send(b"GET http://files.example/pl")  # half a request line, then nothing
    busy.tunnel()
    deadline = time.monotonic() + 4 * short_idle
    while time.monotonic() < deadline:  # a request every tenth of the timeout: never idle
        busy.send(get("/small"))
        assert busy.answer()[2] == SMALL
        time.sleep(short_idle / 10)
    assert in_tunnel.closed()
    assert plain.closed()
    busy.send(get("/small"))
    assert busy.answer()[2] == SMALL


def test_a_client_that_stops_reading_is_cut_off_after_the_idle_timeout(
    short_idle: float, served: Served
) -> None:
    client = Client(served)
    client.tunnel()
    client.send(get("/medium"))
    assert client.answer()[2] == MEDIUM
    count = 500  # 100 MB: far more than the socket buffers hold
    client.send(get("/medium") * count)
    time.sleep(4 * short_idle)
    run = served.proxy.run
    assert isinstance(run.engine, ReplayServer)
    assert run.engine.connections == set()  # cut off (reset: what it had not read is gone)
    got = 0
    with suppress(ConnectionResetError, ssl.SSLError, AssertionError):
        while client.answer()[2] == MEDIUM:
            got += 1
    assert got < count
    assert served.proxy.stop() == 0
    assert served.proxy.replay.stats.served < count + 1


def test_a_client_that_stops_reading_below_the_high_water_mark_is_cut_off_too(
    short_idle: float, served: Served
) -> None:
    run = served.proxy.run
    assert isinstance(run.engine, ReplayServer)
    client = Client(served)
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.tunnel()
    (connection,) = run.engine.connections
    assert connection.transport is not None
    for _ in range(400):  # one request at a time until answers back up behind the socket
        client.send(get("/medium"))
        time.sleep(0.02)
        if connection.transport.get_write_buffer_size() > 0:
            break
    assert 0 < connection.transport.get_write_buffer_size() < 4 * 1024 * 1024
    time.sleep(4 * short_idle)
    assert run.engine.connections == set()  # not left closing forever with unsent bytes


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

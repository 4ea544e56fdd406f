"""Record everything the test origin serves through the real proxy, then replay it.

Clients are curl (HTTP/1.1 and HTTP/2 to the proxy) and urllib. Replay runs with the origin
still up, and the origin counts its connections: replay must open none.
"""

from __future__ import annotations

import concurrent.futures
import errno
import http.client
import random
import resource
import shutil
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import blake3
import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.lock.file import load_lock
from fetchproxy.lock.journal import journal_path, read_journal
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.store import DiskBlobWriter, DiskStore, StoreError
from tests.support.cli import files_under, read_events
from tests.support.clients import Fetched, urllib_opener
from tests.support.origin import (
    CHUNKS,
    GZIP_TEXT,
    GZIP_WIRE,
    HTML_BODY,
    JSON_BODY,
    LARGE_SIZE,
    MEDIUM,
    SECRET_AUTH,
    SECRET_BODY,
    SECRET_TOKEN,
    SMALL,
    Origin,
    OriginPKI,
    echo_answer,
    large_chunks,
    standard_site,
    upload_pack_answer,
    upload_pack_body,
)
from tests.support.proxy import REPLAY_ENGINES, Paths, ProxyThread, Rig, StartProxy

WANT_A = "a" * 40
WANT_B = "b" * 40
UPLOAD_PACK_HEADERS = (
    ("Content-Type", "application/x-git-upload-pack-request"),
    ("Git-Protocol", "version=2"),
)


@dataclass(frozen=True)
class Case:
    """One fetch and what the origin answers to it."""

    name: str
    target: str
    status: int
    body: bytes
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    data: bytes | None = None


CASES = (
    Case("small", "/small.txt", 200, SMALL),
    Case("medium", "/medium.bin", 200, MEDIUM),
    Case("redirect 302", "/redirect/start", 302, b""),
    Case("redirect 301", "/redirect/middle", 301, b"moved\n"),
    Case("redirect 200", "/redirect/end", 200, b"the end of the redirect chain\n"),
    Case("404", "/missing.txt", 404, b"no such file on the test origin\n"),
    Case("gzip", "/gzip.txt", 200, GZIP_WIRE),
    Case("chunked", "/chunked.txt", 200, b"".join(CHUNKS)),
    Case("accept json", "/negotiate", 200, JSON_BODY, headers=(("Accept", "application/json"),)),
    Case("accept html", "/negotiate", 200, HTML_BODY, headers=(("Accept", "text/html"),)),
    Case("post alpha", "/api/echo", 200, echo_answer(b"alpha"), method="POST", data=b"alpha"),
    Case("post beta", "/api/echo", 200, echo_answer(b"beta"), method="POST", data=b"beta"),
    Case(
        "git upload-pack",
        "/repo.git/git-upload-pack",
        200,
        upload_pack_answer(upload_pack_body(WANT_A)),
        method="POST",
        headers=UPLOAD_PACK_HEADERS,
        data=upload_pack_body(WANT_A),
    ),
    Case(
        "secrets",
        f"/protected.bin?v=1&token={SECRET_TOKEN}",
        200,
        SECRET_BODY,
        headers=(("Authorization", SECRET_AUTH),),
    ),
    Case("head", "/medium.bin", 200, b"", method="HEAD"),
)
CLIENTS = ("urllib", "curl --http1.1", "curl --http2")
RECORDED_HEADERS = ("content-type", "content-encoding", "content-disposition")


def fetch(rig: Rig, proxy: ProxyThread, client: str, case: Case) -> Fetched:
    """``case`` fetched through ``proxy`` with ``client``."""
    if client == "urllib":
        return rig.get(
            proxy, case.target, method=case.method, headers=dict(case.headers), data=case.data
        )
    args: list[str] = []
    if case.method == "HEAD":
        args.append("--head")
    elif case.method != "GET":
        args += ["--request", case.method]
    for name, value in case.headers:
        args += ["--header", f"{name}: {value}"]
    if case.data is not None:
        body_file = rig.tmp / "request-body"
        body_file.parent.mkdir(exist_ok=True)
        body_file.write_bytes(case.data)
        args += ["--data-binary", f"@{body_file}"]
    return rig.curl(proxy, case.target, *args, http2=client.endswith("2"))


def entry(lock: Lock, method: str, url: str, **fields: object) -> Fetch:
    """The one lock entry for ``method url`` whose other fields match ``fields``."""
    found = [
        f
        for f in lock.fetches
        if f.key.method == method
        and f.key.url == url
        and all(f.to_dict().get(name.replace("_", "-")) == value for name, value in fields.items())
    ]
    assert len(found) == 1, f"{method} {url} {fields}: {found}"
    return found[0]


@REPLAY_ENGINES
def test_record_then_replay_everything_with_curl_and_urllib(rig: Rig) -> None:
    origin, base = rig.origin, rig.origin.base_url
    # ---- record: every case with every client; the client sees the origin's answer
    recorder = rig.start("record")
    recorded: dict[tuple[str, str], Fetched] = {}
    for case in CASES:
        for client in CLIENTS:
            got = fetch(rig, recorder, client, case)
            assert (got.status, got.body) == (case.status, case.body), (case.name, client)
            recorded[case.name, client] = got
    seen = origin.requests
    assert len(seen) == len(CASES) * len(CLIENTS)
    # identity encoding asked for, the secrets reached the origin, HTTP/2 spoken to it too
    assert {r.header("accept-encoding") for r in seen} == {"identity"}
    assert all(r.header("authorization") == SECRET_AUTH for r in seen if "token=" in r.target)
    assert {(r.protocol, r.header("user-agent", "")[:4]) for r in seen} == {
        ("HTTP/1.1", "Pyth"),
        ("HTTP/1.1", "curl"),
        ("HTTP/2", "curl"),
    }
    assert recorded["gzip", "urllib"].header("content-encoding") == "gzip"
    assert recorded["chunked", "urllib"].header("content-length") is None
    # the journal holds every fetch while the run is on; a finished run removes it
    journal = journal_path(rig.paths.lock)
    assert len(list(read_journal(journal))) == len(CASES) * len(CLIENTS)
    assert recorder.stop() == 0
    assert not journal.exists()

    lock = load_lock(rig.paths.lock)
    assert len(lock) == len(CASES)
    gzip_entry = entry(lock, "GET", f"{base}/gzip.txt")
    assert gzip_entry.content_encoding == "gzip"
    assert gzip_entry.digest == digest_bytes(GZIP_WIRE)
    assert gzip_entry.size == len(GZIP_WIRE)
    assert entry(lock, "GET", f"{base}/chunked.txt").size == sum(map(len, CHUNKS))
    assert entry(lock, "GET", f"{base}/redirect/start").location == f"{base}/redirect/middle"
    assert entry(lock, "GET", f"{base}/redirect/middle").location == f"{base}/redirect/end"
    assert entry(lock, "GET", f"{base}/missing.txt").status == 404
    json_entry = entry(lock, "GET", f"{base}/negotiate", accept="application/json")
    assert json_entry.digest == digest_bytes(JSON_BODY)
    assert entry(lock, "HEAD", f"{base}/medium.bin").content_length == len(MEDIUM)
    assert entry(lock, "GET", f"{base}/protected.bin?v=1").digest == digest_bytes(SECRET_BODY)
    assert entry(lock, "GET", f"{base}/medium.bin").content_disposition == (
        'attachment; filename="medium.bin"'
    )
    assert len([f for f in lock.fetches if f.key.body_digest is not None]) == 3

    # ---- replay with the origin still up: same status, recorded headers and bytes; no upstream
    origin.reset()
    replayer = rig.start("replay")
    for case in CASES:
        for client in CLIENTS:
            was = recorded[case.name, client]
            got = fetch(rig, replayer, client, case)
            what = (case.name, client)
            assert (got.status, got.body) == (was.status, was.body), what
            for name in RECORDED_HEADERS:
                assert got.header(name) == was.header(name), (what, name)
            if was.header("location") is not None:
                url = origin.url(case.target)
                assert urljoin(url, got.header("location", "")) == urljoin(
                    url, was.header("location", "")
                ), what
            length = len(MEDIUM) if case.method == "HEAD" else len(case.body)
            assert got.header("content-length") == str(length), what
            assert "set-cookie" not in got.header_names(), what
            assert "x-fetchproxy-refused" not in got.header_names(), what
            h2 = client.endswith("2") and replayer.client_protocol == "HTTP/2"
            assert got.protocol == ("HTTP/2" if h2 else "HTTP/1.1"), what
    assert replayer.replay.stats.served == len(CASES) * len(CLIENTS)
    assert replayer.replay.stats.refused == 0
    assert replayer.stop() == 0
    assert origin.connections == 0
    assert origin.requests == []


@REPLAY_ENGINES
def _ranges(size: int) -> list[tuple[str, int, int]]:
    return [
        ("bytes=100-199", 100, 199),
        ("bytes=-10", size - 10, size - 1),
        (f"bytes={size - 5}-", size - 5, size - 1),
        (f"bytes=7-{size + 1000}", 7, size - 1),
    ]


def _headers(got: Fetched) -> tuple[tuple[str, str], ...]:
    """An answer's headers but for ``connection``, which says how the hop ends."""
    return tuple((name, value) for name, value in got.headers if name != "connection")


def _ranged_answers(rig: Rig, proxy: ProxyThread) -> list[tuple[object, ...]]:
    """Every range answer for the small and the medium body, header by header."""
    answers: list[tuple[object, ...]] = []
    for target, body in (("/small.txt", SMALL), ("/medium.bin", MEDIUM)):
        size = len(body)
        for spec, start, end in _ranges(size):
            got = rig.get(proxy, target, headers={"Range": spec})
            assert got.status == 206, (target, spec)
            assert got.body == body[start : end + 1], (target, spec)
            assert got.header("content-range") == f"bytes {start}-{end}/{size}"
            assert got.header("content-length") == str(end - start + 1)
            answers.append((target, spec, got.status, _headers(got)))
        beyond = rig.get(proxy, target, headers={"Range": f"bytes={size}-"})
        assert (beyond.status, beyond.body) == (416, b"")
        assert beyond.header("content-range") == f"bytes */{size}"
        ranged = rig.curl(proxy, target, "--range", "1-3", http2=True)
        assert (ranged.status, ranged.body) == (206, body[1:4])
        answers.append((target, "416", beyond.status, _headers(beyond)))
        whole = rig.get(proxy, target)
        answers.append((target, "whole", whole.status, _headers(whole), whole.body == body))
        head = rig.get(proxy, target, method="HEAD")
        answers.append((target, "HEAD", head.status, _headers(head)))
    return answers


@REPLAY_ENGINES
def test_replay_follows_the_redirect_chain_and_answers_ranges_from_the_blob(rig: Rig) -> None:
    """Record answers a client's Range from the origin's whole body (and locks the whole
    body), the way replay answers it from the blob: the same statuses, bytes and headers,
    header by header (the origin's ETag and Date included: neither reaches the client)."""
    recorder = rig.start("record")
    follow = rig.curl(recorder, "/redirect/start", "--location")
    assert (follow.status, follow.body) == (200, b"the end of the redirect chain\n")
    recorded = _ranged_answers(rig, recorder)
    assert {r.header("range") for r in rig.origin.requests} == {None}  # the origin: whole bodies
    recorder.stop()
    lock = load_lock(rig.paths.lock)
    assert entry(lock, "GET", rig.origin.url("/medium.bin")).size == len(MEDIUM)

    rig.origin.reset()
    replayer = rig.start("replay")
    for http2 in (False, True):
        follow = rig.curl(replayer, "/redirect/start", "--location", http2=http2)
        assert (follow.status, follow.body) == (200, b"the end of the redirect chain\n")
    # the small body comes from memory, the medium one streams from the blob server
    assert _ranged_answers(rig, replayer) == recorded
    replayer.stop()
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_gzip_body_is_recorded_and_replayed_as_sent_and_identity_is_asked_for(rig: Rig) -> None:
    recorder = rig.start("record")
    for http2 in (False, True):
        # curl --compressed asks for gzip itself and decodes what it gets
        got = rig.curl(recorder, "/gzip.txt", "--compressed", http2=http2)
        assert got.body == GZIP_TEXT
        seen = rig.curl(recorder, "/seen-encoding", "--compressed", http2=http2)
        assert seen.body == b'{"accept-encoding": "identity"}'
    recorder.stop()
    rig.origin.reset()
    replayer = rig.start("replay")
    raw = rig.get(replayer, "/gzip.txt")
    assert (raw.body, raw.header("content-encoding")) == (GZIP_WIRE, "gzip")
    assert rig.curl(replayer, "/gzip.txt", "--compressed").body == GZIP_TEXT
    replayer.stop()
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_git_upload_pack_keys_on_what_selects_the_answer_not_on_the_agent(rig: Rig) -> None:
    headers = dict(UPLOAD_PACK_HEADERS)
    target = "/repo.git/git-upload-pack"
    recorder = rig.start("record")
    for want in (WANT_A, WANT_B):
        body = upload_pack_body(want, agent="git/2.39.5")
        got = rig.get(recorder, target, method="POST", headers=headers, data=body)
        assert got.body == f"packfile for {want}\n".encode()
    recorder.stop()
    rig.origin.reset()
    replayer = rig.start("replay")
    for want in (WANT_A, WANT_B):
        body = upload_pack_body(want, agent="git/2.43.0")
        got = rig.get(replayer, target, method="POST", headers=headers, data=body)
        assert (got.status, got.body) == (200, f"packfile for {want}\n".encode())
    body = upload_pack_body(WANT_A, WANT_B)
    other = rig.get(replayer, target, method="POST", headers=headers, data=body)
    assert (other.status, other.header("x-fetchproxy-refused")) == (403, "not-in-lock")
    replayer.stop()
    assert rig.origin.connections == 0


@REPLAY_ENGINES
def test_no_secret_reaches_the_lock_the_logs_the_journal_or_the_store(
    rig: Rig, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    secrets = [SECRET_TOKEN, SECRET_AUTH.split()[1], "cookie-5ecret"]
    target = f"/protected.bin?token={SECRET_TOKEN}&v=1"
    headers = {"Authorization": SECRET_AUTH, "Cookie": "jar=cookie-5ecret"}
    paths = rig.paths
    journal = journal_path(paths.lock)

    def leaks(*expected: Path) -> list[str]:
        """Secrets in any file or output so far; ``expected`` files (and a blob) must be read."""
        found, read = [], set()
        for path in files_under(paths.lock.parent):
            if path.parent == paths.confdir or rig.tmp in path.parents:
                continue  # our CA; the clients' own downloads
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # a store temp file committed meanwhile: its blob is read instead
            read.add(path)
            found += [f"{path}: {secret}" for secret in secrets if secret.encode() in data]
        found += [f"{path}: never read" for path in expected if path not in read]
        if not any(paths.store / "blake3" in path.parents for path in read):
            found.append(f"{paths.store}: no blob read")
        out, err = capfd.readouterr()
        found += [f"output: {s}" for s in secrets if s in out + err + caplog.text]
        return found

    recorder = rig.start("record")
    assert rig.get(recorder, target, headers=headers).body == SECRET_BODY
    assert rig.curl(recorder, target, "--header", f"Authorization: {SECRET_AUTH}").status == 200
    assert rig.get(recorder, target + "&x=1", headers={"Authorization": "Basic eA=="}).status == 401
    assert leaks(journal, paths.log) == []
    recorder.stop()
    assert len(load_lock(paths.lock)) == 2
    assert leaks(paths.lock, paths.log) == []

    rig.origin.reset()
    replayer = rig.start("replay")
    # the token is not part of the key: another token value is the same fetch
    other_token = target.replace(SECRET_TOKEN, "another-token")
    assert rig.get(replayer, other_token, headers=headers).body == SECRET_BODY
    refused = rig.get(replayer, target + "&unknown=1", headers=headers)
    assert refused.status == 403
    assert (
        refused.body
        == (
            f"fetchproxy: refused GET {rig.origin.base_url}/protected.bin?unknown=1&v=1: "
            f"not in the lock {paths.lock}\n"
        ).encode()
    )
    replayer.stop()
    assert rig.origin.connections == 0
    assert len(read_events(paths.log)) == 1
    assert leaks(paths.lock, paths.log) == []


@REPLAY_ENGINES
def test_thirty_two_concurrent_clients_get_the_right_bytes_in_replay(rig: Rig) -> None:
    bodies = {"/small.txt": SMALL, "/medium.bin": MEDIUM, "/chunked.txt": b"".join(CHUNKS)}
    recorder = rig.start("record")
    for target in bodies:
        rig.get(recorder, target)
    recorder.stop()

    rig.origin.reset()
    replayer = rig.start("replay")
    start = threading.Barrier(32)

    def client(number: int) -> list[str]:
        order = list(bodies)
        random.Random(number).shuffle(order)
        start.wait(timeout=30)
        wrong = []
        for target in order * 2:
            got = rig.get(replayer, target)
            if (got.status, got.body) != (200, bodies[target]):
                wrong.append(f"client {number}: {target}: {got.status}, {len(got.body)} bytes")
        return wrong

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(client, range(32)))
    assert [w for ws in results for w in ws] == []
    assert replayer.replay.stats.served == 32 * 2 * len(bodies)
    replayer.stop()
    assert rig.origin.connections == 0


def test_the_lock_does_not_depend_on_order_or_concurrency(rig: Rig) -> None:
    cases = [c for c in CASES if c.name != "medium"]
    sequential = rig.paths.lock.with_name("sequential.toml")
    concurrent_lock = rig.paths.lock.with_name("concurrent.toml")

    recorder = rig.start("record", lock=sequential)
    for case in cases:
        fetch(rig, recorder, "urllib", case)
    recorder.stop()

    recorder = rig.start("record", lock=concurrent_lock)
    shuffled = cases[::-1] * 2
    random.Random(1).shuffle(shuffled)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda case: fetch(rig, recorder, "urllib", case), shuffled))
    recorder.stop()
    assert concurrent_lock.read_bytes() == sequential.read_bytes()
    assert len(load_lock(sequential)) == len(cases)


def test_an_origin_that_answers_differently_is_named_in_a_warning(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = rig.start("record")
    first = rig.get(recorder, "/unstable")
    second = rig.get(recorder, "/unstable")
    assert (first.body, second.body) == (b"answer number 1\n", b"answer number 2\n")
    recorder.stop()
    url = rig.origin.url("/unstable")
    warnings = [r.getMessage() for r in caplog.records if r.name == "fetchproxy.record"]
    # which answer is stored last depends on when each finished writing to the store
    kept = load_lock(rig.paths.lock).fetches[0].digest
    answers = {digest_bytes(first.body), digest_bytes(second.body)}
    assert kept in answers
    (dropped,) = answers - {kept}
    assert warnings == [
        f"GET {url} answered differently within one run ({dropped}, 16 bytes, then {kept}, "
        "16 bytes): the origin is not deterministic; the lock keeps the last answer"
    ]
    assert read_events(rig.paths.log) == [
        {"event": "drift-in-run", "key": {"method": "GET", "url": url}}
    ]


def test_server_errors_reach_the_client_but_never_the_lock(
    rig: Rig, capfd: pytest.CaptureFixture[str]
) -> None:
    recorder = rig.start("record")
    got = rig.get(recorder, "/server-error")
    assert (got.status, got.body) == (503, b"try again later\n")
    assert rig.get(recorder, "/small.txt").status == 200
    recorder.stop()
    assert [f.key.url for f in load_lock(rig.paths.lock).fetches] == [rig.origin.url("/small.txt")]
    assert capfd.readouterr().err.endswith(
        f"fetchproxy: recorded 1 fetch (1020 B) into {rig.paths.lock}; "
        "1 passed through unlocked (5xx or websocket)\n"
    )


def test_the_last_fetch_before_stop_is_in_the_lock(rig: Rig) -> None:
    """A client can have the whole body before the proxy has stored it: stop() must wait."""
    for attempt in range(5):
        lock = rig.paths.lock.with_name(f"attempt-{attempt}.toml")
        recorder = rig.start("record", lock=lock)
        assert rig.get(recorder, "/medium.bin").body == MEDIUM
        recorder.stop()
        assert [f.key.url for f in load_lock(lock).fetches] == [rig.origin.url("/medium.bin")]


def test_a_keep_alive_client_of_a_named_origin_is_served_on_one_upstream_connection(
    origin_pki: OriginPKI, start_proxy: StartProxy, paths: Paths
) -> None:
    """Record dials the address its origin check looked at, but the connection stays the
    name's: mitmproxy gives a request an open server connection only when it is to the address
    the request asked for (the name). Left at the address, each request of a keep-alive client
    dialled anew, and the sixth on one client connection waited forever: mitmproxy holds at most
    five connections to one server address for a client connection (Maven stalled so)."""
    # the origin listens where record dials "localhost": the name's first address
    address = str(socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)[0][4][0])
    with Origin(standard_site(), origin_pki, address=(address, 0), name="localhost") as origin:
        recorder = start_proxy("record")
        host, port = recorder.url.removeprefix("http://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(paths.ca_cert))
        client = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
        client.set_tunnel("localhost", origin.port)  # one CONNECT, then keep-alive requests
        answers = []
        try:
            for n in range(8):
                client.request("GET", f"/small.txt?n={n}")
                response = client.getresponse()
                answers.append((response.status, response.read()))
        finally:
            client.close()
        assert recorder.stop() == 0
    assert answers == [(200, SMALL)] * 8
    assert origin.connections == 1
    assert len(load_lock(paths.lock)) == 8


@REPLAY_ENGINES
def test_a_200_mb_body_streams_through_record_and_replay(rig: Rig) -> None:
    expected = blake3.blake3()
    for chunk in large_chunks():
        expected.update(chunk)
    url = rig.origin.url("/large.bin")

    def download(proxy: ProxyThread) -> tuple[int, str, int]:
        hasher, size = blake3.blake3(), 0
        opener = urllib_opener(proxy.url, rig.paths.ca_cert)
        with opener.open(url, timeout=120) as response:
            while chunk := response.read(1 << 20):
                hasher.update(chunk)
                size += len(chunk)
            return response.status, hasher.hexdigest(), size

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    recorder = rig.start("record")
    assert download(recorder) == (200, expected.hexdigest(), LARGE_SIZE)
    recorder.stop()
    locked = load_lock(rig.paths.lock).fetches
    assert [(f.digest, f.size) for f in locked] == [(f"blake3:{expected.hexdigest()}", LARGE_SIZE)]

    rig.origin.reset()
    replayer = rig.start("replay")
    assert download(replayer) == (200, expected.hexdigest(), LARGE_SIZE)
    replayer.stop()
    assert rig.origin.connections == 0
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # origin, proxy and client share this process: buffering the body anywhere costs 200 MB
    assert peak_after - peak_before < 100 * 1024 * 1024
    shutil.rmtree(rig.paths.store)  # 200 MB that pytest would otherwise keep around


def test_http2_is_off_by_default_so_both_legs_speak_http1(rig: Rig) -> None:
    """HTTP/2 costs throughput in mitmproxy (docs/benchmarks.md): a client that offers it gets
    HTTP/1.1, and so does the origin."""
    recorder = rig.start("record", http2=False)
    got = rig.curl(recorder, "/small.txt", http2=True)
    assert (got.status, got.protocol) == (200, "HTTP/1.1")
    assert recorder.stop() == 0
    assert [r.protocol for r in rig.origin.requests] == ["HTTP/1.1"]


class _FullDiskWriter(DiskBlobWriter):
    """Fills the disk when it publishes its blob."""

    def _link(self, target: Path) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device", str(target))


class _FullDisk(DiskStore):
    def writer(self) -> DiskBlobWriter:
        return _FullDiskWriter(self)


def test_an_answer_the_store_cannot_keep_is_loud_and_leaves_the_lock(
    rig: Rig, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = rig.start("record", store=_FullDisk(rig.paths.store))
    assert rig.get(recorder, "/small.txt").status == 200  # the client still gets its answer
    assert recorder.stop() == 1
    assert not rig.paths.lock.exists()
    assert not journal_path(rig.paths.lock).exists()  # nothing was recorded
    err = capfd.readouterr().err
    url = rig.origin.url("/small.txt")
    assert f"record: GET {url} was not recorded: cannot store blob" in caplog.text
    assert "No space left on device" in caplog.text
    assert f"recorded 0 fetches (0 B) for {rig.paths.lock}; 1 not stored" in err
    assert f"1 answer(s) could not be stored: {rig.paths.lock} is unchanged" in err
    events = read_events(rig.paths.log)
    assert [(e["event"], e["key"]["url"]) for e in events] == [("unstored", url)]  # type: ignore[index]


class _FillsUpWriter(DiskBlobWriter):
    """The disk fills up after the first chunk of a body."""

    def _write(self, chunk: bytes) -> None:
        if self.size:  # as DiskBlobWriter reports an OSError of its own
            raise StoreError(f"cannot write to {self.temp_path}: No space left on device")
        super()._write(chunk)


class _FillsUp(DiskStore):
    def writer(self) -> DiskBlobWriter:
        return _FillsUpWriter(self)


def test_a_disk_that_fills_up_mid_body_still_answers_the_client_and_leaves_the_lock(
    rig: Rig, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = rig.start("record", store=_FillsUp(rig.paths.store))
    got = rig.get(recorder, "/medium.bin")
    assert (got.status, got.body) == (200, MEDIUM)  # every byte, although none was stored
    assert recorder.stop() == 1
    assert not rig.paths.lock.exists()
    assert "No space left on device" in caplog.text
    assert (
        f"1 answer(s) could not be stored: {rig.paths.lock} is unchanged" in capfd.readouterr().err
    )
    assert list(DiskStore(rig.paths.store).digests()) == []
    assert [t.path for t in DiskStore(rig.paths.store).temp_files()] == []


def test_a_lock_that_cannot_be_written_at_the_end_keeps_the_journal(
    rig: Rig, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fetchproxy.record import book as record_book

    def full(path: Path, lock: Lock) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(record_book, "write_lock", full)
    recorder = rig.start("record")
    assert rig.get(recorder, "/small.txt").status == 200
    assert recorder.stop() == 1
    err = capfd.readouterr().err
    assert f"cannot write {rig.paths.lock}: No space left on device" in err
    assert f"what it recorded is in {journal_path(rig.paths.lock)}" in err
    assert len(list(read_journal(journal_path(rig.paths.lock)))) == 1

"""Inputs that cannot lie: what hostile origins, builds and locks tried, and what they get.

Each test is a defect a review reproduced: a lock that named a server its bytes never came
from, header bytes that crashed record or made a lock its own loader refused, escape sequences
that rewrote what a reviewer saw, secrets in a ``location`` or an error text, IPv6 literals that
could not be recorded, hop-by-hop proxy credentials sent on to origins.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fetchproxy.cli import main
from fetchproxy.digest import EMPTY
from fetchproxy.lock.file import load_lock, parse_lock, render_lock
from fetchproxy.lock.model import Lock
from tests.sandbox.conftest import needs_root
from tests.support.cli import read_events, run_command
from tests.support.locks import make_fetch
from tests.support.proxy import REPLAY_ENGINES, ProxyThread, Rig
from tests.support.raw_origin import RawOrigin, answer

REFUSED = "x-fetchproxy-refused"


def _raw(proxy: ProxyThread, request: bytes) -> bytes:
    """Send ``request`` to the proxy as it is; the whole answer."""
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and b"connection: close" in data.lower():
                head, _, body = data.partition(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                if length and len(body) >= length[0]:
                    break
        return data


# ---------------------------------------------------------------- where the bytes came from


@REPLAY_ENGINES
@pytest.mark.parametrize("mode", ["record", "replay"])
def test_a_host_header_naming_another_server_is_refused(rig: Rig, mode: str) -> None:
    """Keyed by its Host header, the answer of 127.0.0.1:PORT was locked as files.example.org's,
    and replay then served those bytes for the innocent URL."""
    proxy = rig.start(mode) if mode == "record" else _replayer(rig)
    tunnelled = rig.curl(proxy, "/small.txt", "-H", "Host: files.example.org")
    assert (tunnelled.status, tunnelled.header(REFUSED)) == (400, "host-mismatch")
    assert b"names another server than the one it was sent to" in tunnelled.body
    absolute = _raw(
        proxy,
        f"GET http://127.0.0.3:{rig.origin.port}/pkg/foo.tar.gz HTTP/1.1\r\n"
        "Host: files.example.org\r\nConnection: close\r\n\r\n".encode(),
    )
    assert absolute.startswith(b"HTTP/1.1 400 ")
    assert b"x-fetchproxy-refused: host-mismatch" in absolute.lower()
    proxy.stop()
    events = [e for e in read_events(rig.paths.log) if e["event"] == "refused"]
    assert [e["reason"] for e in events] == ["host-mismatch", "host-mismatch"]
    if mode == "record":
        assert rig.origin.requests == []
        assert "files.example.org" not in rig.paths.lock.read_text()


def _replayer(rig: Rig) -> ProxyThread:
    recorder = rig.start("record")
    assert rig.get(recorder, "/small.txt").status == 200
    assert recorder.stop() == 0
    rig.origin.reset()
    return rig.start("replay")


@REPLAY_ENGINES
@pytest.mark.parametrize("mode", ["record", "replay"])
def test_a_tls_server_name_naming_another_server_is_refused(rig: Rig, mode: str) -> None:
    """Inside a tunnel to a name, the TLS server name must be that name: the origin proves its
    identity for the SNI, and the lock must not name another server. Both replay engines decide
    alike (the direct server once ignored the server name)."""
    proxy = rig.start(mode) if mode == "record" else _replayer(rig)
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(rig.paths.ca_cert))
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"CONNECT localhost:{rig.origin.port} HTTP/1.1\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        with context.wrap_socket(sock, server_hostname="evil.example.net") as tls:
            tls.sendall(
                f"GET /small.txt HTTP/1.1\r\nHost: localhost:{rig.origin.port}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            got = b""
            while chunk := tls.recv(65536):
                got += chunk
    assert got.startswith(b"HTTP/1.1 400 ")
    assert b"its TLS server name (evil.example.net) names another server" in got
    proxy.stop()
    if mode == "record":
        assert rig.origin.requests == []
    refused = [e for e in read_events(rig.paths.log) if e["event"] == "refused"]
    assert [e["reason"] for e in refused] == ["host-mismatch"]


# ------------------------------------------------------------------------------ header bytes

_VALUES = st.binary(min_size=1, max_size=40).filter(
    lambda b: (
        b"\r" not in b
        and b"\n" not in b
        and not b.startswith((b" ", b"\t"))
        and not b.endswith((b" ", b"\t"))
    )
)


def _header_bytes(proxy: ProxyThread, origin: RawOrigin, path: str) -> dict[bytes, bytes]:
    got = _raw(
        proxy,
        f"GET {origin.url(path)} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    head = got.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]
    return {line.partition(b":")[0].lower(): line.partition(b":")[2].strip(b" \t") for line in head}


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(_VALUES, min_size=12, max_size=12))
def test_any_header_bytes_round_trip_or_are_left_out_and_counted(
    rig: Rig, values: list[bytes]
) -> None:
    """Any bytes an origin sends as a kept header's value: the client gets the same bytes in
    record and in replay (record → lock → load → replay), or the header is left out of both
    and the run counts it; never a crash, never a lock its own loader refuses. (A non-UTF-8
    byte crashed record; a NUL made a lock the loader refused.) Printable text is the
    origin's own bytes."""
    for path in (rig.paths.lock, rig.paths.log):
        path.unlink(missing_ok=True)
    paths = [f"/h/{i}" for i in range(len(values))]
    answers = {
        path: answer("200 OK", [(b"content-disposition", value), (b"link", value)], b"body\n")
        for path, value in zip(paths, values, strict=True)
    }
    names = (b"content-disposition", b"link")
    with RawOrigin(answers) as origin:
        recorder = rig.start("record")
        recorded = [_header_bytes(recorder, origin, path) for path in paths]
        status = recorder.stop()
        lock = load_lock(rig.paths.lock)  # never a lock its own loader refuses
        assert status == 0
        assert len(lock) == len(values)
        dropped = sum(1 for e in read_events(rig.paths.log) if e["event"] == "headers-not-kept")
        assert recorder.record.stats.headers_not_kept == dropped
        replayer = rig.start("replay", engine="direct")
        replayed = [_header_bytes(replayer, origin, path) for path in paths]
        replayer.stop()
    for value, before, after in zip(values, recorded, replayed, strict=True):
        for name in names:
            assert before.get(name) == after.get(name), (name, value, before, after)
            if value.isascii() and value.decode().isprintable():
                assert after.get(name) == value.strip(b" \t"), (name, value)
    assert dropped == sum(1 for r in replayed if b"link" not in r)


# ---------------------------------------------------------------------- what reviewers see


def test_escape_sequences_never_reach_a_reviewers_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ESC[8m` in a hand-edited lock concealed the rest of `lock diff`, `lock show` and
    record's own end-of-run diff; every control character is shown escaped, as git does."""
    old = tmp_path / "old.lock.toml"
    new = tmp_path / "new.lock.toml"
    head = "# @generated by fetchproxy record — review changes, do not edit by hand.\nversion = 1\n"
    entry = (
        '\n[[fetch]]\nmethod = "GET"\nurl = "https://h/a"\naccept = "text/plain\\u001B[8m"\n'
        f'status = 200\ndigest = "blake3:{"0" * 64}"\nsize = 1\n'
        'content-type = "text/plain\\u202Eevil"\n'
    )
    old.write_text(head)
    new.write_text(head + entry)
    run_command("lock", "diff", str(old), str(new))
    run_command("lock", "show", str(new))
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "text/plain\\x1b[8m" in out
    assert "text/plain\\u202eevil" in out


@REPLAY_ENGINES
def test_a_request_header_with_a_control_character_is_refused(rig: Rig) -> None:
    """No HTTP header may hold one (RFC 9110): keyed, it would reach the lock and the reviewer."""
    proxy = rig.start("record")
    got = _raw(
        proxy,
        f"GET http://127.0.0.1:{rig.origin.port}/small.txt HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{rig.origin.port}\r\nAccept: text/plain\x1b[8m\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    assert got.startswith(b"HTTP/1.1 400 ")
    assert b"has a control character" in got
    assert b"\x1b" not in got.partition(b"\r\n\r\n")[2]  # the refusal escapes what it quotes
    proxy.stop()
    assert rig.origin.requests == []


# --------------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "location",
    [
        "http://user:SECRET@bad..host/x",
        "https://u:SECRET@127.0.0.2:99999/p",
        "https://bad..host/cb#access_token=SECRET",
        "myapp://callback#access_token=SECRET",
    ],
)
def test_no_user_info_or_fragment_of_a_location_reaches_the_lock(rig: Rig, location: str) -> None:
    with RawOrigin({"/r": answer("302 Found", [(b"location", location.encode())])}) as origin:
        recorder = rig.start("record")
        assert rig.get(recorder, origin.url("/r")).status == 302
        assert recorder.stop() == 0
    text = rig.paths.lock.read_text()
    assert "SECRET" not in text
    (entry,) = load_lock(rig.paths.lock).fetches
    assert entry.location is not None
    assert "@" not in entry.location
    assert "#" not in entry.location


@pytest.mark.parametrize(
    ("location", "what"),
    [
        ("http://user:SECRET@bad..host/x", "userinfo"),
        ("https://u:SECRET@127.0.0.2:99999/p", "userinfo"),
        ("https://bad..host/cb#access_token=SECRET", "a fragment"),
        ("myapp://callback#access_token=SECRET", "a fragment"),
        ("myapp://u:SECRET@callback", "userinfo"),
    ],
)
def test_a_lock_whose_location_has_user_info_or_a_fragment_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], location: str, what: str
) -> None:
    """A hand-edited (or old) lock with a secret in a ``location`` passed `lock verify`, and
    `lock show` printed it: every command that loads the lock refuses it, naming the line and
    what is wrong, never the secret."""
    lock = tmp_path / "fetchproxy.lock.toml"
    entry = make_fetch(
        url="https://files.example.org/r", status=302, location=location, digest=EMPTY, size=0
    )
    lock.write_text(render_lock(Lock.from_fetches([entry])))  # the canonical form: the fast path
    line = lock.read_text().splitlines().index(f'location = "{location}"') + 1
    commands = [
        ["lock", "verify", "--lock", str(lock)],
        ["lock", "show", str(lock)],
        ["replay", "--lock", str(lock), "--no-sandbox", "--", "true"],
    ]
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert "SECRET" not in out + err, argv
        assert f"{lock}:{line}: fetch[0].location: has {what}," in err, argv
    edited = "# edited by hand\n" + lock.read_text()  # not the writer's bytes: the slower paths
    for text in (edited, edited.replace('"\n', '" # \n')):
        with pytest.raises(ValueError, match=f"^x:{line + 1}: fetch\\[0\\].location: has {what},"):
            parse_lock(text, path="x")


def test_error_texts_quoting_upstream_bytes_are_cut(rig: Rig) -> None:
    """mitmproxy's `Bad HTTP response line: b'… ?token=SECRET …'` reached the event log."""
    origin_answers = {"/bad": b"HTTP/1.1 2OO /x?token=SECRET\r\n\r\n"}
    with RawOrigin(origin_answers) as origin:
        recorder = rig.start("record")
        rig.get(recorder, origin.url("/bad"))
        recorder.stop()
    assert "SECRET" not in rig.paths.log.read_text()
    assert [e["event"] for e in read_events(rig.paths.log)] == ["failed"]


def test_proxy_credentials_are_not_sent_on_to_the_origin(rig: Rig) -> None:
    recorder = rig.start("record")
    got = rig.get(
        recorder,
        "/small.txt",
        headers={"Proxy-Authorization": "Basic c2VjcmV0", "Proxy-Connection": "keep-alive"},
    )
    assert got.status == 200
    recorder.stop()
    (request,) = rig.origin.requests
    assert request.header("proxy-authorization") is None
    assert request.header("proxy-connection") is None


# ---------------------------------------------------------------------------- IPv6 literals


@REPLAY_ENGINES
def test_ipv6_literal_urls_are_recorded_and_replayed(rig: Rig) -> None:
    """`http://[::1]:PORT/x` was refused as having "no host": the brackets were lost."""
    with RawOrigin(
        {"/x": answer("200 OK", [(b"content-type", b"text/plain")], b"six\n")}, host="::1"
    ) as origin:
        recorder = rig.start("record")
        assert rig.get(recorder, origin.url("/x")).body == b"six\n"
        assert recorder.stop() == 0
    assert [f.key.url for f in load_lock(rig.paths.lock).fetches] == [origin.url("/x")]
    replayer = rig.start("replay")
    assert rig.get(replayer, origin.url("/x")).body == b"six\n"
    assert replayer.stop() == 0


# ------------------------------------------------------------------------------ hostile locks


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_a_lock_that_is_not_a_regular_file_is_refused_without_reading_it(
    tmp_path: Path, kind: str
) -> None:
    """A lock linked to /dev/zero grew to 4.8 GB of memory in 6 s; a FIFO would hang."""
    lock = tmp_path / "fetchproxy.lock.toml"
    if kind == "dev-zero":
        lock.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    assert main(["lock", "verify", "--lock", str(lock)]) == 2


def test_a_deeply_nested_lock_is_refused_with_the_file() -> None:
    text = "version = 1\nx = " + "[" * 50_000 + "]" * 50_000 + "\n"
    with pytest.raises(ValueError, match="nested more deeply than TOML can be read"):
        parse_lock(text, path="deep.lock.toml")


# -------------------------------------------------------------------------- full disks, links


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of 256 KiB, unmounted afterwards whatever happens."""
    needs_root()
    disk = tmp_path / "small-disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_full_lock_directory_is_said_once_and_keeps_the_lock(
    rig: Rig, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk under the journal gave 20 `Addon error` lines and a traceback."""
    lock = small_disk / "app.lock.toml"
    log = small_disk / "events.jsonl"
    first = rig.start("record", lock=lock, log=log)
    assert rig.get(first, "/small.txt").status == 200
    assert first.stop() == 0
    before = lock.read_bytes()
    assert len(load_lock(lock)) == 1
    caplog.clear()
    recorder = rig.start("record", lock=lock, log=log)
    filler = small_disk / "filler"
    with filler.open("wb", buffering=0) as fill, contextlib.suppress(OSError):
        while True:
            fill.write(b"\0" * 4096)
    for _ in range(20):
        assert rig.get(recorder, "/small.txt?n=" + os.urandom(4).hex()).status == 200
    filler.unlink()  # room again by the end: what keeps the lock is the rule, not the disk
    assert recorder.stop() == 1
    assert lock.read_bytes() == before
    said = [r.getMessage() for r in caplog.records if "No space left on device" in r.getMessage()]
    assert len(said) == 2, said  # the journal once; the event log once
    assert [m.startswith(f"record: cannot write {lock}.journal: ") for m in said] == [True, False]
    assert said[1].startswith(f"cannot write {log}: ")
    assert not [r for r in caplog.records if "Addon error" in r.getMessage()]
    assert not [r for r in caplog.records if "Traceback" in r.getMessage()]


def test_an_event_log_that_is_a_link_is_never_written_through(rig: Rig, tmp_path: Path) -> None:
    """A replay truncated the file a planted link led to."""
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "events.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        rig.start("record", log=link)
    assert target.read_text() == "keep me\n"

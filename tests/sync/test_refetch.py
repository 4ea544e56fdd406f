"""``fetchproxy store fetch``: the plan (pure), and the command against a live HTTPS origin on
127.0.0.70 with its own CA — one entry drifted, one gone, one that needed a token, one git
negotiation, a HEAD — and with a remote store to push what it fetched."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from fetchproxy.digest import EMPTY, digest_bytes
from fetchproxy.keys.request import ANY_ACCEPT, RequestKey
from fetchproxy.lock.file import write_lock
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.record.origins import OriginPolicy
from fetchproxy.record.tokens import redacted_token_answer
from fetchproxy.store import DiskStore
from fetchproxy.store.remote_url import RemoteURL
from fetchproxy.sync.refetch import plan_refetch, request_headers
from tests.support.cli import run_fetchproxy
from tests.support.s3 import S3Endpoint, make_remote
from tests.sync.origins import FileOrigin

A = os.urandom(150_000)
B = os.urandom(70_000)
TOKEN = "tok-3f9a1c-never-shown"


def entry(method: str, url: str, body: bytes, status: int = 200, **key: str) -> Fetch:
    digest = digest_bytes(body)
    return Fetch(
        key=RequestKey(method=method, url=url, **key),  # type: ignore[arg-type]
        status=status,
        digest=digest,
        size=len(body),
    )


# ---------------------------------------------------------------------------------------- plan


def test_the_plan() -> None:
    post = entry("POST", "https://git.example/r.git/git-upload-pack", b"pack",
                 body_digest=digest_bytes(b"want x"))  # fmt: skip
    lock = Lock.from_fetches(
        [
            entry("GET", "https://files.example/a", A),
            entry("GET", "https://mirror.example/a", A),  # the same blob: a second try
            entry("HEAD", "https://files.example/a", b""),
            entry("GET", "https://files.example/here", b"already"),
            post,
            entry("PUT", "https://files.example/put", b"made"),
            entry("GET", "https://other.example/b", B),
        ]
    )
    held = {digest_bytes(b"already")}
    policy = OriginPolicy.of(["files.example", "mirror.example", "git.example"], guard_host=False)
    plan = plan_refetch(lock, has=lambda d: d in held, policy=policy)
    assert [(job.digest, [f.key.url for f in job.entries]) for job in plan.jobs] == [
        (digest_bytes(A), ["https://files.example/a", "https://mirror.example/a"])
    ]
    assert plan.present == 1
    assert plan.empty  # the HEAD's empty body: written, not fetched
    why = {item.entries[0].key.url: item.why for item in plan.unfetchable}
    assert why["https://git.example/r.git/git-upload-pack"].startswith(
        "a request with a body (git's negotiation"
    )
    assert why["https://files.example/put"].startswith("a PUT request (only GET is fetched")
    assert why["https://other.example/b"].startswith("other.example:443 is not among the allowed")
    everything = plan_refetch(lock, has=lambda d: False, policy=OriginPolicy(guard_host=False))
    assert len(everything.jobs) == 3
    assert everything.present == 0


# ----------------------------------------------------------------------------- against origins


@pytest.fixture
def origin(tmp_path: Path) -> FileOrigin:
    files = {"/a.bin": A, "/b.bin": B, "/gone.bin": b"here today", "/private.bin": b"secret data"}
    server = FileOrigin(files, tls=True, pki=tmp_path / "pki")
    server.state.needs_token["/private.bin"] = TOKEN
    return server


def origin_lock(origin: FileOrigin, path: Path) -> Lock:
    """The lock a record of ``origin`` would have written, before anything changed there."""
    lock = Lock.from_fetches(
        [
            entry("GET", origin.url("/a.bin"), A),
            entry("HEAD", origin.url("/a.bin"), b""),
            entry("GET", origin.url("/b.bin"), B, accept="application/octet-stream"),
            entry("GET", origin.url("/gone.bin"), b"here today"),
            entry("GET", origin.url("/nothing"), b"not found\n", status=404),
            # recorded as ?token=…: the secret parameter never reached the lock
            entry("GET", origin.url("/private.bin"), b"secret data"),
            entry(
                "POST",
                origin.url("/r.git/git-upload-pack"),
                b"pack data",
                body_digest=digest_bytes(b"0032want ..."),
            ),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_lock(path, lock)
    return lock


def store_fetch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FETCHPROXY_REMOTE"}
    return run_fetchproxy("store", "fetch", "--store", str(tmp_path / "store"), *args,
                          cwd=tmp_path, env=env, test_origins=False)  # fmt: skip


def test_store_fetch_publishes_what_matches_and_reports_drift(
    tmp_path: Path, origin: FileOrigin
) -> None:
    lock = origin_lock(origin, tmp_path / "fetchproxy.lock.toml")
    drifted = os.urandom(len(B))
    with origin:
        origin.state.files["/b.bin"] = drifted  # the same size: only the bytes changed
        del origin.state.files["/gone.bin"]
        assert origin.ca_cert is not None
        done = store_fetch(tmp_path, "--upstream-ca", str(origin.ca_cert))
        first = origin.seen
        store = DiskStore(tmp_path / "store")
        published = set(store.digests())
        # Once the origin serves what was recorded again, a second run fetches only the rest.
        origin.state.files["/b.bin"] = B
        origin.state.files["/gone.bin"] = b"here today"
        again = store_fetch(tmp_path, "--upstream-ca", str(origin.ca_cert))
        second = origin.seen[len(first) :]
    assert done.returncode == 1, done.stderr
    out = done.stdout
    # a recorded 404 is fetched again; the HEAD's empty body is written
    assert published == {digest_bytes(A), digest_bytes(b"not found\n"), EMPTY}
    assert store.temp_files() == []
    assert (
        f"GET {origin.url('/b.bin')}: CONTENT DRIFT: the origin sent other bytes (70000 bytes, "
        f"{digest_bytes(drifted)}) than the lock's {digest_bytes(B)} (70000 bytes); not put in "
        "the store" in out
    )
    assert (
        f"GET {origin.url('/gone.bin')}: CONTENT DRIFT: the origin answered HTTP 404 where the "
        "lock says 200; nothing was put in the store" in out
    )
    assert f"GET {origin.url('/private.bin')}: the origin refused (HTTP 403): it may want a " \
        "credential, which a lock never keeps" in out  # fmt: skip
    assert (
        f"cannot fetch again: POST {origin.url('/r.git/git-upload-pack')}: a request with a "
        "body (git's negotiation" in out
    )
    assert "instead, pull its blob from a remote store (`fetchproxy store pull`)" in out
    summary = re.sub(r" in [0-9.]+ s;", " in T s;", out.rstrip().splitlines()[-1])
    assert summary == (
        f"summary: fetched 2 of 5 blobs ({(len(A) + 10) / 1024:.1f} KiB) in T s; 0 in the store "
        "already, the empty blob written, 2 CONTENT DRIFT (not put in the store), 1 could not be "
        "fetched, 1 cannot be fetched again"
    )
    # What the origin was sent: the key's selecting headers, identity, no credential.
    gets = {seen.path: seen.headers for seen in first if seen.method == "GET"}
    assert set(gets) == {"/a.bin", "/b.bin", "/gone.bin", "/nothing", "/private.bin"}
    assert gets["/b.bin"]["accept"] == "application/octet-stream"
    for headers in gets.values():
        assert headers["accept-encoding"] == "identity"
        assert headers["user-agent"].startswith("fetchproxy/")
        assert not {"authorization", "cookie", "proxy-authorization"} & set(headers)
    assert all(seen.method == "GET" for seen in first)  # no POST, no HEAD sent
    assert TOKEN not in out + done.stderr
    assert len(lock) == 7

    assert again.returncode == 1  # the token and the git negotiation are still missing
    assert sorted(seen.path for seen in second) == ["/b.bin", "/gone.bin", "/private.bin"]
    assert "fetched 2 of 3 blobs" in again.stdout
    assert "3 in the store already" in again.stdout
    assert store.contains(digest_bytes(B))
    assert "CONTENT DRIFT" not in again.stdout


def test_an_origin_with_an_unknown_ca_or_not_allowed_is_not_trusted(
    tmp_path: Path, origin: FileOrigin
) -> None:
    origin_lock(origin, tmp_path / "fetchproxy.lock.toml")
    with origin:
        untrusted = store_fetch(tmp_path)
        other = store_fetch(tmp_path, "--allow-origin", "files.example.org")
    assert untrusted.returncode == 1
    assert f"GET {origin.url('/a.bin')}: TLS verification failed (" in untrusted.stdout
    assert "give its certificate with --upstream-ca" in untrusted.stdout
    assert not DiskStore(tmp_path / "store").contains(digest_bytes(A))
    assert other.returncode == 1
    assert (
        f"cannot fetch again: GET {origin.url('/a.bin')}: 127.0.0.70:{origin.port} is not among "
        "the allowed origins" in other.stdout
    )
    assert "instead, allow the origin (--allow-origin, [record] allow)" in other.stdout


def test_store_fetch_with_a_remote_pushes_what_it_holds(
    tmp_path: Path, origin: FileOrigin, aws_env: S3Endpoint, remote_url: RemoteURL
) -> None:
    origin_lock(origin, tmp_path / "fetchproxy.lock.toml")
    with origin:
        assert origin.ca_cert is not None
        done = store_fetch(tmp_path, "--upstream-ca", str(origin.ca_cert),
                           "--remote", str(remote_url))  # fmt: skip
    assert done.returncode == 1, done.stderr  # the git negotiation and the token still missing
    assert "pushed 5 blobs " in done.stdout
    held = {o.digest for o in make_remote(remote_url).list_objects()}
    assert held == {
        digest_bytes(A), digest_bytes(B), digest_bytes(b"here today"),
        digest_bytes(b"not found\n"), EMPTY,
    }  # fmt: skip


# ------------------------------------------------------------------------------ token answers


def token_answer(token: str, issued_at: str) -> bytes:
    return json.dumps(
        {"token": token, "access_token": token, "expires_in": 300, "issued_at": issued_at}
    ).encode()


def test_a_token_answer_is_compared_redacted_as_record_stored_it(tmp_path: Path) -> None:
    """A token endpoint answers a fresh token every time: the entry locked ``redacted =
    "token"`` is compared with the origin's answer after record's own redaction, so a new token
    is no drift and what goes into the store is the redacted answer, never the token. An answer
    that carries no token is CONTENT DRIFT, said as such; so is one whose other members
    changed."""
    locked = redacted_token_answer(token_answer("recorded-token", "2024-01-01T00:00:00Z"), None)
    assert locked is not None
    fresh = "eyJhbGciOi.eyJzdWIiOi.fresh-token-never-stored"
    files = {
        "/token": token_answer(fresh, "2025-06-01T12:00:00Z"),
        "/moved": b"<html>the token service moved</html>",
        "/longer": token_answer(fresh, "now").replace(b"300", b"600"),
    }
    server = FileOrigin(files, tls=True, pki=tmp_path / "pki")
    lock = Lock.from_fetches(
        [
            dataclasses.replace(entry("GET", server.url(path), locked), redacted="token")
            for path in files
        ]
    )
    write_lock(tmp_path / "fetchproxy.lock.toml", lock)
    with server:
        assert server.ca_cert is not None
        done = store_fetch(tmp_path, "--upstream-ca", str(server.ca_cert))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    store = DiskStore(tmp_path / "store")
    assert set(store.digests()) == {digest_bytes(locked)}
    assert f"GET {server.url('/token')}:" not in out  # fetched: no drift
    assert (
        f"GET {server.url('/moved')}: CONTENT DRIFT: the lock holds a token answer (redacted = "
        '"token"), but the origin sent 36 bytes that are not a JSON object with a token, '
        "access_token, refresh_token or id_token; nothing was put in the store" in out
    )
    changed = redacted_token_answer(files["/longer"], None)
    assert changed is not None
    assert (
        f"GET {server.url('/longer')}: CONTENT DRIFT: the origin's token answer, redacted, is "
        f"other bytes ({len(changed)} bytes, {digest_bytes(changed)}) than the lock's "
        f"{digest_bytes(locked)} ({len(locked)} bytes); not put in the store" in out
    )
    assert fresh not in out + done.stderr
    assert all(fresh.encode() not in path.read_bytes() for path in (tmp_path / "store").rglob("*")
               if path.is_file())  # fmt: skip


def test_a_key_where_accept_selects_nothing_sends_no_accept() -> None:
    """``accept = "*"`` is how the lock says Accept selects nothing at that URL; it is no media
    range, and an origin that negotiates could answer 406 to it."""
    url = "https://index.example/config.json"
    assert "accept" not in request_headers(
        RequestKey(method="GET", url=url, accept=ANY_ACCEPT), "t"
    )
    chosen = RequestKey(method="GET", url=url, accept="text/plain")
    assert request_headers(chosen, "t")["accept"] == "text/plain"

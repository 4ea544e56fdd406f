"""The fetch set and the attestation of a real replay: curl in the root sandbox.

A build fetches two files from an origin on the host's 127.0.0.60 (reachable only through the
proxy), is recorded, and replayed with ``--exact``: the digest replay prints and logs is the
one ``fetchproxy lock digest`` computes from the lock, and the envelope ``--attest`` writes
verifies with ``fetchproxy attest verify`` and with securesystemslib, in-toto's own DSSE code.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from fetchproxy.digest import digest_bytes
from fetchproxy.lock.file import load_lock, write_lock
from fetchproxy.lock.model import Lock
from fetchproxy.provenance.dsse import key_id, load_public_key
from fetchproxy.provenance.entry import entry_from_fetch
from fetchproxy.provenance.fetchset import fetch_set_digest
from tests.support.cli import run_fetchproxy
from tests.support.sbom import cyclonedx_errors, spdx_messages
from tests.support.signing import openssl_key

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

FILES = {"/a.txt": b"the first file\n", "/b.txt": b"the second file\n" * 50}
PASSPHRASE = "correct horse battery staple"
DIGEST_LINE = re.compile(r"^fetchproxy: fetch-set digest (blake3:[0-9a-f]{64}) \((.*)\)$", re.M)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = FILES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib signature
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.60", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.60:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fetchproxy(work: Path, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    store = str(work / "store")
    return run_fetchproxy(
        *map(str, args), cwd=work, env={**clean, "FETCHPROXY_STORE": store, **env}
    )


def fetch_both(origin: str) -> str:
    return f"curl -sSf -o a {origin}/a.txt && curl -sSf -o b {origin}/b.txt"


@pytest.fixture
def work(tmp_path: Path, origin: str) -> Path:
    """A directory whose lock was recorded from a build that fetched both files."""
    recorded = fetchproxy(
        tmp_path, "record", "--allow-origin", "127.0.0.60", "--", "sh", "-c", fetch_both(origin)
    )
    assert recorded.returncode == 0, recorded.stderr
    assert len(load_lock(tmp_path / "fetchproxy.lock.toml")) == 2
    return tmp_path


def log_events(work: Path) -> list[dict[str, object]]:
    lines = (work / "fetchproxy.lock.log.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def lock_digest(work: Path) -> str:
    done = fetchproxy(work, "lock", "digest")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"blake3:[0-9a-f]{64}\n", done.stdout)
    return done.stdout.strip()


def test_an_exact_replay_prints_and_logs_the_locks_fetch_set_digest(
    work: Path, origin: str
) -> None:
    replayed = fetchproxy(work, "replay", "--exact", "--", "sh", "-c", fetch_both(origin))
    assert replayed.returncode == 0, replayed.stderr
    printed = DIGEST_LINE.search(replayed.stderr)
    assert printed is not None, replayed.stderr
    assert printed[2] == "2 entries: the whole lock"
    assert printed[1] == lock_digest(work)
    events = log_events(work)
    assert [e["event"] for e in events] == ["used", "used", "fetch-set"]
    assert events[-1] == {
        "event": "fetch-set",
        "key": None,
        "digest": printed[1],
        "entries": 2,
        "exact": True,
        "refused": 0,
        "sandbox": "root",
    }


def test_a_replay_that_refused_serves_a_set_that_is_not_exact(work: Path, origin: str) -> None:
    build = f"curl -sSf -o a {origin}/a.txt; curl -sS -o /dev/null {origin}/nope.txt; true"
    replayed = fetchproxy(work, "replay", "--", "sh", "-c", build)
    assert replayed.returncode == 3, replayed.stderr
    printed = DIGEST_LINE.search(replayed.stderr)
    assert printed is not None, replayed.stderr
    assert printed[2] == "1 of 2 lock entries"
    lock = load_lock(work / "fetchproxy.lock.toml")
    served = [f for f in lock.fetches if f.key.url == f"{origin}/a.txt"]
    assert printed[1] == fetch_set_digest(entry_from_fetch(f) for f in served)
    assert printed[1] != lock_digest(work)
    events = log_events(work)
    assert [e["event"] for e in events] == ["refused", "used", "unused", "fetch-set"]
    assert events[-1]["exact"] is False
    assert events[-1]["refused"] == 1
    assert events[-1]["entries"] == 1


@pytest.mark.parametrize("kind", ["ed25519", "p256"])
def test_a_signed_attestation_of_a_real_replay_verifies_with_securesystemslib(
    work: Path, origin: str, tmp_path_factory: pytest.TempPathFactory, kind: str
) -> None:
    keys = tmp_path_factory.mktemp("keys")  # not the build's working directory
    private, public = openssl_key(keys, kind, passphrase=PASSPHRASE)
    # What the build can see of fetchproxy's secrets: its environment, every process's.
    build = f"{fetch_both(origin)} && env > seen-env && cat /proc/[0-9]*/environ > seen-proc; true"
    replayed = fetchproxy(
        work,
        "replay",
        "--exact",
        "--attest",
        "att.dsse.json",
        "--attest-key",
        private,
        "--",
        "sh",
        "-c",
        build,
        FETCHPROXY_ATTEST_PASSPHRASE=PASSPHRASE,
    )
    assert replayed.returncode == 0, replayed.stderr
    keyid = key_id(load_public_key(public.read_bytes(), source=str(public)))
    assert (
        f"fetchproxy: attestation written to att.dsse.json (envelope signed by key {keyid})"
        in replayed.stderr
    )
    assert "FETCHPROXY_ATTEST" not in (work / "seen-env").read_text()
    assert PASSPHRASE.encode() not in (work / "seen-proc").read_bytes()
    assert (work / "seen-proc").stat().st_size > 0  # it did read its own

    verified = fetchproxy(work, "attest", "verify", "att.dsse.json", "--key", public, "--exact")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    digest = lock_digest(work)
    assert verified.stdout == (
        f"att.dsse.json: holds — signed by key {keyid}; 2 entries of fetchproxy.lock.toml, "
        f"fetch set {digest}; exact, complete (sandbox root)\n"
    )

    # securesystemslib, which in-toto verifies with, matches signatures to keys by key id
    envelope = SslibEnvelope.from_dict(json.loads((work / "att.dsse.json").read_bytes()))
    theirs = SSlibKey.from_crypto(load_pem_public_key(public.read_bytes()), keyid=keyid)
    assert keyid in envelope.verify([theirs], 1)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    statement = json.loads(envelope.payload)
    Statement.copy_from_pb(
        json_format.Parse(envelope.payload, statement_pb2.Statement())
    ).validate()
    assert statement["predicate"]["fetchSet"] == {
        "digest": {"blake3": digest.removeprefix("blake3:")},
        "entries": 2,
    }
    assert sorted(d["uri"] for d in statement["predicate"]["resolvedDependencies"]) == [
        f"{origin}/a.txt",
        f"{origin}/b.txt",
    ]
    assert (statement["predicate"]["sandbox"], statement["predicate"]["complete"]) == (
        "root",
        True,
    )


def test_attest_verify_names_each_problem(
    work: Path, origin: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    keys = tmp_path_factory.mktemp("keys")
    private, public = openssl_key(keys, "ed25519")
    _other, other_public = openssl_key(keys, "p256")
    replayed = fetchproxy(
        work, "replay", "--attest", "att.json", "--attest-key", private, "--",
        "sh", "-c", f"curl -sSf -o a {origin}/a.txt",
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    holds = fetchproxy(work, "attest", "verify", "att.json", "--key", public)
    assert holds.returncode == 0, holds.stdout + holds.stderr
    assert "; not exact (0 refused), complete (sandbox root)\n" in holds.stdout
    not_exact = fetchproxy(work, "attest", "verify", "att.json", "--key", public, "--exact")
    assert not_exact.returncode == 1
    assert not_exact.stdout.startswith("att.json: the run was not exact (0 refused; 1 entries")

    wrong_key = fetchproxy(work, "attest", "verify", "att.json", "--key", other_public)
    assert wrong_key.returncode == 1
    assert wrong_key.stdout.startswith("att.json: no signature verifies with the key ")
    assert wrong_key.stdout.count("\n") == 1

    # The lock changes after the run: its a.txt now answers other bytes.
    path = work / "fetchproxy.lock.toml"
    other = digest_bytes(b"other bytes")
    write_lock(
        path,
        Lock.from_fetches(
            dataclasses.replace(f, digest=other) if f.key.url.endswith("/a.txt") else f
            for f in load_lock(path).fetches
        ),
    )
    changed = fetchproxy(work, "attest", "verify", "att.json", "--key", public)
    assert changed.returncode == 1
    problems = changed.stdout.splitlines()
    assert len(problems) == 2, problems
    assert problems[0].startswith("att.json: the statement names a lock with blake3 ")
    assert problems[1].startswith(f"att.json: GET {origin}/a.txt: served 200 blake3:")
    assert problems[1].endswith(f", but the lock answers 200 {other}")

    bare = fetchproxy(work, "attest", "verify", "fetchproxy.lock.toml", "--key", public)
    assert bare.returncode == 2
    assert "fetchproxy: error: fetchproxy.lock.toml: not a DSSE envelope: the file is not JSON" in (
        bare.stderr
    )


def test_an_unsigned_statement_is_checked_only_against_the_lock(work: Path, origin: str) -> None:
    replayed = fetchproxy(
        work, "replay", "--exact", "--attest", "statement.json", "--",
        "sh", "-c", fetch_both(origin),
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert "fetchproxy: attestation written to statement.json (statement)" in replayed.stderr
    data = (work / "statement.json").read_bytes()
    assert json.loads(data)["predicateType"] == "https://fetchproxy.dev/fetch-set/v1"
    checked = fetchproxy(work, "attest", "verify", "statement.json", "--unsigned")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("statement.json: holds — not signed; 2 entries")
    keys = work / "keys"
    keys.mkdir()
    private, public = openssl_key(keys, "ed25519")
    needs_key = fetchproxy(work, "attest", "verify", "statement.json", "--key", public)
    assert needs_key.returncode == 2
    assert "a bare statement, not a signed envelope" in needs_key.stderr
    # signed in a later step, where the build never saw the key
    signed = fetchproxy(
        work, "attest", "sign", "statement.json", "--key", private, "--output", "att.dsse.json"
    )
    assert signed.returncode == 0, signed.stderr
    envelope = json.loads((work / "att.dsse.json").read_bytes())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    verified = fetchproxy(work, "attest", "verify", "att.dsse.json", "--key", public, "--exact")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_failed_build_leaves_no_attestation(work: Path, origin: str) -> None:
    (work / "att.json").write_text("an earlier run's attestation\n")
    failed = fetchproxy(
        work, "replay", "--attest", "att.json", "--",
        "sh", "-c", f"curl -sSf -o a {origin}/a.txt; exit 4",
    )  # fmt: skip
    assert failed.returncode == 4, failed.stderr
    assert not (work / "att.json").exists()
    assert (
        "fetchproxy: no attestation written to att.json: the build failed; the file an earlier "
        "run left there is removed" in failed.stderr
    )


def test_a_key_that_cannot_sign_stops_the_replay_before_the_build(
    work: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    keys = tmp_path_factory.mktemp("keys")
    private, _public = openssl_key(keys, "ed25519", passphrase=PASSPHRASE)
    plain, _ = openssl_key(keys, "p256")
    cases = [
        ({}, "the private key is encrypted — give its passphrase (FETCHPROXY_ATTEST_PASSPHRASE)"),
        (
            {"FETCHPROXY_ATTEST_PASSPHRASE": "not-it-4711"},
            "the passphrase is wrong (FETCHPROXY_ATTEST_PASSPHRASE): the private key does not "
            "decrypt",
        ),
    ]
    for env, message in cases:
        result = fetchproxy(
            work, "replay", "--attest", "att.json", "--attest-key", private,
            "--", "touch", "built", **env,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert f"fetchproxy: error: {private}: {message}" in result.stderr
        assert PASSPHRASE not in result.stderr
        assert "not-it-4711" not in result.stderr
        assert not (work / "built").exists()
    unencrypted = fetchproxy(
        work, "replay", "--attest", "att.json", "--attest-key", plain,
        "--", "touch", "built", FETCHPROXY_ATTEST_PASSPHRASE=PASSPHRASE,
    )  # fmt: skip
    assert unencrypted.returncode == 2
    assert "is not encrypted — give no passphrase (FETCHPROXY_ATTEST_PASSPHRASE)" in (
        unencrypted.stderr
    )
    alone = fetchproxy(work, "replay", "--attest-key", plain, "--", "touch", "built")
    assert alone.returncode == 2
    assert "--attest-key signs the attestation: give --attest PATH too" in alone.stderr
    assert not (work / "built").exists()


def test_the_sboms_of_a_curl_build_validate(work: Path, origin: str) -> None:
    replayed = fetchproxy(work, "replay", "--", "sh", "-c", f"curl -sSf -o a {origin}/a.txt")
    assert replayed.returncode == 0, replayed.stderr
    for kind, validate in (("cyclonedx", cyclonedx_errors), ("spdx", None)):
        for served in ((), ("--served", "fetchproxy.lock.log.jsonl")):
            sbom = fetchproxy(work, "lock", "sbom", "--format", kind, *served)
            assert sbom.returncode == 0, sbom.stderr
            document = json.loads(sbom.stdout)
            if validate is None:
                assert spdx_messages(document, work) == []
                files = [p for p in document["packages"] if p["SPDXID"] != "SPDXRef-fetch-set"]
            else:
                assert validate(document) is None
                files = document["components"]
            # the lock has both files; the replay served one
            assert len(files) == (1 if served else 2), files

"""``fetchproxy store fetch`` refills a store from a lock made against a token registry.

The registry, the token server (real ES256 JWTs the registry verifies) and the skopeo pull are
:mod:`tests.clients.support.oci_registry`'s. A pull is recorded, the store emptied, and
``store fetch`` run on the host (no sandbox: it talks to the origins itself): it must answer
each manifest's and blob's Bearer challenge with an anonymous token from the realm, compare the
token entry redacted as record stored it, fetch the locked ``401`` as it is, and write no token
anywhere. Then ``replay --exact`` with the registry and the token server stopped serves the
pull from the refilled store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from fetchproxy.ca import CertificateAuthority
from fetchproxy.store import DiskStore
from tests.clients.support.builds import LOCK, fetchproxy, prepare_work, resolving
from tests.clients.support.oci_registry import (
    NAME,
    PASSWORD,
    REPOSITORY,
    SERVICE,
    TAG,
    USER,
    TokenRegistry,
    ca,
    kept_by_fetchproxy,
    pull,
    record,
    replay,
    token_registry,
    tree,
)

__all__ = ["ca", "token_registry"]  # fixtures, imported to be used here

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]


def store_fetch(tmp_path: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """``fetchproxy store fetch`` of ``work``'s lock into the (emptied) store, trusting the
    registry's CA, with :data:`NAME` resolved."""
    return fetchproxy(
        work, tmp_path / "store", "store", "fetch", "--upstream-ca", tmp_path / "origin-ca.pem",
        prefix=resolving(tmp_path, NAME),
    )  # fmt: skip


@pytest.mark.parametrize("token_registry", [False], indirect=True, ids=["anonymous"])
def test_store_fetch_refills_a_store_from_a_token_registry_and_replay_is_exact(
    tmp_path: Path, token_registry: TokenRegistry, ca: CertificateAuthority
) -> None:
    """Every entry of the pull's lock comes back: ``GET /v2/`` as its locked 401, the token
    answer redacted and equal to the lock's, and the manifest and both blobs after the
    challenge was answered — one token for the three (cached per realm, service and scope),
    one for the token entry itself. No token issued reaches the store, the lock or the output."""
    registry, tokens = token_registry.registry, token_registry.tokens
    work = prepare_work(tmp_path / "record")
    record(tmp_path, work, ca, pull(registry))
    lock = (work / LOCK).read_text()
    shutil.rmtree(tmp_path / "store")
    before = len(tokens.issued)

    fetched = store_fetch(tmp_path, work)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert "CONTENT DRIFT" not in fetched.stdout
    summary = fetched.stdout.rstrip().splitlines()[-1]
    assert summary.startswith("summary: fetched 5 of 5 blobs ")
    assert summary.endswith("; 0 in the store already")
    assert (work / LOCK).read_text() == lock  # store fetch never writes the lock
    issued = tokens.issued[before:]
    assert len(issued) == 2
    asked = token_registry.origin.requests[-2:]
    query = {"scope": [f"repository:{REPOSITORY}:pull"], "service": [SERVICE]}
    assert [parse_qs(r.target.partition("?")[2]) for r in asked] == [query, query]
    assert [r.header("authorization") for r in asked] == ["", ""]  # anonymous

    token_registry.stop()
    again, replayed = replay(tmp_path, lock, pull(registry))
    assert tree(again / "out") == token_registry.image.pulled()

    kept = kept_by_fetchproxy(tmp_path)
    printed = fetched.stdout + fetched.stderr + replayed.stdout + replayed.stderr
    for token in issued:
        for part in (token, *token.split(".")[1:]):
            assert part.encode() not in kept
            assert part not in printed
    assert DiskStore(tmp_path / "store").temp_files() == []


@pytest.mark.parametrize("token_registry", [True], indirect=True, ids=["credentials"])
def test_store_fetch_from_a_registry_that_needs_credentials_says_what_to_do(
    tmp_path: Path, token_registry: TokenRegistry, ca: CertificateAuthority
) -> None:
    """A private repository: the token server gives no token without a password, and store
    fetch has none (a lock never keeps one). The token entry and every challenged entry are
    reported as refused — not as CONTENT DRIFT — with what to do instead; the locked 401 is
    still fetched; nothing else enters the store."""
    registry = token_registry.registry
    work = prepare_work(tmp_path / "record")
    record(tmp_path, work, ca, pull(registry, "--src-creds", f"{USER}:{PASSWORD}"))
    shutil.rmtree(tmp_path / "store")
    refused = token_registry.tokens.refused

    fetched = store_fetch(tmp_path, work)
    out = fetched.stdout
    assert fetched.returncode == 1, out + fetched.stderr
    assert "CONTENT DRIFT" not in out
    realm = token_registry.realm
    manifest = f"GET https://{registry.url}/v2/{REPOSITORY}/manifests/{TAG}"
    assert (
        f"{manifest}: the token server {realm} refused (HTTP 401) to give an anonymous token: "
        "the repository needs credentials, which store fetch never sends" in out
    )
    assert "pull the blobs from a remote store (`fetchproxy store pull`), or record again" in out
    token_entry = f"GET {realm}?scope=repository%3A{REPOSITORY}%3Apull&service={SERVICE}"
    assert f"{token_entry}: the origin refused (HTTP 401)" in out
    # asked twice: for the token entry, and once for the three challenged entries
    assert token_registry.tokens.refused == refused + 2
    assert "summary: fetched 1 of 5 blobs " in out  # GET /v2/, its locked 401
    assert PASSWORD not in out + fetched.stderr

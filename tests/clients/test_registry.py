"""skopeo (containers/image) against Debian's docker-registry, through the real sandbox.

The registry is distribution 2.8 (``/usr/bin/docker-registry``) on the host's 127.0.0.2 over TLS,
with a certificate from a test CA, holding a tiny OCI image the test builds by hand and pushes
with skopeo at setup (outside fetchproxy). skopeo is a Go program: it never proxies a loopback
address, so it is given a name (:func:`~tests.clients.support.builds.resolving`). It trusts the
run through ``SSL_CERT_FILE`` alone (Go's system pool reads it; containers/image adds nothing
when no ``certs.d`` directory names the registry).

- **Anonymous**: a registry without auth; the pull is recorded, the registry stopped, the pull
  replayed with ``--exact``: the same ``dir:`` output, byte for byte.
- **Bearer tokens** as Docker Hub and ghcr.io use them: the registry sends ``401`` with
  ``WWW-Authenticate: Bearer realm=…`` and checks the token it is then sent; the token server
  (:class:`TokenServer`) issues a real JWT the registry verifies, a fresh one on every request.
  The lock keeps the challenge (so skopeo asks for a token in replay too) and the token answer
  redacted (no token in the store or the lock, re-records give the same lock).
- **Credentials** (``--src-creds``, or the auth file ``skopeo login`` leaves, as ``docker
  login`` does): the token server asks for them; they reach none of the lock, the store, the
  event log or fetchproxy's output.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from fetchproxy.ca import CertificateAuthority
from fetchproxy.record.tokens import PLACEHOLDER
from tests.clients.support.builds import LOCK, lock_entries, prepare_work
from tests.clients.support.oci_registry import (
    PASSWORD,
    REPOSITORY,
    SERVICE,
    TAG,
    USER,
    DockerRegistry,
    TokenRegistry,
    TokenServer,
    _digest,
    ca,
    cert_dir,
    kept_by_fetchproxy,
    pull,
    push,
    record,
    replay,
    skopeo,
    token_registry,
    tree,
)
from tests.support.real_origins import origin_ca

__all__ = ["ca", "token_registry"]  # fixtures, imported to be used here

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

EVENT_LOG = "fetchproxy.lock.log.jsonl"


# ------------------------------------------------------------------------------------- anonymous


def test_skopeo_pulls_from_a_registry_and_replays_it_stopped(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    """No flag for fetchproxy, no certificate directory: skopeo trusts the run through
    ``SSL_CERT_FILE``. The replay gives the same ``dir:`` output, byte for byte."""
    with DockerRegistry(tmp_path / "registry", ca) as registry:
        image = push(tmp_path, registry, ca)
        work = prepare_work(tmp_path / "record")
        record(tmp_path, work, ca, pull(registry))
    assert tree(work / "out") == image.pulled()
    lock = (work / LOCK).read_text()
    manifest = f"{registry.url}/v2/{REPOSITORY}/manifests/{TAG}"
    assert f'url = "https://{manifest}"\n' in lock
    assert f'docker-content-digest = "{_digest(image.manifest)}"\n' in lock
    assert lock_entries(work) == 4  # /v2/, the manifest, the config and the layer

    again, _ = replay(tmp_path, lock, pull(registry))  # the registry is stopped
    assert tree(again / "out") == image.pulled()


# ----------------------------------------------------------------------------------------- tokens


def manifest_status(registry: DockerRegistry, token: str) -> int:
    """The registry's answer to a GET of the image's manifest with ``token``."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.oci.image.manifest.v1+json",
    }
    return registry.answer(f"/v2/{REPOSITORY}/manifests/{TAG}", headers)


@pytest.mark.parametrize("token_registry", [False], indirect=True, ids=["anonymous"])
def test_the_registry_checks_the_tokens_of_the_token_server(token_registry: TokenRegistry) -> None:
    """What the other token tests stand on: the registry verifies each JWT (the signer's chain
    to its root, the signature, issuer, audience and scope), so a pull that works was given a
    real token; the placeholder replay serves would not do."""
    registry, tokens = token_registry.registry, token_registry.tokens
    pull_scope = [f"repository:{REPOSITORY}:pull"]
    served = tokens.sign(USER, pull_scope)
    assert manifest_status(registry, served) == 200
    header, claims, signature = served.split(".")
    for refused in (
        f"{header}.{claims}.{signature[:-4]}AAAA",
        TokenServer(origin_ca()).sign(USER, pull_scope),  # a signer the registry does not trust
        tokens.sign(USER, pull_scope, issuer="someone-else"),
        tokens.sign(USER, pull_scope, audience="another-registry"),
        tokens.sign(USER, ["repository:other:pull"]),
        PLACEHOLDER,
    ):
        assert manifest_status(registry, refused) == 401


def test_skopeo_behind_a_token_server_is_challenged_in_replay_and_no_token_is_locked(
    tmp_path: Path, token_registry: TokenRegistry, ca: CertificateAuthority
) -> None:
    """Docker Hub's and ghcr.io's flow: ``/v2/`` answers 401 with ``WWW-Authenticate: Bearer
    realm=…``; skopeo asks the realm for a token, and sends it. The lock keeps the challenge, so
    skopeo asks for a token in replay too (``--exact``: the token entry is used), and the token
    answer redacted: no token issued is in the store, the lock or the event log, and a re-record
    writes the same lock. With credentials (``--src-creds`` in one record, the auth file
    ``skopeo login`` leaves in the other), neither the password nor the Basic header that
    carries it reaches anything fetchproxy keeps or prints."""
    registry, tokens = token_registry.registry, token_registry.tokens
    credentials = tokens.credentials is not None
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode())  # what `Authorization: Basic` holds
    pushed = len(tokens.issued)  # the setup's push asked for tokens too
    work = prepare_work(tmp_path / "record")
    outputs = []
    first = pull(registry, "--src-creds", f"{USER}:{PASSWORD}") if credentials else pull(registry)
    outputs.append(record(tmp_path, work, ca, first))
    assert tree(work / "out") == token_registry.image.pulled()
    locked = (work / LOCK).read_text()
    if credentials:  # the second record as after `docker login`: the auth file holds them
        skopeo(
            tmp_path, "login", "--authfile", work / "auth.json",
            "--cert-dir", cert_dir(tmp_path, ca), "--username", USER, "--password-stdin",
            registry.url, stdin=PASSWORD.encode(),
        )  # fmt: skip
        assert basic in (work / "auth.json").read_bytes()
    outputs.append(record(tmp_path, work, ca, pull(registry)))
    assert tree(work / "out") == token_registry.image.pulled()

    lock = (work / LOCK).read_text()
    assert lock == locked  # a re-record is the same lock: no drift on the token answer
    challenge = f'Bearer realm="{token_registry.realm}",service="{SERVICE}"'
    assert f'url = "https://{registry.url}/v2/"\nstatus = 401\n' in lock
    assert f"www-authenticate = {json.dumps(challenge)}\n" in lock
    token_url = f"{token_registry.realm}?scope=repository%3A{REPOSITORY}%3Apull&service={SERVICE}"
    assert f'url = "{token_url}"\n' in lock  # no `account=`: whose credentials is a secret
    assert 'redacted = "token"\n' in lock
    assert lock_entries(work) == 5  # the challenge, the token, the manifest and two blobs
    issued = tokens.issued[pushed:]
    assert len(issued) == (3 if credentials else 2)  # one per pull, one for skopeo login
    assert len(set(issued)) == len(issued)  # a fresh token every time
    assert tokens.refused == 0  # with credentials: skopeo sent them with every token request

    token_registry.stop()
    again, replayed = replay(tmp_path, lock, first)
    outputs.append(replayed)
    assert tree(again / "out") == token_registry.image.pulled()
    log = [json.loads(line) for line in (again / EVENT_LOG).read_text().splitlines()]
    used = [event["key"] for event in log if event["event"] == "used"]
    assert {"method": "GET", "url": token_url} in used  # skopeo asked for a token in replay too

    kept = kept_by_fetchproxy(tmp_path)
    printed = "".join(o.stdout + o.stderr for o in outputs)
    for token in issued:
        for part in (token, *token.split(".")[1:]):  # the header is the same in every token
            assert part.encode() not in kept
            assert part not in printed
    for secret in (PASSWORD.encode(), basic):  # lowercased too: a key's `accept` is, for one
        assert secret.lower() not in kept.lower()
        assert secret.decode().lower() not in printed.lower()

"""Provenance of real clients' builds: pip, git and npm in the root sandbox.

Each lock is recorded as :mod:`tests.clients.test_real_clients` records it, replayed with
``--exact --attest``, and then: the printed fetch-set digest is ``lock digest``'s, the envelope
verifies (``attest verify`` and securesystemslib), and the SBOMs of the lock and of what the
replay served pass the real validators (cyclonedx-python-lib, spdx-tools) and name the packages.
npm also re-records after a release, and ``lock diff --packages`` says it in package words.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from fetchproxy.provenance.dsse import key_id, load_public_key
from tests.clients.support.builds import LOCK, assert_replay_served, fetchproxy, prepare_work
from tests.clients.support.git_http import git_origin
from tests.clients.support.npm_registry import Registry, registry
from tests.clients.support.pip_index import PipRecording, pip_install, pip_recording
from tests.support.real_origins import HTTPSOrigin
from tests.support.sbom import cyclonedx_errors, spdx_messages
from tests.support.signing import openssl_key

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]
__all__ = ["git_origin", "pip_recording", "registry"]  # fixtures, imported to be used here

DIGEST_LINE = re.compile(r"^fetchproxy: fetch-set digest (blake3:[0-9a-f]{64}) ", re.M)
CREATED = "2026-01-01T00:00:00Z"


def attested_replay(
    work: Path, store: Path, keys: Path, *build: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``replay --exact --attest`` of ``build`` with a fresh Ed25519 key; the public key."""
    private, public = openssl_key(keys, "ed25519")
    replayed = fetchproxy(
        work,
        store,
        "replay",
        "--exact",
        "--attest",
        "att.dsse.json",
        "--attest-key",
        private,
        "--",
        *build,
        env=env or {},
    )
    return replayed, public


def check_provenance(
    work: Path, store: Path, replayed: subprocess.CompletedProcess[str], public: Path
) -> dict[str, list[dict[str, object]]]:
    """Everything the module docstring promises of one exact replay; the components of the
    SBOM of what it served, by format."""
    printed = DIGEST_LINE.search(replayed.stderr)
    assert printed is not None, replayed.stderr
    digest = fetchproxy(work, store, "lock", "digest")
    assert digest.stdout == f"{printed[1]}\n", digest.stderr

    verified = fetchproxy(
        work, store, "attest", "verify", "att.dsse.json", "--key", public, "--exact"
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    keyid = key_id(load_public_key(public.read_bytes(), source="key"))
    envelope = SslibEnvelope.from_dict(json.loads((work / "att.dsse.json").read_bytes()))
    theirs = SSlibKey.from_crypto(load_pem_public_key(public.read_bytes()), keyid=keyid)
    assert keyid in envelope.verify([theirs], 1)
    statement = json.loads(envelope.payload)
    assert statement["predicate"]["fetchSet"]["digest"]["blake3"] == printed[1][7:]

    served: dict[str, list[dict[str, object]]] = {}
    for kind in ("cyclonedx", "spdx"):
        documents = []
        for extra in ((), ("--served", "fetchproxy.lock.log.jsonl")):
            sbom = fetchproxy(
                work,
                store,
                "lock",
                "sbom",
                "--format",
                kind,
                *(("--created", CREATED) if kind == "spdx" else ()),
                *extra,
            )
            assert sbom.returncode == 0, sbom.stderr
            document = json.loads(sbom.stdout)
            if kind == "cyclonedx":
                assert cyclonedx_errors(document) is None
            else:
                assert spdx_messages(document, work) == []
            documents.append(document)
        whole, only_served = documents
        assert only_served == whole  # an exact replay served the whole lock
        served[kind] = list(whole["components" if kind == "cyclonedx" else "packages"])
    return served


# ------------------------------------------------------------------------------------------ pip


def test_pip_provenance(
    tmp_path: Path, pip_recording: PipRecording, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = prepare_work(tmp_path)
    shutil.copy(pip_recording.lock, work / LOCK)
    replayed, public = attested_replay(
        work,
        pip_recording.store,
        tmp_path_factory.mktemp("keys"),
        *pip_install(pip_recording.index_url),
    )
    assert_replay_served(replayed, work, requests=4)
    components = check_provenance(work, pip_recording.store, replayed, public)
    found = sorted(
        (str(c["type"]), str(c["name"]), str(c.get("purl", ""))) for c in components["cyclonedx"]
    )
    assert found == [
        # the simple pages are metadata: listed, with no purl of their own
        ("data", "demo-dep", ""),
        ("data", "demo-pkg", ""),
        ("library", "demo-dep", "pkg:pypi/demo-dep@1.0?file_name=demo_dep-1.0-py3-none-any.whl"),
        ("library", "demo-pkg", "pkg:pypi/demo-pkg@1.0?file_name=demo_pkg-1.0-py3-none-any.whl"),
    ]


# ------------------------------------------------------------------------------------------ git


def test_git_provenance(
    tmp_path: Path, git_origin: HTTPSOrigin, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work, store = prepare_work(tmp_path), tmp_path / "store"
    build = ("git", "clone", "-q", f"{git_origin.url}/repo.git", "clone")
    recorded = fetchproxy(work, store, "record", "--upstream-ca", git_origin.ca_path, "--", *build)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    git_origin.stop()
    shutil.rmtree(work / "clone")
    replayed, public = attested_replay(work, store, tmp_path_factory.mktemp("keys"), *build)
    assert_replay_served(replayed, work, requests=3)
    components = check_provenance(work, store, replayed, public)
    kinds = sorted(
        (str(c["type"]), str(c.get("purl", "")).split("?")[0]) for c in components["cyclonedx"]
    )
    # info/refs is metadata about the repository; the upload-pack answers are its packs
    assert kinds == [
        ("data", ""),
        ("file", "pkg:generic/repo"),
        ("file", "pkg:generic/repo"),
    ]


# ------------------------------------------------------------------------------------------ npm


def npm_install(registry: Registry, spec: str) -> list[str]:
    return [
        "npm",
        "install",
        "--registry",
        registry.url,
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--no-package-lock",
        spec,
    ]


def test_npm_provenance_and_a_release_in_package_words(
    tmp_path: Path, registry: Registry, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work, store = prepare_work(tmp_path), tmp_path / "store"
    (work / "package.json").write_text('{"name": "app", "version": "1.0.0"}\n')
    registry.publish("acc-right", "1.0.0")

    def record(spec: str, cache: str) -> None:
        shutil.rmtree(work / "node_modules", ignore_errors=True)
        recorded = fetchproxy(
            work,
            store,
            "record",
            "--allow-origin",
            "127.0.0.62",  # the registry, on the host's loopback
            "--",
            *npm_install(registry, spec),
            env={"npm_config_cache": str(work / cache)},
        )
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr

    record("acc-right@1.0.0", "cache-1")
    shutil.copy(work / LOCK, tmp_path / "before.lock.toml")
    registry.publish("acc-right", "1.1.0")
    record("acc-right@1.1.0", "cache-2")
    assert (
        json.loads((work / "node_modules/acc-right/package.json").read_text())["version"] == "1.1.0"
    )

    diff = fetchproxy(
        work, store, "lock", "diff", "--packages", tmp_path / "before.lock.toml", LOCK
    )
    assert diff.returncode == 1, diff.stderr
    assert "  ~ npm acc-right 1.0.0 → 1.1.0\n" in diff.stdout
    assert "packages: 1 changed\n" in diff.stdout
    markdown = fetchproxy(
        work, store, "lock", "diff", "--format", "markdown", tmp_path / "before.lock.toml", LOCK
    )
    assert "- `npm acc-right` `1.0.0` → `1.1.0`\n" in markdown.stdout

    # the registry is gone; the release replays from the lock
    registry.stop()
    seen = len(registry.requests)
    shutil.rmtree(work / "node_modules")
    replayed, public = attested_replay(
        work,
        store,
        tmp_path_factory.mktemp("keys"),
        *npm_install(registry, "acc-right@1.1.0"),
        env={"npm_config_cache": str(work / "cache-3")},
    )
    assert_replay_served(replayed, work, requests=2)
    assert len(registry.requests) == seen
    assert (
        json.loads((work / "node_modules/acc-right/package.json").read_text())["version"] == "1.1.0"
    )
    components = check_provenance(work, store, replayed, public)
    found = sorted((str(c["type"]), str(c.get("purl", ""))) for c in components["cyclonedx"])
    # the packument of a registry that is not npm's own host is only a file it fetched
    assert found == [
        ("file", f"pkg:generic/acc-right?download_url={quote(registry.url, safe=':')}acc-right"),
        ("library", "pkg:npm/acc-right@1.1.0"),
    ]

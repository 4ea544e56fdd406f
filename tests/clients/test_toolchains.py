"""Toolchains that read none of the usual proxy and CA variables, through the real sandbox.

Each build runs with no flag of its own for fetchproxy: what makes it work is what fetchproxy
puts in the build's environment and in /run/fetchproxy/ (:mod:`fetchproxy.run.buildenv`). Each
is recorded against an HTTPS origin with its own CA on the host's 127.0.0.2, the origin is
stopped, and the build is replayed with ``--exact``: the same result, every lock entry served,
no origin connection. docs/clients.md shows the same commands (``test_clients_doc.py`` checks
it against :data:`RECIPES`).

- **apt** trusts only ``Acquire::https::CAInfo``: fetchproxy's ``APT_CONFIG`` file sets it. The
  build's own ``-o`` options only keep apt away from the host's lists, sources and cache. In the
  root sandbox apt drops to ``_apt`` for its downloads, as on a user's machine, and ``_apt``
  reads the CA bundle in /run/fetchproxy/; in the user sandbox (no root) it cannot, and
  fetchproxy's file makes it download as the build's own user.
- **Java** reads no variable at all: fetchproxy's ``JAVA_TOOL_OPTIONS`` names a trust store of
  the whole CA bundle and the proxy; the build is the JDK's own HTTP client (``java
  Fetch.java URL...``), with no flag.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fetchproxy.record.tokens import PLACEHOLDER
from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    fetchproxy,
    lock_entries,
    prepare_work,
    resolving,
)
from tests.clients.support.npm_registry import CI_VARIABLES, Registry, registry
from tests.support.real_origins import (
    HOST,
    HTTPSOrigin,
    OriginReply,
    OriginRequest,
    Respond,
    static_site,
)
from tests.support.tools import require

__all__ = ["registry"]  # a fixture, imported to be used here

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

# ------------------------------------------------------------------------------------------ apt

APT_PACKAGE = "fetchproxy-hello"
APT_DEB = f"{APT_PACKAGE}_1.0_all.deb"
APT_STATE = "apt-state"
APT_DEBS = "debs"
"""Where ``apt-get download`` writes (its working directory): a directory ``_apt`` may write, as
a user's would be, or apt downloads as root and warns."""
APT_OPTIONS = (  # apt takes Dir::Etc::* paths relative to /etc/apt: $S is absolute
    '-o Dir::State::Lists="$S/lists" -o Dir::Cache="$S/cache"'
    ' -o Dir::Etc::SourceList="$S/sources.list" -o Dir::Etc::SourceParts="$S/none"'
    ' -o Dir::Etc::PreferencesParts="$S/none"'
)
APT_BUILD = (
    f'S="$PWD/{APT_STATE}"; apt-get {APT_OPTIONS} "$@" update'
    f' && cd {APT_DEBS} && apt-get {APT_OPTIONS} "$@" download {APT_PACKAGE}'
)
"""``sh -c APT_BUILD sh [OPTION...]``: the build's own options, if any, go to both commands."""
UNSANDBOXED = "Download is performed unsandboxed as root"
"""apt's warning when it cannot drop to ``_apt`` for a download."""
UNPRIVILEGED = ["setpriv", "--bounding-set=-all,+setfcap", "--inh-caps=-all", "--no-new-privs"]
"""Root without its capabilities (``tests/sandbox/test_user.py``'s launcher): fetchproxy cannot
build the root sandbox and takes the user sandbox, as for any user without root."""
USER_SANDBOX_NOTICE = "fetchproxy: not root, so the build runs in the unprivileged sandbox"


def apt_repository(directory: Path) -> dict[str, tuple[str, bytes]]:
    """A flat-free Debian repository (``dists/stable``, ``pool/``) with one tiny package, made
    by ``dpkg-deb`` and ``apt-ftparchive`` (unsigned: the source line says ``trusted=yes``)."""
    tools = require("dpkg-deb", "apt-ftparchive", install="apt-get install apt-utils")
    root = directory / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/doc" / APT_PACKAGE).mkdir(parents=True)
    (root / "usr/share/doc" / APT_PACKAGE / "README").write_text("fetched through apt\n")
    (root / "DEBIAN/control").write_text(
        f"Package: {APT_PACKAGE}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Test <test@example.org>\nDescription: a package for fetchproxy's tests\n"
    )
    repo = directory / "repo"
    pool = repo / "pool/main"
    pool.mkdir(parents=True)
    subprocess.run(
        [tools["dpkg-deb"], "--root-owner-group", "-Zgzip", "--build", root, pool],
        check=True,
        capture_output=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"},
    )
    binary = repo / "dists/stable/main/binary-all"
    binary.mkdir(parents=True)
    ftparchive = str(tools["apt-ftparchive"])
    packages = subprocess.run(
        [ftparchive, "packages", "pool"], cwd=repo, check=True, capture_output=True
    ).stdout
    (binary / "Packages").write_bytes(packages)
    (binary / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    fields = {"Suite": "stable", "Codename": "stable", "Architectures": "all", "Components": "main"}
    release = subprocess.run(
        [
            ftparchive,
            *(f"-oAPT::FTPArchive::Release::{k}={v}" for k, v in fields.items()),
            "release",
            "dists/stable",
        ],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout
    (repo / "dists/stable/Release").write_bytes(release)
    return {
        f"/debian/{path.relative_to(repo)}": ("application/octet-stream", path.read_bytes())
        for path in sorted(repo.rglob("*"))
        if path.is_file()
    }


def apt_work(tmp_path: Path, origin_url: str, *, debs_owner: int = 0) -> Path:
    """A working directory with apt's state and the download directory, owned by
    ``debs_owner``."""
    work = prepare_work(tmp_path)
    state = work / APT_STATE
    for sub in ("lists/partial", "cache/archives/partial", "none"):
        (state / sub).mkdir(parents=True)
    (state / "sources.list").write_text(f"deb [trusted=yes] {origin_url}/debian stable main\n")
    (work / APT_DEBS).mkdir()
    os.chown(work / APT_DEBS, debs_owner, -1)
    return work


def downloaded(work: Path) -> dict[str, str]:
    """The .deb files apt wrote: name → SHA-256 (apt gives them to root once downloaded)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (work / APT_DEBS).glob("*.deb")
    }


def apt(
    work: Path, store: Path, *args: str | Path, apt_options: Sequence[str] = (), **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy ARGS -- sh -c APT_BUILD`` from ``work``."""
    return fetchproxy(work, store, *args, "--", "sh", "-c", APT_BUILD, "sh", *apt_options, **kwargs)


def with_umask(umask: int) -> list[str]:
    """A command prefix: run with ``umask``."""
    return ["sh", "-c", f'umask {umask:03o} && exec "$@"', "sh"]


def test_apt_drops_to_apt_and_trusts_the_run_through_apt_config_and_replays(
    tmp_path: Path,
) -> None:
    """As on a user's machine, apt downloads as ``_apt`` (uid 42 on Debian): it gives the lists'
    partial directory to ``_apt``, does not warn that it downloads as root, and its https method,
    running as ``_apt``, reads the CA bundle in /run/fetchproxy/. Recorded from a launcher with
    umask 077 (a hardened login), replayed with umask 022."""
    apt_user = pwd.getpwnam("_apt")  # Debian's apt package makes it
    files = apt_repository(tmp_path / "build")
    expected = {APT_DEB: hashlib.sha256(files[f"/debian/pool/main/{APT_DEB}"][1]).hexdigest()}
    with HTTPSOrigin(tmp_path / "origin", static_site(files)) as origin:
        work = apt_work(tmp_path / "record", origin.url, debs_owner=apt_user.pw_uid)
        recorded = apt(
            work, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            prefix=with_umask(0o077),
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert UNSANDBOXED not in recorded.stderr
    assert "Certificate verification failed" not in recorded.stdout
    fetched = [r.target for r in origin.requests]
    assert "/debian/dists/stable/Release" in fetched
    assert f"/debian/pool/main/{APT_DEB}" in fetched
    assert (work / APT_STATE / "lists/partial").stat().st_uid == apt_user.pw_uid
    assert downloaded(work) == expected

    again = apt_work(tmp_path / "replay", origin.url, debs_owner=apt_user.pw_uid)
    shutil.copy(work / LOCK, again / LOCK)
    replayed = apt(again, tmp_path / "store", "replay", "--exact", prefix=with_umask(0o022))
    assert_replay_served(replayed, again, requests=lock_entries(again))
    assert UNSANDBOXED not in replayed.stderr
    assert (again / APT_STATE / "lists/partial").stat().st_uid == apt_user.pw_uid
    assert downloaded(again) == expected


def test_apt_in_the_user_sandbox_downloads_as_the_builds_own_user_and_replays(
    tmp_path: Path,
) -> None:
    """Without root fetchproxy takes the user sandbox, whose one mapped id is the launcher's:
    apt's own drop to ``_apt`` fails there (``setgroups 65534 failed``; ``_apt`` is not even
    mapped), so fetchproxy's ``APT_CONFIG`` file sets ``APT::Sandbox::User "root"`` and apt
    downloads as the build's own user. apt's default, given back by the build's ``-o``, fails."""
    files = apt_repository(tmp_path / "build")
    expected = {APT_DEB: hashlib.sha256(files[f"/debian/pool/main/{APT_DEB}"][1]).hexdigest()}
    with HTTPSOrigin(tmp_path / "origin", static_site(files)) as origin:
        work = apt_work(tmp_path / "record", origin.url)
        recorded = apt(
            work, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            prefix=UNPRIVILEGED,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        assert USER_SANDBOX_NOTICE in recorded.stderr
        assert downloaded(work) == expected

        default = apt_work(tmp_path / "apt-default", origin.url)
        refused = apt(
            default, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            apt_options=["-o", "APT::Sandbox::User=_apt"], prefix=UNPRIVILEGED,
        )  # fmt: skip
    assert refused.returncode != 0
    assert "E: setgroups 65534 failed - setgroups (1: Operation not permitted)" in refused.stderr
    assert downloaded(default) == {}

    again = apt_work(tmp_path / "replay", origin.url)
    shutil.copy(work / LOCK, again / LOCK)
    replayed = apt(again, tmp_path / "store", "replay", "--exact", prefix=UNPRIVILEGED)
    assert_replay_served(replayed, again, requests=lock_entries(again))
    assert downloaded(again) == expected


# ----------------------------------------------------------------------------------------- java

JAVA_HOST = "maven.fetchproxy.test"
"""The JVM never proxies a loopback address (127.0.0.2 included, whatever ``http.nonProxyHosts``
says), so the JVM is given a name; the recording proxy resolves it with :func:`resolving`."""
FETCH_JAVA = """import java.io.InputStream;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;

public final class Fetch {
    public static void main(String[] urls) throws Exception {
        for (String url : urls) {
            try (InputStream in = new URL(url).openStream()) {
                Files.write(Path.of(url.substring(url.lastIndexOf('/') + 1)), in.readAllBytes());
            }
        }
    }
}
"""
JAVA_FILES = {
    "/maven2/com/example/hello/1.0/hello-1.0.jar": ("application/java-archive", b"PK\x03\x04jar"),
    "/maven2/com/example/hello/1.0/hello-1.0.pom": ("text/xml", b"<project/>\n"),
}
JAVA_BUILD = 'java Fetch.java "$@"'  # the JDK's own HTTP client, as every JVM build tool has


def java_work(tmp_path: Path) -> Path:
    work = prepare_work(tmp_path)
    (work / "Fetch.java").write_text(FETCH_JAVA)
    return work


def fetched_files(work: Path) -> dict[str, bytes]:
    return {name: (work / name).read_bytes() for name in ("hello-1.0.jar", "hello-1.0.pom")}


def test_the_jvm_trusts_the_run_through_java_tool_options_and_replays(tmp_path: Path) -> None:
    """No ``-D`` flag, no keytool: ``JAVA_TOOL_OPTIONS`` gives the JVM the proxy and a trust
    store of the whole bundle (``keytool -importcert`` of the bundle would take only its first
    certificate, and the JVM fails with "PKIX path building failed")."""
    require("java", install="apt-get install default-jdk-headless")
    with HTTPSOrigin(tmp_path / "origin", static_site(JAVA_FILES), names=[JAVA_HOST]) as origin:
        port = origin.url.rpartition(":")[2]
        urls = [f"https://{JAVA_HOST}:{port}{path}" for path in JAVA_FILES]
        work = java_work(tmp_path / "record")
        recorded = fetchproxy(
            work, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            "--allow-origin", JAVA_HOST, "--", "sh", "-c", JAVA_BUILD, "java", *urls,
            prefix=resolving(tmp_path, JAVA_HOST),
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "Picked up JAVA_TOOL_OPTIONS: -Djavax.net.ssl.trustStore=/run/fetchproxy/" in (
        recorded.stderr
    )
    assert [r.target for r in origin.requests] == list(JAVA_FILES)
    assert fetched_files(work) == {
        "hello-1.0.jar": JAVA_FILES["/maven2/com/example/hello/1.0/hello-1.0.jar"][1],
        "hello-1.0.pom": JAVA_FILES["/maven2/com/example/hello/1.0/hello-1.0.pom"][1],
    }

    again = java_work(tmp_path / "replay")
    shutil.copy(work / LOCK, again / LOCK)
    replayed = fetchproxy(
        again, tmp_path / "store", "replay", "--exact", "--", "sh", "-c", JAVA_BUILD, "java", *urls
    )
    assert_replay_served(replayed, again, requests=2)
    assert fetched_files(again) == fetched_files(work)


# --------------------------------------------------------------------------------------- tokens


def token_server() -> Respond:
    """A token endpoint as Docker's and OAuth's are: a fresh credential on every request."""
    issued = iter(range(1, 1000))

    def respond(request: OriginRequest) -> OriginReply:
        n = next(issued)
        body = json.dumps(
            {
                "token": f"eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiJ{n}In0.c2lnbmF0dXJl{n}",
                "access_token": f"eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiJ{n}In0.c2lnbmF0dXJl{n}",
                "expires_in": 300,
                "issued_at": f"2026-01-01T00:00:{n:02d}Z",
            }
        ).encode()
        return OriginReply(200, (("Content-Type", "application/json"),), body)

    return respond


TOKEN_BUILD = 'curl -sSf -o token.json "$0"'


def test_a_token_never_reaches_the_store_or_the_lock_and_re_records_are_stable(
    tmp_path: Path,
) -> None:
    """The build gets the real token in record (the registry checks it); the store and the lock
    get a redacted one, the same on every record; replay serves that well-formed answer."""
    store = tmp_path / "store"
    locks, tokens = [], []
    with HTTPSOrigin(tmp_path / "origin", token_server()) as origin:
        url = f"{origin.url}/token?scope=repository%3Aapp%3Apull&service=registry&account=fp"
        for round_ in ("first", "second"):
            work = prepare_work(tmp_path / round_)
            recorded = fetchproxy(
                work, store, "record", "--upstream-ca", origin.ca_path,
                "--", "sh", "-c", TOKEN_BUILD, url,
            )  # fmt: skip
            assert recorded.returncode == 0, recorded.stdout + recorded.stderr
            assert '1 token answer locked with the tokens replaced (redacted = "token")' in (
                recorded.stderr
            )
            tokens.append(json.loads((work / "token.json").read_bytes())["token"])
            locks.append((work / LOCK).read_text())
    assert tokens[0] != tokens[1]  # the client got the origin's fresh tokens
    assert locks[0] == locks[1]  # re-records are stable: no content drift
    assert 'redacted = "token"\n' in locks[0]
    assert "account" not in locks[0]  # whose credentials asked for it is a secret parameter
    stored = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    for token in tokens:
        assert token.encode() not in stored
        assert token.split(".")[2].encode() not in stored

    again = prepare_work(tmp_path / "replay")
    (again / LOCK).write_text(locks[0])
    replayed = fetchproxy(again, store, "replay", "--exact", "--", "sh", "-c", TOKEN_BUILD, url)
    assert_replay_served(replayed, again, requests=1)
    assert json.loads((again / "token.json").read_bytes()) == {
        "token": PLACEHOLDER,
        "access_token": PLACEHOLDER,
        "expires_in": 300,
    }


# --------------------------------------------------------------------------------------- accept

INDEX = {"/index/config.json": ("application/json", b'{"dl": "https://127.0.0.2/crates"}\n')}
INDEX_BUILD = 'curl -sSf -H "Accept: $0" -o config.json "$1"'


def test_a_lock_made_with_one_accept_serves_another_where_accept_selects_nothing(
    tmp_path: Path,
) -> None:
    """cargo 1.95 asks its sparse index with ``Accept: text/plain``, cargo 1.65 with ``*/*``:
    without the setting the second is refused, and the refusal says why and what to do; with
    ``[fetchproxy] accept-selects-nothing`` in record and replay, one lock serves both."""
    store = tmp_path / "store"
    with HTTPSOrigin(tmp_path / "origin", static_site(INDEX)) as origin:
        url = f"{origin.url}/index/config.json"
        plain = prepare_work(tmp_path / "plain")
        recorded = fetchproxy(
            plain, store, "record", "--upstream-ca", origin.ca_path,
            "--", "sh", "-c", INDEX_BUILD, "text/plain", url,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
        declared = prepare_work(tmp_path / "declared")
        config = f'[fetchproxy]\naccept-selects-nothing = ["{HOST}/index/"]\n'
        (declared / "fetchproxy.toml").write_text(config)
        recorded = fetchproxy(
            declared, store, "record", "--upstream-ca", origin.ca_path,
            "--", "sh", "-c", INDEX_BUILD, "text/plain", url,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert 'accept = "text/plain"\n' in (plain / LOCK).read_text()
    assert 'accept = "*"\n' in (declared / LOCK).read_text()
    assert "revision = 3\n" in (declared / LOCK).read_text()

    refused = fetchproxy(plain, store, "replay", "--", "sh", "-c", INDEX_BUILD, "*/*", url)
    assert refused.returncode != 0
    assert (
        f'fetchproxy:     the lock holds GET {url} with accept = "text/plain", and this request '
        "has no Accept (or */*): the only difference is the Accept header"
    ) in refused.stderr
    assert f"`fetchproxy config add fetchproxy.accept-selects-nothing {HOST}:" in refused.stderr

    for accept in ("*/*", "text/plain", "application/json"):
        (declared / "config.json").unlink(missing_ok=True)
        replayed = fetchproxy(
            declared, store, "replay", "--exact", "--", "sh", "-c", INDEX_BUILD, accept, url
        )
        assert_replay_served(replayed, declared, requests=1)
        assert (declared / "config.json").read_bytes() == INDEX["/index/config.json"][1]
    assert len(origin.requests) == 2  # the replays reached no origin


# ------------------------------------------------------------------------------ self-update checks


def test_npm_asks_for_no_update_of_itself_on_a_laptop(tmp_path: Path, registry: Registry) -> None:
    """npm checks ``GET <registry>/npm`` once a week, but not in CI: a lock recorded on a
    laptop would hold the check, or refuse it, depending on the day. fetchproxy turns it off."""
    require("npm", install="apt-get install npm")
    registry.publish("left-pad-ish", "1.0.0")
    work = prepare_work(tmp_path)
    (work / "package.json").write_text('{"name": "app", "version": "1.0.0"}\n')
    unset = " ".join(f"-u {name}" for name in CI_VARIABLES)
    install = (
        f'env {unset} npm install --registry "$0" --no-audit --no-fund --no-package-lock '
        "left-pad-ish@1.0.0"
    )
    recorded = fetchproxy(
        work, tmp_path / "store", "record", "--allow-origin", "127.0.0.62",
        "--", "sh", "-c", install, registry.url,
        env={"npm_config_cache": str(work / "cache")},
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert registry.requests == ["/left-pad-ish", "/left-pad-ish/-/left-pad-ish-1.0.0.tgz"]
    assert lock_entries(work) == 2

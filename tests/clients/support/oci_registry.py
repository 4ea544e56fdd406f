"""An OCI registry for skopeo, as the registry tests use one: Debian's docker-registry
(distribution 2.8) over TLS on the host's 127.0.0.2 under the name :data:`NAME`
(:class:`DockerRegistry`), holding a tiny image made by hand (:func:`oci_image`, pushed with
:func:`push`); with a token server that issues real ES256 JWTs the registry verifies
(:class:`TokenServer`, both in the :func:`token_registry` fixture); and the pull, record and
replay of the image through fetchproxy (:func:`pull`, :func:`record`, :func:`replay`)."""

from __future__ import annotations

import base64
import datetime
import gzip
import hashlib
import http.client
import io
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from fetchproxy.ca import CertificateAuthority
from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    fetchproxy,
    lock_entries,
    prepare_work,
    resolving,
)
from tests.support.real_origins import HOST, HTTPSOrigin, OriginReply, OriginRequest, origin_ca
from tests.support.tools import require

NAME = "registry.fetchproxy.test"
"""The registry's and the token server's host name (resolved to 127.0.0.2 by :func:`resolving`)."""
SERVICE = "fetchproxy-test-registry"
ISSUER = "fetchproxy-test-token-server"
REPOSITORY, TAG = "app", "1.0"
USER, PASSWORD = "builder", "pw-of-the-builder-0a1b2c3d"


# ---------------------------------------------------------------------------------------- image


@dataclass(frozen=True)
class Image:
    """An OCI image layout (tag :data:`TAG`) and the bytes in it."""

    layout: Path
    manifest: bytes
    config: bytes
    layer: bytes

    def pulled(self) -> dict[str, bytes]:
        """What ``skopeo copy … dir:out`` must leave: the manifest as the registry holds it,
        each blob under its digest's hex, containers/image's version file."""
        return {
            "manifest.json": self.manifest,
            hashlib.sha256(self.config).hexdigest(): self.config,
            hashlib.sha256(self.layer).hexdigest(): self.layer,
            "version": b"Directory Transport Version: 1.1\n",
        }


def oci_image(directory: Path) -> Image:
    """A tiny image made by hand, the same bytes on every run: a gzipped tar of one file, its
    config, its manifest, in an OCI image layout in ``directory``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = b"pulled through fetchproxy\n"
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [_digest(raw.getvalue())]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
        }
    )
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for blob in (layer, config, manifest):
        (blobs / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    (directory / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    reference = {"annotations": {"org.opencontainers.image.ref.name": TAG}}
    entry = _descriptor("application/vnd.oci.image.manifest.v1+json", manifest) | reference
    (directory / "index.json").write_bytes(_json({"schemaVersion": 2, "manifests": [entry]}))
    return Image(directory, manifest, config, layer)


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data)}


# ---------------------------------------------------------------------------------- token server


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    """A token endpoint as Docker Hub's (``auth.docker.io/token``) and ghcr.io's: ``GET
    /token?service=…&scope=repository:NAME:ACTIONS`` answers ``{"token", "access_token",
    "expires_in", "issued_at"}`` with a fresh JWT on every request, signed (ES256) by a key
    whose certificate, issued by ``ca``, is in the JWT's ``x5c`` header: the registry checks
    the chain against its ``rootcertbundle`` (``ca``), then the signature, issuer, audience and
    times. With ``credentials``, only Basic ``user:password`` gets a token (a private
    repository); otherwise anyone does."""

    ca: CertificateAuthority
    credentials: tuple[str, str] | None = None
    issued: list[str] = field(default_factory=list)
    refused: int = 0

    def __post_init__(self) -> None:
        cert_pem, key_pem = self.ca.issue_server_certificate(["token-signer"])
        key = serialization.load_pem_private_key(key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        self._key = key
        der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
        self._header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(der).decode()]}

    def __call__(self, request: OriginRequest) -> OriginReply:
        path, _, query = request.target.partition("?")
        params = parse_qs(query)
        if path != "/token" or params.get("service") != [SERVICE]:
            return OriginReply(404, (("Content-Type", "text/plain"),), b"no such service\n")
        subject = ""
        if self.credentials is not None:
            user, password = self.credentials
            basic = base64.b64encode(f"{user}:{password}".encode()).decode()
            if request.header("authorization") != f"Basic {basic}":
                self.refused += 1
                challenge = (("WWW-Authenticate", 'Basic realm="token"'),)
                return OriginReply(401, (("Content-Type", "application/json"), *challenge), b"{}")
            subject = user
        token = self.sign(subject, params.get("scope", []))
        self.issued.append(token)
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
        body = {"token": token, "access_token": token, "expires_in": 300, "issued_at": now}
        return OriginReply(200, (("Content-Type", "application/json"),), _json(body))

    def sign(
        self, subject: str, scopes: Sequence[str], *, issuer: str = ISSUER, audience: str = SERVICE
    ) -> str:
        """A JWT as distribution's token auth checks it (registry/auth/token)."""
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {
            "iss": issuer,
            "sub": subject,
            "aud": audience,
            "exp": now + 300,
            "nbf": now - 1,
            "iat": now,
            "jti": secrets.token_hex(16),
            "access": access,
        }
        signing_input = f"{_b64url(_json(self._header))}.{_b64url(_json(claims))}"
        r, s = decode_dss_signature(
            self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        )
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


# -------------------------------------------------------------------------------------- registry


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class DockerRegistry:
    """``with DockerRegistry(directory, ca) as registry:`` serves ``https://NAME:PORT`` with
    Debian's docker-registry (distribution 2.8), its storage and configuration in ``directory``.
    ``token_realm``: the URL of a token server; the registry then asks for Bearer tokens."""

    def __init__(
        self, directory: Path, ca: CertificateAuthority, *, token_realm: str | None = None
    ) -> None:
        self._binary = require("docker-registry", install="apt-get install docker-registry")
        directory.mkdir(parents=True)
        cert_pem, key_pem = ca.issue_server_certificate([HOST, NAME])
        (directory / "cert.pem").write_bytes(cert_pem)
        (directory / "key.pem").write_bytes(key_pem)
        (directory / "ca.pem").write_bytes(ca.cert_pem)
        self._directory, self._ca, self._realm = directory, ca, token_realm
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """``NAME:PORT``, as an image reference names the registry."""
        return f"{NAME}:{self.port}"

    def _config(self) -> dict[str, object]:
        directory = self._directory
        config: dict[str, object] = {
            "version": "0.1",
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(directory / "data")}},
            "http": {
                "addr": f"{HOST}:{self.port}",
                "secret": "fetchproxy-test-registry-secret",
                "tls": {
                    "certificate": str(directory / "cert.pem"),
                    "key": str(directory / "key.pem"),
                },
            },
        }
        if self._realm is not None:
            config["auth"] = {
                "token": {
                    "realm": self._realm,
                    "service": SERVICE,
                    "issuer": ISSUER,
                    "rootcertbundle": str(directory / "ca.pem"),
                }
            }
        return config

    def __enter__(self) -> Self:
        """Started on a free port (another one if that was taken meanwhile), once it answers
        ``/v2/`` over TLS with a certificate of ``ca``: no other server can."""
        config, log = self._directory / "config.yml", self._directory / "registry.log"
        for _ in range(3):
            self.port = free_port()
            config.write_bytes(_json(self._config()))  # JSON is YAML
            with log.open("wb") as out:
                command = [str(self._binary["docker-registry"]), "serve", str(config)]
                self._process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            deadline = time.monotonic() + 10
            while self._process.poll() is None and time.monotonic() < deadline:
                try:
                    self.answer("/v2/")
                except OSError:
                    time.sleep(0.02)
                else:
                    return self
            self.stop()
            if "address already in use" not in log.read_text():
                break
        raise AssertionError(f"docker-registry did not start: {log.read_text()}")

    def answer(self, path: str, headers: Mapping[str, str] = {}) -> int:
        """The status of ``GET path`` asked directly (not through fetchproxy)."""
        context = ssl.create_default_context(cadata=self._ca.cert_pem.decode())
        connection = http.client.HTTPSConnection(HOST, self.port, context=context, timeout=5)
        try:
            connection.request("GET", path, headers=dict(headers))
            return connection.getresponse().status
        finally:
            connection.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


# ---------------------------------------------------------------------------------------- skopeo


def cert_dir(tmp_path: Path, ca: CertificateAuthority) -> Path:
    """The CA in containers/image's ``certs.d`` form, for skopeo outside fetchproxy."""
    certs = tmp_path / "certs"
    if not certs.exists():
        certs.mkdir()
        (certs / "ca.crt").write_bytes(ca.cert_pem)
    return certs


def skopeo(tmp_path: Path, *args: str | Path, stdin: bytes = b"") -> None:
    """skopeo outside fetchproxy (to set a registry up): no proxy, :data:`NAME` resolved."""
    require("skopeo", install="apt-get install skopeo")
    done = subprocess.run(
        [*resolving(tmp_path, NAME), "skopeo", *(str(a) for a in args)],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        input=stdin,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def push(tmp_path: Path, registry: DockerRegistry, ca: CertificateAuthority, *creds: str) -> Image:
    """The image from :func:`oci_image`, pushed into ``registry`` (outside fetchproxy)."""
    image = oci_image(tmp_path / "layout")
    skopeo(
        tmp_path, "--insecure-policy", "copy", "--quiet", "--dest-cert-dir",
        cert_dir(tmp_path, ca), *creds, f"oci:{image.layout}:{TAG}",
        f"docker://{registry.url}/{REPOSITORY}:{TAG}",
    )  # fmt: skip
    return image


# ------------------------------------------------------------------------------------------ runs


def pull(registry: DockerRegistry, *options: str) -> list[str]:
    """The build: ``skopeo copy docker://NAME:PORT/app:1.0 dir:out``, nothing else."""
    return ["skopeo", "copy", *options, f"docker://{registry.url}/{REPOSITORY}:{TAG}", "dir:out"]


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def build_env(work: Path) -> dict[str, str]:
    """skopeo's credentials come from ``work/auth.json`` and nowhere else (absent: none)."""
    return {"REGISTRY_AUTH_FILE": str(work / "auth.json")}


def record(
    tmp_path: Path, work: Path, ca: CertificateAuthority, build: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """``fetchproxy record -- BUILD`` from ``work`` (where a lock may be already), with
    :data:`NAME` resolved for the recording proxy; the build's ``dir:out`` made anew."""
    shutil.rmtree(work / "out", ignore_errors=True)
    ca_path = tmp_path / "origin-ca.pem"
    ca_path.write_bytes(ca.cert_pem)
    recorded = fetchproxy(
        work, tmp_path / "store", "record", "--upstream-ca", ca_path, "--allow-origin", NAME,
        "--", *build, env=build_env(work), prefix=resolving(tmp_path, NAME),
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    return recorded


def replay(
    tmp_path: Path, lock: str, build: Sequence[str]
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``fetchproxy replay --exact -- BUILD`` of ``lock`` in a new working directory; it must
    serve one request per entry, every entry used."""
    work = prepare_work(tmp_path / "replay")
    (work / LOCK).write_text(lock)
    replayed = fetchproxy(
        work, tmp_path / "store", "replay", "--exact", "--", *build, env=build_env(work)
    )
    assert_replay_served(replayed, work, requests=lock_entries(work))
    return work, replayed


def kept_by_fetchproxy(tmp_path: Path) -> bytes:
    """Every byte fetchproxy kept: the store's files, and the lock, journal and event log of
    every working directory."""
    kept = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    kept += [p for p in tmp_path.glob("*/work/fetchproxy*") if p.is_file()]
    assert any(p.name == LOCK for p in kept)
    return b"\0".join(p.read_bytes() for p in kept)


@pytest.fixture
def ca() -> CertificateAuthority:
    return origin_ca()


# ----------------------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class TokenRegistry:
    """A registry that asks for Bearer tokens, its token server, and the image it holds."""

    registry: DockerRegistry
    tokens: TokenServer
    origin: HTTPSOrigin  # the token server's
    realm: str
    image: Image

    def stop(self) -> None:
        self.registry.stop()
        self.origin.stop()


@pytest.fixture(params=[False, True], ids=["anonymous", "credentials"])
def token_registry(
    request: pytest.FixtureRequest, tmp_path: Path, ca: CertificateAuthority
) -> Iterator[TokenRegistry]:
    credentials = (USER, PASSWORD) if request.param else None
    tokens = TokenServer(ca, credentials)
    with HTTPSOrigin(tmp_path / "token-server", tokens, names=[NAME], ca=ca) as origin:
        realm = f"https://{NAME}:{origin.url.rpartition(':')[2]}/token"
        with DockerRegistry(tmp_path / "registry", ca, token_realm=realm) as registry:
            creds = ("--dest-creds", f"{USER}:{PASSWORD}") if credentials else ()
            image = push(tmp_path, registry, ca, *creds)
            yield TokenRegistry(registry, tokens, origin, realm, image)

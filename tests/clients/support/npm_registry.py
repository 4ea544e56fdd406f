"""A plain-HTTP npm registry on the host's loopback (:class:`Registry`, the :func:`registry`
fixture) serving package tarballs made the same on every run (:func:`npm_tarball`), and the
variables npm takes for "in CI" (:data:`CI_VARIABLES`)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator, Mapping

import pytest


def npm_tarball(name: str, version: str, dependencies: Mapping[str, str] = {}) -> bytes:
    """A package tarball, byte for byte the same on every run."""
    buffer = io.BytesIO()
    manifest = {"name": name, "version": version, "main": "index.js"}
    files = {
        "package/package.json": json.dumps(
            {**manifest, "dependencies": dict(dependencies)} if dependencies else manifest
        ),
        "package/index.js": f"module.exports = {json.dumps(version)};\n",
    }
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.USTAR_FORMAT) as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Registry:
    """A plain-HTTP npm registry on 127.0.0.62 (npm through a proxy needs a host name for TLS;
    over plain HTTP an address does): ``publish`` adds a version and makes it ``latest``."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.versions: dict[str, dict[str, dict[str, object]]] = {}  # by package
        self.requests: list[str] = []
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                body = registry.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                kind = (
                    "application/json"
                    if not self.path.endswith(".tgz")
                    else "application/octet-stream"
                )
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.62", 0), Handler)
        self.url = f"http://127.0.0.62:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.running = True

    def publish(self, name: str, version: str, dependencies: Mapping[str, str] = {}) -> None:
        data = npm_tarball(name, version, dependencies)
        path = f"/{name}/-/{name}-{version}.tgz"
        self.files[path] = data
        integrity = base64.b64encode(hashlib.sha512(data).digest()).decode()
        versions = self.versions.setdefault(name, {})
        versions[version] = {
            "name": name,
            "version": version,
            **({"dependencies": dict(dependencies)} if dependencies else {}),
            "dist": {
                "tarball": f"{self.url.rstrip('/')}{path}",
                "shasum": hashlib.sha1(data).hexdigest(),
                "integrity": f"sha512-{integrity}",
            },
        }
        packument = {"name": name, "dist-tags": {"latest": version}, "versions": versions}
        self.files[f"/{name}"] = json.dumps(packument).encode()

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def registry() -> Iterator[Registry]:
    registry = Registry()
    try:
        yield registry
    finally:
        registry.stop()


CI_VARIABLES = ("CI", "CONTINUOUS_INTEGRATION", "BUILD_NUMBER", "RUN_ID", "GITHUB_ACTIONS")
"""What npm takes for "in CI" (its ci-info), where it never checks for updates: unset in the
build, as on a laptop, where a recording would otherwise lock the check."""

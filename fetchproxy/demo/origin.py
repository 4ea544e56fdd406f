"""The demo's origin: a small HTTPS file server with its own CA, on the host's loopback.

It listens on ``127.0.0.2`` (not 127.0.0.1: a sandboxed build reaches its *own* loopback
directly, so a host-loopback origin must use another address) at a fixed port, so that the URLs
and therefore the demo's lock are the same on every machine. The content is fixed too.
"""

from __future__ import annotations

import http.server
import random
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fetchproxy.ca import generate_ca
from fetchproxy.errors import FetchproxyError

HOST = "127.0.0.2"
PORT = 18443
BASE = f"https://{HOST}:{PORT}"


class DemoOriginError(FetchproxyError, OSError):
    """The demo's origin cannot start."""


@dataclass(frozen=True)
class Resource:
    status: int
    content_type: str
    body: bytes
    location: str | None = None


def _tarball(version: str, size: int) -> bytes:
    """Deterministic pseudo-random bytes standing in for a release tarball."""
    return random.Random(f"tool-{version}").randbytes(size)  # noqa: S311 -- not crypto


def site(revision: int = 1) -> dict[str, Resource]:
    """The fixed content: an index, a redirect, two tarballs of a few MB, a NOTICE file.

    Revision 2 is the same site after the index was re-published with other bytes under the
    same URL: what ``lock diff`` calls content drift.
    """
    tool_10 = _tarball("1.0", 3 * 1024 * 1024)
    tool_11 = _tarball("1.1", 3 * 1024 * 1024 + 4096)
    index = b"tool 1.0\ntool 1.1\n" + (b"tool 1.2 (upcoming)\n" if revision > 1 else b"")
    return {
        "/index.txt": Resource(200, "text/plain", index),
        "/latest": Resource(
            302, "text/plain", b"see /pool/tool-1.1.tar.gz\n", "/pool/tool-1.1.tar.gz"
        ),
        "/pool/tool-1.0.tar.gz": Resource(200, "application/gzip", tool_10),
        "/pool/tool-1.1.tar.gz": Resource(200, "application/gzip", tool_11),
        "/pool/NOTICE": Resource(200, "text/plain", b"Demo content for fetchproxy.\n"),
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    resources: ClassVar[dict[str, Resource]] = {}

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        resource = self.resources.get(self.path) or Resource(404, "text/plain", b"not found\n")
        self.send_response(resource.status)
        self.send_header("content-type", resource.content_type)
        self.send_header("content-length", str(len(resource.body)))
        if resource.location:
            self.send_header("location", resource.location)
        self.end_headers()
        if send_body:
            self.wfile.write(resource.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
        pass


class DemoOrigin:
    """The running origin; ``ca_path`` is the CA a recording must trust upstream."""

    def __init__(self, directory: Path, *, revision: int = 1) -> None:
        ca = generate_ca("fetchproxy demo origin CA")
        cert_pem, key_pem = ca.issue_server_certificate([HOST])
        self.ca_path = directory / "origin-ca.pem"
        self.ca_path.write_bytes(ca.cert_pem)
        with tempfile.TemporaryDirectory(prefix="fetchproxy-demo-origin-") as secret:
            chain = Path(secret) / "server.pem"
            chain.write_bytes(cert_pem + key_pem)
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._context.load_cert_chain(chain)
        _Handler.resources = site(revision)
        try:
            self._server = http.server.ThreadingHTTPServer((HOST, PORT), _Handler)
        except OSError as exc:
            raise DemoOriginError(
                f"the demo's origin cannot listen on {HOST}:{PORT}: {exc.strerror} — is another "
                "fetchproxy demo running?"
            ) from None
        self._server.socket = self._context.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

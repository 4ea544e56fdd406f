"""An origin for the remote-store and ``store fetch`` tests: files it serves can change.

``FileOrigin(files)`` serves ``files`` (path -> bytes) on 127.0.0.70, port 0, over HTTP, or over
HTTPS with a certificate for 127.0.0.70 from a CA of its own (``tls=True``; ``ca_cert`` is the
file to give ``--upstream-ca``). ``files`` may change while it runs (a drifted entry); a path
in ``needs_token`` answers 403 unless the query holds ``token=<the value>``. It keeps every
request it answered (path, query, headers), and a ``POST`` answers with the digest of the body
it got (a stand-in for git's negotiation).
"""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from fetchproxy.ca import generate_ca
from fetchproxy.digest import digest_bytes

HOST = "127.0.0.70"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class _State:
    files: dict[str, bytes]
    needs_token: dict[str, str] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FileOrigin:
    def __init__(self, files: dict[str, bytes], *, tls: bool = False, pki: Path | None = None):
        self.state = _State(files=dict(files))
        state = self.state

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _note(self) -> str:
                with state.lock:
                    state.seen.append(
                        Seen(
                            self.command, self.path, {k.lower(): v for k, v in self.headers.items()}
                        )
                    )
                return self.path.partition("?")[0]

            def _send(self, status: int, body: bytes, head: bool = False) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                path = self._note()
                token = state.needs_token.get(path)
                if token is not None and f"token={token}" not in self.path.partition("?")[2]:
                    self._send(403, b"forbidden\n")
                    return
                body = state.files.get(path)
                self._send(404, b"not found\n") if body is None else self._send(200, body)

            def do_HEAD(self) -> None:
                body = state.files.get(self._note())
                self._send(404 if body is None else 200, body or b"", head=True)

            def do_POST(self) -> None:
                self._note()
                length = int(self.headers.get("content-length", "0"))
                self._send(200, digest_bytes(self.rfile.read(length)).encode())

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.ca_cert: Path | None = None
        if tls:
            assert pki is not None, "an HTTPS origin needs a directory for its certificates"
            pki.mkdir(parents=True, exist_ok=True)
            ca = generate_ca("fetchproxy sync test origin CA", lifetime=datetime.timedelta(days=1))
            cert_pem, key_pem = ca.issue_server_certificate([HOST])
            self.ca_cert = pki / "origin-ca.pem"
            self.ca_cert.write_bytes(ca.cert_pem)
            (pki / "cert.pem").write_bytes(cert_pem + key_pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pki / "cert.pem")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"{self.scheme}://{HOST}:{self.port}{path}"

    @property
    def seen(self) -> list[Seen]:
        with self.state.lock:
            return list(self.state.seen)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(timeout=10)
        self.server.server_close()

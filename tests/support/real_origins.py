"""Origins for the real-client tests: HTTPS on the host's 127.0.0.2, each with its own CA.

127.0.0.2, not 127.0.0.1: a sandboxed build reaches its *own* loopback directly (``no_proxy``),
so an origin on the host's loopback must use another address to be reached through the proxy.

:class:`HTTPSOrigin` answers every request with a function and keeps what it received, so a
test can show what a client sent and that a replay reached no origin. Two such functions:
:func:`git_http_backend` (git's own smart-HTTP CGI) and :func:`static_site` (e.g. a PEP 503
"simple" index from :func:`simple_index`, with wheels made by :func:`make_wheel`).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import os
import ssl
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self

from fetchproxy.ca import CertificateAuthority, generate_ca

HOST = "127.0.0.2"


@dataclass(frozen=True)
class OriginRequest:
    method: str
    target: str  # path and query, as sent
    headers: tuple[tuple[str, str], ...]  # names lowercase
    body: bytes  # as sent (a gzip body stays compressed)

    def header(self, name: str) -> str:
        return next((value for key, value in self.headers if key == name), "")


@dataclass(frozen=True)
class OriginReply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


Respond = Callable[[OriginRequest], OriginReply]


def origin_ca() -> CertificateAuthority:
    """A CA for the tests' origins (each :class:`HTTPSOrigin` makes its own unless given one)."""
    return generate_ca("fetchproxy real-client test origin CA")


class HTTPSOrigin:
    """``with HTTPSOrigin(directory, respond) as origin:`` serves ``https://127.0.0.2:PORT``.

    ``ca_path`` is the CA certificate a recording must trust upstream (``--upstream-ca``).
    ``names``: host names its certificate holds too (for a client that must be given a name,
    resolved to 127.0.0.2 by a test's own /etc/hosts). ``ca``: the CA to issue its certificate
    from (:func:`origin_ca`; a new one by default), for origins that must share one.
    :meth:`stop` stops it for good (the port then refuses connections).
    """

    def __init__(
        self,
        directory: Path,
        respond: Respond,
        *,
        names: Sequence[str] = (),
        ca: CertificateAuthority | None = None,
    ) -> None:
        ca = ca or origin_ca()
        cert_pem, key_pem = ca.issue_server_certificate([HOST, *names])
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_path = directory / "origin-ca.pem"
        self.ca_path.write_bytes(ca.cert_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory(prefix="fetchproxy-test-origin-") as secret:
            chain = Path(secret) / "server.pem"
            chain.write_bytes(cert_pem + key_pem)
            context.load_cert_chain(chain)
        self.requests: list[OriginRequest] = []
        self._server = http.server.ThreadingHTTPServer((HOST, 0), _handler(respond, self.requests))
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.url = f"https://{HOST}:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,))
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
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()


def _handler(
    respond: Respond, requests: list[OriginRequest]
) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._answer()

        def do_HEAD(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def _answer(self) -> None:
            request = OriginRequest(
                method=self.command,
                target=self.path,
                headers=tuple((k.lower(), v) for k, v in self.headers.items()),
                body=self._body(),
            )
            requests.append(request)
            reply = respond(request)
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if self.command != "HEAD":  # a HEAD's reply holds the body it announces
                self.wfile.write(reply.body)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = bytearray()
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- stdlib name
            pass

    return Handler


# ------------------------------------------------------------------------------------------ git


def git_env(home: Path, **extra: str) -> dict[str, str]:
    """A git environment free of the caller's configuration."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", **extra}


def git_http_backend(project_root: Path) -> Respond:
    """Smart HTTP for the repositories under ``project_root``, by ``git http-backend``."""

    def respond(request: OriginRequest) -> OriginReply:
        path, _, query = request.target.partition("?")
        env = git_env(
            project_root,
            GIT_PROJECT_ROOT=str(project_root),
            GIT_HTTP_EXPORT_ALL="1",
            PATH_INFO=path,
            QUERY_STRING=query,
            REQUEST_METHOD=request.method,
            CONTENT_TYPE=request.header("content-type"),
            CONTENT_LENGTH=str(len(request.body)),
            HTTP_CONTENT_ENCODING=request.header("content-encoding"),
            HTTP_GIT_PROTOCOL=request.header("git-protocol"),
            REMOTE_ADDR=HOST,
        )
        output = subprocess.run(
            ["git", "http-backend"], input=request.body, env=env, capture_output=True, check=True
        ).stdout
        head, _, body = output.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value))
        return OriginReply(status, tuple(headers), body)

    return respond


def fast_import_branches(repository: Path, branches: int) -> None:
    """A bare repository at ``repository`` with ``branches`` branches b00, b01, ...; HEAD is b00.

    Each branch has two commits with fixed dates, so the object ids are the same on every run.
    """
    env = git_env(repository.parent)
    subprocess.run(["git", "init", "-q", "--bare", str(repository)], env=env, check=True)
    stream = []
    for i in range(branches):
        for n in (1, 2):
            content = f"branch {i}, commit {n}\n"
            stream.append(
                f"commit refs/heads/b{i:02d}\n"
                f"committer T <t@example.org> {1700000000 + n} +0000\ndata 2\nc\n"
                f"M 644 inline README\ndata {len(content)}\n{content}\n"
            )
    subprocess.run(
        ["git", "-C", str(repository), "fast-import", "--quiet"],
        input="".join(stream).encode(),
        env=env,
        check=True,
    )
    subprocess.run(
        ["git", "-C", str(repository), "symbolic-ref", "HEAD", "refs/heads/b00"],
        env=env,
        check=True,
    )


# ------------------------------------------------------------------------------------------ pip


def static_site(files: Mapping[str, tuple[str, bytes]], *, ranges: bool = False) -> Respond:
    """GET answers from ``files`` (path -> content type, body); anything else is a 404.

    ``ranges``: as a CDN or nginx serves files (PyPI's files.pythonhosted.org too): HEAD is
    answered, every answer says ``Accept-Ranges: bytes``, and a single ``Range`` of a GET gets
    ``206`` with the part (``416`` past the end).
    """
    methods = ("GET", "HEAD") if ranges else ("GET",)

    def respond(request: OriginRequest) -> OriginReply:
        found = files.get(request.target) if request.method in methods else None
        if found is None:
            return OriginReply(404, (("Content-Type", "text/plain"),), b"not found\n")
        kind, body = found
        headers: tuple[tuple[str, str], ...] = (("Content-Type", kind),)
        if not ranges:
            return OriginReply(200, headers, body)
        headers += (("Accept-Ranges", "bytes"),)
        part = _byte_range(request.header("range"), len(body))
        if request.method == "HEAD" or part is None:
            return OriginReply(200, headers, body)
        if part == PAST_THE_END:
            return OriginReply(416, (("Content-Range", f"bytes */{len(body)}"),), b"")
        first, last = part
        content_range = (("Content-Range", f"bytes {first}-{last}/{len(body)}"),)
        return OriginReply(206, headers + content_range, body[first : last + 1])

    return respond


PAST_THE_END: Final = "past the end"


def _byte_range(value: str, size: int) -> tuple[int, int] | Literal["past the end"] | None:
    """The (first, last) byte of a single ``bytes=`` range of ``size`` bytes, or
    :data:`PAST_THE_END`; None when there is none (or several: the whole body answers them)."""
    unit, _, spec = value.partition("=")
    if unit.strip() != "bytes" or "," in spec or "-" not in spec:
        return None
    start, _, end = (s.strip() for s in spec.partition("-"))
    if not (start or end) or not (start + end).isdigit():
        return None
    if not start:  # the last `end` bytes
        return (max(size - int(end), 0), size - 1) if int(end) and size else PAST_THE_END
    if int(start) >= size:
        return PAST_THE_END
    return int(start), min(int(end), size - 1) if end else size - 1


@dataclass(frozen=True)
class Wheel:
    name: str  # the project name, e.g. "demo-pkg"
    version: str
    data: bytes

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"

    @property
    def metadata(self) -> bytes:
        """Its ``METADATA`` file, as PEP 658 serves it beside the wheel."""
        dist_info = f"{self.name.replace('-', '_')}-{self.version}.dist-info"
        with zipfile.ZipFile(io.BytesIO(self.data)) as archive:
            return archive.read(f"{dist_info}/METADATA")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def make_wheel(
    name: str, version: str, files: Mapping[str, str], requires: Sequence[str] = ()
) -> Wheel:
    """A pure-Python wheel, byte-for-byte the same on every run."""
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{dist_info}/METADATA"] = metadata.encode()
    contents[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: fetchproxy-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    record = "".join(
        f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items()
    )
    contents[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            info = zipfile.ZipInfo(path, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return Wheel(name, version, buffer.getvalue())


def simple_index(
    wheels: Sequence[Wheel], *, metadata: bool = False
) -> dict[str, tuple[str, bytes]]:
    """A static PEP 503 index of ``wheels``: ``/simple/``, ``/simple/<name>/``, ``/files/...``.

    ``metadata``: each wheel's ``METADATA`` is served at ``/files/<wheel>.metadata`` and its link
    says so with both PEP 714's ``data-core-metadata`` and PEP 658's ``data-dist-info-metadata``
    (a resolver reads that instead of the wheel).
    """
    files: dict[str, tuple[str, bytes]] = {}
    projects: dict[str, list[Wheel]] = {}
    for wheel in wheels:
        projects.setdefault(wheel.name, []).append(wheel)
        files[f"/files/{wheel.filename}"] = ("application/octet-stream", wheel.data)
        if metadata:
            files[f"/files/{wheel.filename}.metadata"] = ("text/plain", wheel.metadata)
    for name, releases in projects.items():
        links = "".join(
            f'<a href="/files/{w.filename}#sha256={hashlib.sha256(w.data).hexdigest()}"'
            f"{_metadata_attributes(w) if metadata else ''}>{w.filename}</a>\n"
            for w in releases
        )
        files[f"/simple/{name}/"] = ("text/html", _html(links))
    index = "".join(f'<a href="/simple/{name}/">{name}</a>\n' for name in sorted(projects))
    files["/simple/"] = ("text/html", _html(index))
    return files


def _metadata_attributes(wheel: Wheel) -> str:
    digest = f"sha256={hashlib.sha256(wheel.metadata).hexdigest()}"
    return f' data-core-metadata="{digest}" data-dist-info-metadata="{digest}"'


def _html(body: str) -> bytes:
    return f"<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n".encode()

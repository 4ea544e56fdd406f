"""Real clients for tests: ``curl`` (HTTP/1.1 or HTTP/2 to the proxy) and ``urllib``.

Both go through a proxy and trust only the CA they are given.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import overload


@dataclass(frozen=True)
class Fetched:
    """What a client got: status, headers (names lowercase, in order) and body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    protocol: str = "HTTP/1.1"

    @overload
    def header(self, name: str) -> str | None: ...
    @overload
    def header(self, name: str, default: str) -> str: ...
    def header(self, name: str, default: str | None = None) -> str | None:
        return next((value for key, value in self.headers if key == name), default)

    def header_names(self) -> set[str]:
        return {key for key, _ in self.headers}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None


def urllib_opener(proxy: str, ca_cert: Path) -> urllib.request.OpenerDirector:
    """An opener that goes through ``proxy``, trusts only ``ca_cert`` and follows no redirects."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
        urllib.request.HTTPSHandler(context=context),
        _NoRedirects(),
    )


def urlfetch(
    opener: urllib.request.OpenerDirector,
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 30,
) -> Fetched:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with opener.open(request, timeout=timeout) as response:
            return Fetched(
                response.status,
                tuple((k.lower(), v) for k, v in response.headers.items()),
                response.read(),
            )
    except urllib.error.HTTPError as error:
        with error:
            return Fetched(
                error.code, tuple((k.lower(), v) for k, v in error.headers.items()), error.read()
            )


def curl(
    proxy: str, ca_cert: Path, url: str, *args: str, http2: bool = False, tmp: Path
) -> Fetched:
    """``curl`` through ``proxy`` (HTTP/2 to the proxy with ``http2``), no redirects followed."""
    tmp.mkdir(parents=True, exist_ok=True)
    head, body = tmp / "curl-head", tmp / "curl-body"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    done = subprocess.run(
        [
            "curl",
            "--silent",
            "--show-error",
            "--proxy",
            proxy,
            "--cacert",
            str(ca_cert),
            "--http2" if http2 else "--http1.1",
            "--dump-header",
            str(head),
            "--output",
            str(body),
            "--write-out",
            "%{http_version}",
            *args,
            url,
        ],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"curl {url}: exit {done.returncode}: {done.stderr.decode()}"
    # with --head, curl writes the headers to --output as well
    content = b"" if "--head" in args else body.read_bytes()
    return _parse_curl(head.read_bytes(), content, done.stdout.decode())


def _parse_curl(head: bytes, body: bytes, version: str) -> Fetched:
    """The last response of ``--dump-header`` output (proxies add a CONNECT response first)."""
    blocks = [b for b in head.replace(b"\r\n", b"\n").split(b"\n\n") if b.strip()]
    lines = blocks[-1].decode().split("\n")
    status = int(lines[0].split()[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return Fetched(status, tuple(headers), body, protocol=f"HTTP/{version}")

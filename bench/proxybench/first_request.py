"""Time from starting a server to the first request it serves: start it, then poll with a request.

:func:`time_to_first_request` takes the time just before the process is started, then sends one
HTTPS GET after another (through ``CONNECT`` to a forward proxy, or straight to a reverse proxy or
origin) until one is answered with status 200 and the expected length, and takes the time again.
The probe is a blocking client with its TLS context made beforehand, so it adds about one TLS
handshake and one request to every system alike.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxybench.loadgen import Target
from proxybench.systems import Service

POLL = 0.005
"""Seconds between two attempts that did not get an answer."""


class NeverServedError(RuntimeError):
    """The server did not answer the probe within its time."""


@dataclass(frozen=True)
class FirstRequest:
    seconds: float
    """From just before the process was started to the end of the first answer."""
    attempts: int
    service: Service


def _read_head(sock: socket.socket | ssl.SSLSocket) -> tuple[bytes, bytes]:
    """The response head and whatever body bytes came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} bytes: {data[:80]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ConnectionError(f"answer without content-length: {head[:200]!r}")


def get(
    target: Target, path: str, context: ssl.SSLContext, timeout: float = 10.0
) -> tuple[int, bytes]:
    """One GET of ``path`` on a new connection: the status and the body (0 if CONNECT failed)."""
    origin = f"{target.origin_host}:{target.origin_port}"
    port = target.origin_port if target.proxy_port is None else target.proxy_port
    host = target.origin_host if target.proxy_port is None else target.proxy_host
    with socket.create_connection((host, port), timeout=timeout) as raw:
        if target.proxy_port is not None:
            raw.sendall(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
            head, _ = _read_head(raw)
            if head.split(b" ", 2)[1:2] != [b"200"]:
                return 0, b""
        with context.wrap_socket(raw, server_hostname=target.origin_host) as tls:
            # The same request as the load's (talkback matches on every header but Host).
            request = f"GET {path} HTTP/1.1\r\nHost: {origin}\r\n"
            tls.sendall(f"{request}User-Agent: proxy_bench\r\n\r\n".encode())
            head, body = _read_head(tls)
            length = _length(head)
            while len(body) < length:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                body += chunk
            return int(head[9:12]), body


def probe(target: Target, context: ssl.SSLContext) -> bool:
    """One GET of ``target.paths[0]``; True if answered 200 with ``target.body_size`` bytes."""
    status, body = get(target, target.paths[0], context)
    return status == 200 and len(body) == target.body_size


def tls_context(trust: Path) -> ssl.SSLContext:
    """A client context trusting the CA in ``trust``, offering HTTP/1.1 only."""
    context = ssl.create_default_context(cafile=str(trust))
    context.set_alpn_protocols(["http/1.1"])
    return context


def time_to_first_request(
    start: Callable[[], Service],
    target_of: Callable[[Service], Target],
    *,
    context: ssl.SSLContext,
    timeout: float = 60.0,
) -> FirstRequest:
    """Start a server with ``start()`` and poll it with requests until one is served."""
    began = time.perf_counter()
    service = start()
    target = target_of(service)
    attempts = 0
    while True:
        attempts += 1
        service.check_alive()
        try:
            if probe(target, context):
                return FirstRequest(time.perf_counter() - began, attempts, service)
        except OSError:  # refused, reset, TLS not ready yet: try again
            pass
        if time.perf_counter() - began > timeout:
            raise NeverServedError(
                f"{service.name} served no request within {timeout:.0f} s of its start "
                f"({attempts} attempts):\n{service.log_tail()}"
            )
        time.sleep(POLL)

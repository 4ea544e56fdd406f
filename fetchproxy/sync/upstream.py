"""How ``store fetch`` talks to origins: urllib3, with record's upstream trust, nothing more.

Why urllib3: it is already installed wherever fetchproxy is (botocore, the remote store's
client, depends on it), and it has exactly what fetching thousands of files from a few
origins needs — a thread-safe pool of kept-alive connections per origin, a body streamed in
chunks as it arrives, and no behaviour of its own unless asked: with ``retries=False`` and
``redirect=False`` it sends one request and hands back whatever the origin answered (a
redirect is an entry of its own in the lock), and ``decode_content=False`` keeps the body as
the origin sent it (the lock's digest is of those bytes: record stores a body still
content-encoded, when an origin encodes it despite ``Accept-Encoding: identity``). It reads
no proxy variables, as record's upstream connections do not. mitmproxy, the other HTTP stack
fetchproxy ships, is a proxy, not a client: starting it to make plain GETs would cost half a
second and a listener for nothing; h11 alone would mean writing pooling, TLS and timeouts
again; ``urllib.request`` follows redirects, applies proxy variables and has no pool.

Trust is record's (:func:`fetchproxy.ca.upstream_trust`: certifi, the system's CAs, each
``--upstream-ca``), checked with the host name, TLS 1.2 at least. Errors are made here from
the exception's kind and, for TLS, OpenSSL's verification reason — never from urllib3's
message text, which repeats the URL (with its query).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.ca import upstream_trust
from fetchproxy.errors import FetchproxyError

if TYPE_CHECKING:
    import urllib3


class OriginUnreachableError(FetchproxyError, ConnectionError):
    """The origin could not be reached, or the connection broke (a message without the URL)."""


def upstream_context(extra: Sequence[Path] = ()) -> ssl.SSLContext:
    """An ``SSLContext`` trusting what record trusts upstream (see the module docstring)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, and checks the host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A file, not cadata: OpenSSL reads "TRUSTED CERTIFICATE" blocks (a distribution's
    # bundle) only from files, and --upstream-ca takes them as record does.
    with tempfile.TemporaryDirectory(prefix="fetchproxy-trust-") as tmp:
        bundle = Path(tmp) / "upstream-trust.pem"
        bundle.write_bytes(upstream_trust(extra))
        context.load_verify_locations(cafile=os.fspath(bundle))
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass
class OriginAnswer:
    """An answer's status and headers, and its body to stream (``close()`` when done)."""

    status: int
    headers: Mapping[str, str]
    """Names lowercase; a header sent more than once, its values joined with ``", "``."""
    _response: urllib3.BaseHTTPResponse

    def chunks(self, chunk_size: int) -> Iterator[bytes]:
        """The body as the origin sent it (transfer coding removed, content coding kept)."""
        try:
            yield from self._response.stream(chunk_size, decode_content=False)
        except _network_errors() as exc:
            raise _unreachable(exc, "while reading the answer") from None

    def read(self, limit: int) -> bytes | None:
        """The whole body (as :meth:`chunks` gives it) if it is at most ``limit`` bytes; None
        as soon as it is longer (the rest unread: close without reuse)."""
        parts: list[bytes] = []
        size = 0
        for chunk in self.chunks(min(limit + 1, 1 << 16)):
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
        return b"".join(parts)

    def discard(self, limit: int = 64 * 1024) -> None:
        """Read and drop a short body (a 401's), so the connection goes back to the pool;
        close it instead when the body is longer than ``limit`` or the read fails."""
        try:
            whole = self.read(limit) is not None
        except OriginUnreachableError:
            whole = False
        self.close(reuse=whole)

    def close(self, *, reuse: bool) -> None:
        """Release the connection (to the pool when ``reuse`` and the body was read whole)."""
        if reuse:
            self._response.release_conn()
        else:
            self._response.close()


class OriginClient:
    """Plain GETs to origins over pooled connections (thread-safe)."""

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        connections: int = 8,
        connect_timeout: float = 15.0,
        read_timeout: float = 60.0,
    ) -> None:
        import urllib3  # noqa: PLC0415 -- only store fetch needs it

        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        self._pool = urllib3.PoolManager(
            num_pools=64, maxsize=connections, block=False, ssl_context=context
        )

    def get(self, url: str, headers: Mapping[str, str]) -> OriginAnswer:
        """Send ``GET url`` with ``headers``; the answer, whatever its status."""
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=dict(headers),
                redirect=False,
                retries=False,
                preload_content=False,
                decode_content=False,
                timeout=self._timeout,
            )
        except _network_errors() as exc:
            raise _unreachable(exc, "") from None
        return OriginAnswer(
            status=response.status,
            # one value per name, repeated headers joined with ", " (two WWW-Authenticate)
            headers={name.lower(): response.headers[name] for name in response.headers},
            _response=response,
        )

    def close(self) -> None:
        self._pool.clear()


def _network_errors() -> tuple[type[Exception], ...]:
    """What the network can raise through urllib3 (TLS errors are ``OSError``s)."""
    import http.client  # noqa: PLC0415

    import urllib3.exceptions  # noqa: PLC0415

    return (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


def _unreachable(exc: BaseException, when: str) -> OriginUnreachableError:
    """The error for ``exc``, said without urllib3's text (it repeats the URL and query)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError | OSError | TimeoutError):
        cause = cause.__cause__ or cause.__context__ or getattr(cause, "reason", None)
        if not isinstance(cause, BaseException):
            cause = None
    suffix = f" {when}" if when else ""
    if isinstance(cause, ssl.SSLCertVerificationError):
        why = cause.verify_message or "certificate verify failed"
        return OriginUnreachableError(
            f"TLS verification failed{suffix} ({why}); if the origin uses a private CA, give "
            "its certificate with --upstream-ca"
        )
    if isinstance(cause, ssl.SSLError):
        return OriginUnreachableError(f"TLS failed{suffix} ({cause.reason or 'handshake'})")
    if isinstance(cause, TimeoutError) or "Timeout" in type(exc).__name__:
        return OriginUnreachableError(f"the origin did not answer in time{suffix}")
    if isinstance(cause, OSError) and cause.strerror:
        return OriginUnreachableError(f"cannot connect{suffix}: {cause.strerror}")
    return OriginUnreachableError(f"the connection failed{suffix} ({type(exc).__name__})")

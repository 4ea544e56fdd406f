"""The remote store's data path: signed GET, HEAD and PUT of one object, on ``http.client``.

Moving a lock's blobs is thousands of small requests, so their cost per request decides a
pull's speed: botocore's client spent about 1.5 ms of CPU on each (parameter handling,
endpoint rules, event hooks, parsing), and its signer and urllib3 session alone still 1 ms
(measured: docs/benchmarks.md). These three requests are simple, so ``ObjectRequests`` makes
them with what they need and no more — about 0.35 ms of CPU each:

- the object URL, the region and the credentials come from :mod:`~fetchproxy.store.remote_config`
  (the AWS configuration chain; credentials refreshed as they expire). Keys are
  ``PREFIX/blake3/<hex>`` with prefix segments of ``[A-Za-z0-9._~-]`` (``remote_url``), which
  need no percent-encoding; the signature is :mod:`fetchproxy.store.sigv4`'s, whose derived key
  is kept for the day;
- the connections are ``http.client``'s, kept alive in a pool of ``max_connections``, TLS
  verified against ``AWS_CA_BUNDLE`` or botocore's bundle, through ``HTTPS_PROXY``/``HTTP_PROXY``
  unless ``NO_PROXY`` says otherwise (as botocore reads them); a connection is reused only
  after its answer was read to the end.

Requests that fail before an answer, and 5xx answers, are retried ``max_attempts`` times in
all with backoff (a kept-alive connection the store had closed is replaced at once, without
counting); a PUT body is bytes or a seekable file, sent again from its start. An answer that
comes while the body is still being sent (a refusal) is read, not lost to the broken pipe.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import re
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from fetchproxy.store.remote_config import default_ca_bundle
from fetchproxy.store.remote_errors import (
    RemoteConfigError,
    RemoteStoreError,
    answer_error,
    translate,
)
from fetchproxy.store.sigv4 import EMPTY_PAYLOAD, UNSIGNED_PAYLOAD, SigningCredentials, sign

if TYPE_CHECKING:
    from fetchproxy.store.remote_config import CredentialSource

_CODE_RE = re.compile(rb"<Code>([A-Za-z0-9.]{1,64})</Code>")
_RETRIED_STATUSES = frozenset({500, 502, 503, 504})
_BLOCK = 1 << 20
USER_AGENT = "fetchproxy"


class Answer:
    """The store's answer: status, headers, and the body to read (then ``release`` it)."""

    def __init__(
        self, response: http.client.HTTPResponse, conn: http.client.HTTPConnection, pool: _Pool
    ) -> None:
        self.status = response.status
        self.headers = response.headers
        self._response = response
        self._conn: http.client.HTTPConnection | None = conn
        self._pool = pool

    def read(self, size: int) -> bytes:
        """At most ``size`` bytes of the body; ``b""`` at its end."""
        return self._response.read(size)

    def chunks(self, size: int) -> Iterator[bytes]:
        """The body in chunks of at most ``size`` bytes."""
        while chunk := self._response.read(size):
            yield chunk

    def release(self) -> None:
        """Done with it: the connection goes back to the pool if the body was read whole."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._response.isclosed() and not self._response.will_close:
            self._pool.put(conn)
        else:
            self._response.close()
            conn.close()

    def close(self) -> None:
        """Drop the body unread (the connection cannot be reused)."""
        conn, self._conn = self._conn, None
        self._response.close()
        if conn is not None:
            conn.close()


class _Pool:
    """Idle kept-alive connections to one endpoint (thread-safe); new ones made on demand."""

    def __init__(self, make: Any, size: int) -> None:  # noqa: ANN401 -- a connection factory
        self._make = make
        self._size = size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        # Idle connections are closed with the pool (its owner may never say it is done).
        self.close = weakref.finalize(self, _close_all, self._idle, self._lock)

    def get(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before (it may have been closed since)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        conn: http.client.HTTPConnection = self._make()
        return conn, False

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(conn)
                return
        conn.close()


class ObjectRequests:
    """Signed single-object requests to one bucket (thread-safe)."""

    def __init__(
        self,
        *,
        base: str,
        credentials: CredentialSource,
        region: str,
        bucket: str,
        endpoint: str,
        ca_bundle: str | None,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        max_attempts: int,
    ) -> None:
        parts = urlsplit(base)
        self._path = parts.path
        self._scheme = parts.scheme
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._host_header = parts.netloc.rpartition("@")[2]
        self._credentials = credentials
        self._region = region
        self._endpoint = endpoint
        self._bucket = bucket
        self._max_attempts = max(1, max_attempts)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._context = ssl.create_default_context(cafile=ca_bundle or default_ca_bundle())
        proxy = _proxy_for(parts.scheme, self._host_header)
        self._proxy = urlsplit(proxy) if proxy else None
        if self._proxy is not None and self._proxy.scheme != "http":
            raise RemoteConfigError(
                f"the proxy for {endpoint} ({parts.scheme.upper()}_PROXY) must be an http:// proxy"
            )
        self._pool = _Pool(self._connect, max_connections)

    def close(self) -> None:
        """Close the idle connections (those in use close when their answers are done)."""
        self._pool.close()

    # ---------------------------------------------------------------------------- connections

    def _connect(self) -> http.client.HTTPConnection:
        """A new connection to the store (through the proxy, if one), connected."""
        proxy = self._proxy
        conn: http.client.HTTPConnection
        if proxy is None:
            host, port = self._host, self._port
        else:
            host, port = proxy.hostname or "", proxy.port or 80
        if self._context is not None:
            conn = http.client.HTTPSConnection(
                host, port, timeout=self._connect_timeout, context=self._context, blocksize=_BLOCK
            )
            if proxy is not None:
                conn.set_tunnel(self._host, self._port, headers=_proxy_headers(proxy))
        else:
            conn = http.client.HTTPConnection(
                host, port, timeout=self._connect_timeout, blocksize=_BLOCK
            )
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(self._read_timeout)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return conn

    def _target(self, key: str) -> str:
        """The request target: the path, or the whole URL to a plain-HTTP proxy."""
        path = self._path + key
        if self._proxy is not None and self._context is None:
            return f"http://{self._host_header}{path}"
        return path

    # ------------------------------------------------------------------------------- requests

    def request(
        self,
        method: str,
        key: str,
        *,
        action: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | IO[bytes] = b"",
        stream: bool = False,
    ) -> Answer:
        """Send one signed request; a 2xx or 412 answer is returned, anything else raised.

        With ``stream`` the body is left for the caller to read and ``release``; otherwise it
        is read and the connection released already.
        """
        where = f"s3://{self._bucket}/{key}"
        start = body.tell() if not isinstance(body, bytes) else 0
        attempt = 1
        fresh_tries = 0
        while True:
            if not isinstance(body, bytes):
                body.seek(start)
            conn, reused = self._pool_get(action, where)
            try:
                response = self._send(conn, method, key, headers or {}, body)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if reused and fresh_tries == 0 and _is_stale(exc):
                    fresh_tries += 1  # the store closed a kept-alive connection: at once again
                    continue
                error = translate(exc, action=action, where=where, endpoint=self._endpoint)
                if attempt < self._max_attempts and _is_transient(error):
                    _back_off(attempt)
                    attempt += 1
                    continue
                raise error from exc
            answer = Answer(response, conn, self._pool)
            status = answer.status
            if 200 <= status < 300 or status == 412:
                if not stream:
                    _drain(answer)
                return answer
            payload = _read_some(answer)
            match = _CODE_RE.search(payload)
            code = match[1].decode() if match else str(status)
            error = answer_error(status, code, action=action, where=where, endpoint=self._endpoint)
            if attempt < self._max_attempts and status in _RETRIED_STATUSES:
                _back_off(attempt)
                attempt += 1
                continue
            raise error

    def _pool_get(self, action: str, where: str) -> tuple[http.client.HTTPConnection, bool]:
        try:
            return self._pool.get()
        except (OSError, http.client.HTTPException) as exc:
            raise translate(exc, action=action, where=where, endpoint=self._endpoint) from exc

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        key: str,
        headers: Mapping[str, str],
        body: bytes | IO[bytes],
    ) -> http.client.HTTPResponse:
        frozen = self._credentials.get_frozen_credentials()
        if not frozen.access_key or not frozen.secret_key:
            raise RemoteConfigError(f"the AWS credentials for {self._endpoint} are incomplete")
        signed = sign(
            method,
            self._host_header,
            self._path + key,
            headers,
            credentials=SigningCredentials(
                access_key=frozen.access_key, secret_key=frozen.secret_key, token=frozen.token
            ),
            region=self._region,
            now=datetime.datetime.now(datetime.UTC),
            payload=EMPTY_PAYLOAD if method in ("GET", "HEAD") else UNSIGNED_PAYLOAD,
        )
        conn.putrequest(method, self._target(key), skip_host=True, skip_accept_encoding=True)
        for name, value in signed.items():
            conn.putheader(name, value)
        conn.putheader("user-agent", USER_AGENT)
        try:
            conn.endheaders(body if isinstance(body, bytes) and body else None)
            if not isinstance(body, bytes):
                conn.send(body)
        except OSError:
            # The store may answer before it took the whole body (a refusal) and close: that
            # answer is what to report, if it came.
            try:
                return conn.getresponse()
            except (OSError, http.client.HTTPException):
                pass
            raise
        return conn.getresponse()


def _proxy_for(scheme: str, netloc: str) -> str | None:
    """The proxy the environment names for ``scheme`` (``HTTPS_PROXY``, ``HTTP_PROXY``), unless
    ``NO_PROXY`` exempts ``netloc`` — as botocore and urllib read them."""
    import urllib.request  # noqa: PLC0415

    if urllib.request.proxy_bypass(netloc):
        return None
    return urllib.request.getproxies().get(scheme)


def _close_all(idle: list[http.client.HTTPConnection], lock: threading.Lock) -> None:
    with lock:
        connections, idle[:] = list(idle), []
    for conn in connections:
        conn.close()


def _proxy_headers(proxy: Any) -> dict[str, str]:  # noqa: ANN401 -- a SplitResult
    """``Proxy-Authorization`` for a proxy URL with user info (basic), else nothing."""
    if proxy.username is None:
        return {}
    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
    return {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def _is_stale(exc: BaseException) -> bool:
    """A kept-alive connection that the other side closed while it was idle."""
    return isinstance(
        exc,
        http.client.RemoteDisconnected
        | BrokenPipeError
        | ConnectionResetError
        | http.client.BadStatusLine,
    )


def _is_transient(error: RemoteStoreError) -> bool:
    from fetchproxy.store.remote_errors import RemoteUnavailableError  # noqa: PLC0415

    return isinstance(error, RemoteUnavailableError)


def _back_off(attempt: int) -> None:
    """0.1 s, 0.2 s, 0.4 s, … at most 2 s."""
    time.sleep(min(2.0, 0.05 * 2**attempt))


def _drain(answer: Answer) -> None:
    """Read a small answer's body to its end and release the connection."""
    try:
        while answer.read(1 << 16):
            pass
    except (OSError, http.client.HTTPException):
        answer.close()
        return
    answer.release()


def _read_some(answer: Answer) -> bytes:
    """The start of an error answer's body (its code is in the first lines)."""
    try:
        data = answer.read(64 << 10)
    except (OSError, http.client.HTTPException):  # the status alone still says what happened
        answer.close()
        return b""
    answer.close()  # what is left of it is not worth reading to keep the connection
    return data

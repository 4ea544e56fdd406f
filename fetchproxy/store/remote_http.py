"""The remote store's data path: signed GET, HEAD and PUT of one object, on botocore's parts.

botocore's client spends about 1.5 ms of CPU on every call (parameter handling, endpoint
rules, event hooks, response parsing): for a lock of 2,000 small blobs that is most of a pull
on a small machine. These three requests are simple, so ``ObjectRequests`` makes them with
botocore's own pieces and nothing else — the session's resolved credentials (refreshed as they
expire), botocore's SigV4 signer, and its urllib3 HTTP session (CA bundle, proxies from the
environment, timeouts, a pool of connections) — for about a third of the CPU. The object URL
is botocore's too: a presigned URL made once, locally, for a probe key gives the base every
key is appended to (endpoint, addressing style and region as botocore resolves them), so none
of S3's endpoint rules is reimplemented here. Keys are ``PREFIX/blake3/<hex>`` with prefix
segments of ``[A-Za-z0-9._~-]`` (``remote_url``), which need no percent-encoding.

Requests that fail before an answer, and 5xx answers, are retried ``max_attempts`` times in
all with backoff; a PUT body is bytes or a seekable file, sent again from its start.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fetchproxy.store.remote_errors import RemoteStoreError, answer_error, translate

if TYPE_CHECKING:
    from botocore.awsrequest import AWSResponse
    from botocore.credentials import Credentials
    from botocore.httpsession import URLLib3Session

_PROBE = "fetchproxy-probe-key"
_CODE_RE = re.compile(rb"<Code>([A-Za-z0-9.]{1,64})</Code>")
_RETRIED_STATUSES = frozenset({500, 502, 503, 504})


class ObjectRequests:
    """Signed single-object requests to one bucket (thread-safe)."""

    def __init__(
        self,
        *,
        presign: Any,  # noqa: ANN401 -- the S3 client's generate_presigned_url
        credentials: Credentials,
        region: str,
        bucket: str,
        endpoint: str,
        ca_bundle: str | None,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        max_attempts: int,
    ) -> None:
        from botocore.httpsession import URLLib3Session  # noqa: PLC0415 -- botocore is lazy
        from botocore.utils import get_environ_proxies  # noqa: PLC0415

        url = presign("get_object", Params={"Bucket": bucket, "Key": _PROBE}, ExpiresIn=60)
        parts = urlsplit(url)  # the query (a signature) is dropped here, never kept or shown
        if not parts.path.endswith("/" + _PROBE):
            raise RemoteStoreError(f"cannot work out object URLs for bucket {bucket}{endpoint}")
        self._base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len(_PROBE)]}"
        self._credentials = credentials
        self._region = region
        self._endpoint = endpoint
        self._bucket = bucket
        self._max_attempts = max(1, max_attempts)
        # (botocore-stubs types these arguments narrower than botocore takes them.)
        options: dict[str, Any] = {
            "verify": ca_bundle or True,
            "proxies": get_environ_proxies(self._base),
            "timeout": (connect_timeout, read_timeout),
            "max_pool_connections": max_connections,
            "socket_options": [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)],
        }
        self._http: URLLib3Session = URLLib3Session(**options)

    def request(
        self,
        method: str,
        key: str,
        *,
        action: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | IO[bytes] = b"",
        stream: bool = False,
    ) -> AWSResponse:
        """Send one signed request; a 2xx or 412 answer is returned, anything else raised.

        With ``stream`` the body is left unread for the caller (``response.raw``).
        """
        from botocore.auth import S3SigV4Auth  # noqa: PLC0415
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415

        where = f"s3://{self._bucket}/{key}"
        url = self._base + key
        start = body.tell() if not isinstance(body, bytes) else 0
        for attempt in range(1, self._max_attempts + 1):
            if not isinstance(body, bytes):
                body.seek(start)
            request = AWSRequest(method=method, url=url, headers=dict(headers or {}), data=body)
            # Over https the payload goes unsigned (Content-MD5 guards PUT bodies); over plain
            # http botocore signs it whatever this says.
            request.context["payload_signing_enabled"] = False
            try:
                S3SigV4Auth(
                    self._credentials.get_frozen_credentials(), "s3", self._region
                ).add_auth(request)
                prepared = request.prepare()
                prepared.stream_output = stream
                response = self._http.send(prepared)
            except Exception as exc:
                error = translate(exc, action=action, where=where, endpoint=self._endpoint)
                if attempt < self._max_attempts and _is_transient(error):
                    _back_off(attempt)
                    continue
                raise error from exc
            status = response.status_code
            if 200 <= status < 300 or status == 412:
                return response
            payload = _read_some(response, streamed=stream)
            match = _CODE_RE.search(payload)
            code = match[1].decode() if match else str(status)
            error = answer_error(status, code, action=action, where=where, endpoint=self._endpoint)
            if attempt < self._max_attempts and status in _RETRIED_STATUSES:
                _back_off(attempt)
                continue
            raise error
        raise AssertionError("unreachable: the last attempt returns or raises")


def _is_transient(error: RemoteStoreError) -> bool:
    from fetchproxy.store.remote_errors import RemoteUnavailableError  # noqa: PLC0415

    return isinstance(error, RemoteUnavailableError)


def _back_off(attempt: int) -> None:
    """0.1 s, 0.2 s, 0.4 s, … at most 2 s."""
    time.sleep(min(2.0, 0.05 * 2**attempt))


def _read_some(response: AWSResponse, *, streamed: bool) -> bytes:
    """The start of an error answer's body (its code is in the first lines)."""
    if not streamed:  # the HTTP session has read the body already
        return bytes(response.content[: 64 << 10])
    raw = response.raw
    try:
        return bytes(raw.read(64 << 10)) if raw is not None else b""
    except Exception:  # noqa: BLE001 -- the status alone still says what happened
        return b""
    finally:
        if raw is not None:
            raw.release_conn()

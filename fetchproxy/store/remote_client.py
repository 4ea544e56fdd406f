"""The S3 boundary of the remote store: one bucket, reached through botocore.

``BucketClient`` does the five object operations the remote store needs (GET from an offset,
HEAD, create-only PUT, list, delete) and nothing else. With ``remote_http`` (the data path:
GET, HEAD, PUT, signed by ``sigv4``) it is the only code that touches botocore: it builds the
client from the standard AWS configuration chain (list and delete go through it; the data
path takes its credentials and object URL), translates every botocore, urllib3 and
``http.client`` exception into the errors of ``remote_errors`` at this boundary, and keeps
credentials out of messages and log records. botocore is imported when the first client is
made, never at import time, so a replay with nothing to pull pays nothing for it.

Configuration is exactly what botocore's session resolves — ``AWS_PROFILE``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, the shared config and
credentials files, assume-role and SSO profiles, web identity tokens
(``AWS_WEB_IDENTITY_TOKEN_FILE``, as CI systems issue them), container and instance metadata —
and ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``, or a profile's ``endpoint_url``) for an
S3-compatible store. Against such an endpoint path-style addressing is the default (what
Ceph RGW and MinIO need), unless the profile's ``s3.addressing_style`` says otherwise.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from fetchproxy.store.remote_config import (
    ClientOptions,
    make_client,
    new_session,
    quiet_botocore_debug,
    resolve,
)
from fetchproxy.store.remote_errors import (
    RemoteMissingError,
    RemoteStoreError,
    RemoteUnavailableError,
    safe_code,
    translate,
)
from fetchproxy.store.remote_http import Answer, ObjectRequests

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """How the client talks: connections, timeouts (seconds) and attempts per request."""

    max_connections: int = 32
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_attempts: int = 3


@dataclass(frozen=True, kw_only=True)
class ObjectInfo:
    """What the store says about one object."""

    key: str
    size: int
    last_modified: datetime.datetime
    etag: str


class ObjectStream:
    """The body of a GET: ``size`` bytes from ``offset`` of an object of ``total`` bytes.

    Iterating yields chunks; a connection that breaks raises ``RemoteUnavailableError``, so the
    caller can continue with a GET from where the stream stopped.
    """

    def __init__(self, answer: Answer, *, offset: int, size: int, total: int, etag: str) -> None:
        self._answer = answer
        self.offset = offset
        self.size = size
        self.total = total
        self.etag = etag

    def chunks(self, chunk_size: int, *, where: str, endpoint: str) -> Iterator[bytes]:
        """The body in chunks of at most ``chunk_size`` bytes."""
        complete = False
        try:
            iterator = self._answer.chunks(chunk_size)
            while True:
                try:
                    chunk = next(iterator)
                except StopIteration:
                    complete = True
                    return
                except Exception as exc:
                    raise translate(exc, action="read", where=where, endpoint=endpoint) from exc
                yield chunk
        finally:
            if complete:
                self._answer.release()  # the connection goes back to the pool
            else:
                self._answer.close()  # half-read: the connection cannot be reused

    def close(self) -> None:
        """Drop the body unread."""
        self._answer.close()


class BucketClient:
    """One bucket: the data path (``remote_http``) and, for list and delete, botocore's client
    (made when first needed). Thread-safe, pooled connections."""

    def __init__(self, bucket: str, settings: ClientSettings | None = None) -> None:
        self.bucket = bucket
        self._settings = settings or ClientSettings()
        self._options = ClientOptions(
            max_connections=self._settings.max_connections,
            connect_timeout=self._settings.connect_timeout,
            read_timeout=self._settings.read_timeout,
            max_attempts=self._settings.max_attempts,
        )
        config = resolve(bucket, self._options)
        self._config = config
        self.endpoint = config.endpoint
        self._objects = ObjectRequests(
            base=config.base,
            credentials=config.credentials,
            region=config.region,
            bucket=bucket,
            endpoint=config.endpoint,
            ca_bundle=config.ca_bundle,
            connect_timeout=self._settings.connect_timeout,
            read_timeout=self._settings.read_timeout,
            max_connections=self._settings.max_connections,
            max_attempts=self._settings.max_attempts,
        )
        self._s3: S3Client | None = config.client
        self._s3_lock = threading.Lock()

    @property
    def _client(self) -> S3Client:
        """botocore's client for this bucket's configuration, made on first use."""
        with self._s3_lock:
            if self._s3 is None:
                import botocore.exceptions  # noqa: PLC0415

                quiet_botocore_debug()
                try:
                    self._s3 = make_client(
                        new_session(), region=self._config.region, options=self._options
                    )
                except (botocore.exceptions.BotoCoreError, ValueError) as exc:
                    raise translate(
                        exc, action="configure", where="the remote store", endpoint=self.endpoint
                    ) from exc
            return self._s3

    def get(self, key: str, *, offset: int = 0, etag: str | None = None) -> ObjectStream:
        """GET ``key`` from byte ``offset`` (with ``If-Match: etag`` when continuing)."""
        headers = {}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        if etag is not None:
            headers["If-Match"] = etag
        response = self._objects.request(
            "GET", key, action="download", headers=headers, stream=True
        )
        if response.status == 412:
            ObjectStream(response, offset=0, size=0, total=0, etag="").close()
            raise RemoteStoreError(
                f"cannot continue reading {self.location(key)}: it changed",
                key=key,
                http_status=412,
            )
        size = int(response.headers.get("Content-Length", "0"))
        total = size
        stream = ObjectStream(
            response, offset=offset, size=size, total=total, etag=response.headers.get("ETag", "")
        )
        if offset:
            match = re.fullmatch(
                r"bytes (\d+)-\d+/(\d+)", response.headers.get("Content-Range", "")
            )
            if response.status != 206 or match is None or int(match[1]) != offset:
                stream.close()
                raise RemoteUnavailableError(
                    f"cannot continue reading {self.location(key)} at byte {offset}: the store "
                    "did not answer the range asked for",
                    key=key,
                )
            stream.total = int(match[2])
        return stream

    def head(self, key: str) -> ObjectInfo | None:
        """What the store holds under ``key``, or ``None`` if nothing."""
        try:
            response = self._objects.request("HEAD", key, action="look up")
        except RemoteMissingError:
            return None
        return ObjectInfo(
            key=key,
            size=int(response.headers.get("Content-Length", "0")),
            last_modified=email.utils.parsedate_to_datetime(response.headers["Last-Modified"]),
            etag=response.headers.get("ETag", ""),
        )

    def put_new(self, key: str, body: IO[bytes] | bytes, *, size: int, md5: bytes) -> bool:
        """PUT ``key`` unless it exists (``If-None-Match: *``): whether this call created it.

        ``md5`` is the body's MD5, sent as ``Content-MD5``: the store refuses bytes that
        arrive different from the ones hashed (S3, Ceph RGW, MinIO, GCS and R2 check it).
        """
        headers = {
            "Content-Length": str(size),
            "Content-MD5": base64.b64encode(md5).decode("ascii"),
            "Content-Type": "application/octet-stream",
            "If-None-Match": "*",
        }
        try:
            response = self._objects.request(
                "PUT", key, action="upload", headers=headers, body=body
            )
        except RemoteStoreError as exc:
            if exc.http_status != 501:
                raise
        else:
            return response.status != 412  # 412: already there, success for create-only
        # 501: a store without conditional writes. Look, then write unconditionally: a write
        # racing ours puts the same bytes under the same name (the name is their digest), and
        # every read verifies them, so the worst case is bytes written twice.
        _log.info("%s has no conditional writes; uploading after a lookup", self.endpoint)
        if self.head(key) is not None:
            return False
        del headers["If-None-Match"]
        self._objects.request("PUT", key, action="upload", headers=headers, body=body)
        return True

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order, page by page."""
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                params["ContinuationToken"] = token
            page = self._call("list", prefix, self._client.list_objects_v2, params)
            for item in page.get("Contents", []):
                yield ObjectInfo(
                    key=item["Key"],
                    size=int(item["Size"]),
                    last_modified=item["LastModified"],
                    etag=item.get("ETag", ""),
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (at most 1,000, one request); an object already gone is no error."""
        if not keys:
            return
        if len(keys) > 1000:
            raise ValueError(f"delete takes at most 1000 keys at a time, got {len(keys)}")
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Delete": {"Objects": [{"Key": key} for key in keys], "Quiet": True},
        }
        response = self._call("delete", keys[0], self._client.delete_objects, params)
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            code = safe_code(first.get("Code"))
            raise RemoteStoreError(
                f"cannot delete {len(errors)} of {len(keys)} objects, for example "
                f"{self.location(first.get('Key', '?'))}: the store answered {code}",
                key=first.get("Key"),
            )

    def location(self, key: str) -> str:
        """``s3://BUCKET/KEY``, for messages."""
        return f"s3://{self.bucket}/{key}"

    def _call(
        self, action: str, key: str, method: Callable[..., Any], params: dict[str, Any]
    ) -> Mapping[str, Any]:
        try:
            result: Mapping[str, Any] = method(**params)
        except Exception as exc:
            raise translate(
                exc, action=action, where=self.location(key), endpoint=self.endpoint
            ) from exc
        return result

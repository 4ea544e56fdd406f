"""The S3 boundary of the remote store: one bucket, reached through botocore.

``BucketClient`` does the five object operations the remote store needs (GET from an offset,
HEAD, create-only PUT, list, delete) and nothing else. It is the only module that touches
botocore: it builds the client from the standard AWS configuration chain, translates every
botocore and urllib3 exception into the errors below at this boundary, and keeps credentials
out of messages and log records. botocore is imported when the first client is made, never
at import time, so a replay with nothing to pull pays nothing for it.

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
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from fetchproxy.store.base import StoreError

if TYPE_CHECKING:
    from botocore.response import StreamingBody
    from mypy_boto3_s3 import S3Client

_log = logging.getLogger(__name__)
_CODE_RE = re.compile(r"[A-Za-z0-9.]{1,64}")
DEFAULT_REGION = "us-east-1"
_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidSecurity",
        "InvalidToken",
        "RequestTimeTooSkewed",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
    }
)
_ACCESS_HINTS = {
    "SignatureDoesNotMatch": "the secret key does not belong to the access key; check "
    "AWS_SECRET_ACCESS_KEY or the profile's credentials",
    "InvalidAccessKeyId": "the store does not know this access key; check AWS_ACCESS_KEY_ID, "
    "AWS_PROFILE or the profile's credentials",
    "ExpiredToken": "the session token has expired; get fresh credentials",
    "RequestTimeTooSkewed": "this machine's clock is too far from the store's; fix the clock",
}
_NO_ACCESS_HINT = (
    "these credentials lack the permission for it (read-only credentials cannot push or "
    "delete; see docs/remote-store.md, 'Access model')"
)


class RemoteStoreError(StoreError):
    """The remote store could not do what was asked.

    ``digest`` and ``key`` name the object, if one; ``http_status`` is the store's answer, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        digest: str | None = None,
        key: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.digest = digest
        self.key = key
        self.http_status = http_status


class RemoteConfigError(RemoteStoreError):
    """The AWS configuration gives no usable credentials, region or profile."""


class RemoteAccessError(RemoteStoreError, PermissionError):
    """The store refused the credentials, or they lack a permission."""


class RemoteUnavailableError(RemoteStoreError, ConnectionError):
    """The store could not be reached, broke a transfer off, or answered 5xx."""


class RemoteMissingError(RemoteStoreError, FileNotFoundError):
    """An object (or the bucket) is not in the store."""


class RemoteCorruptError(RemoteStoreError):
    """An object's bytes do not match the digest it is named by; it was not used."""


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """How the client talks: connections, timeouts (seconds) and attempts per request."""

    max_connections: int = 16
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

    def __init__(
        self, body: StreamingBody, *, offset: int, size: int, total: int, etag: str
    ) -> None:
        self._body = body
        self.offset = offset
        self.size = size
        self.total = total
        self.etag = etag

    def chunks(self, chunk_size: int, *, where: str, endpoint: str) -> Iterator[bytes]:
        """The body in chunks of at most ``chunk_size`` bytes."""
        try:
            iterator = self._body.iter_chunks(chunk_size)
            while True:
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
                except Exception as exc:
                    raise translate(exc, action="read", where=where, endpoint=endpoint) from exc
                yield chunk
        finally:
            self._body.close()


class BucketClient:
    """One bucket through one botocore client (thread-safe, pooled connections)."""

    def __init__(self, bucket: str, settings: ClientSettings | None = None) -> None:
        self.bucket = bucket
        self._client, self.endpoint = _make_client(settings or ClientSettings())

    def get(self, key: str, *, offset: int = 0, etag: str | None = None) -> ObjectStream:
        """GET ``key`` from byte ``offset`` (with ``If-Match: etag`` when continuing)."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if offset:
            params["Range"] = f"bytes={offset}-"
        if etag is not None:
            params["IfMatch"] = etag
        response = self._call("get", key, self._client.get_object, params)
        size = int(response["ContentLength"])
        total = size
        if offset:
            match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", str(response.get("ContentRange", "")))
            if match is None or int(match[1]) != offset:
                response["Body"].close()
                raise RemoteUnavailableError(
                    f"cannot continue reading {self.location(key)} at byte {offset}: the store "
                    "did not answer the range asked for",
                    key=key,
                )
            total = int(match[2])
        return ObjectStream(
            response["Body"], offset=offset, size=size, total=total, etag=response["ETag"]
        )

    def head(self, key: str) -> ObjectInfo | None:
        """What the store holds under ``key``, or ``None`` if nothing."""
        try:
            response = self._call(
                "look up", key, self._client.head_object, {"Bucket": self.bucket, "Key": key}
            )
        except RemoteMissingError:
            return None
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            last_modified=response["LastModified"],
            etag=response["ETag"],
        )

    def put_new(self, key: str, body: IO[bytes] | bytes, *, size: int, md5: bytes) -> bool:
        """PUT ``key`` unless it exists (``If-None-Match: *``): whether this call created it.

        ``md5`` is the body's MD5, sent as ``Content-MD5``: the store refuses bytes that
        arrive different from the ones hashed (S3, Ceph RGW, MinIO, GCS and R2 check it).
        """
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": body,
            "ContentLength": size,
            "ContentMD5": base64.b64encode(md5).decode("ascii"),
            "ContentType": "application/octet-stream",
            "IfNoneMatch": "*",
        }
        try:
            self._call("upload", key, self._client.put_object, params)
        except RemoteStoreError as exc:
            if exc.http_status == 412:  # the object exists: create-only makes that success
                return False
            if exc.http_status != 501:
                raise
        else:
            return True
        # 501: a store without conditional writes. Look, then write unconditionally: a write
        # racing ours puts the same bytes under the same name (the name is their digest), and
        # every read verifies them, so the worst case is bytes written twice.
        _log.info("%s has no conditional writes; uploading after a lookup", self.endpoint)
        if self.head(key) is not None:
            return False
        if not isinstance(body, bytes):
            body.seek(0)
        del params["IfNoneMatch"]
        self._call("upload", key, self._client.put_object, params)
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
            code = _safe_code(first.get("Code"))
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


def _make_client(settings: ClientSettings) -> tuple[S3Client, str]:
    """A botocore S3 client from the AWS chain, and its endpoint (without userinfo)."""
    import botocore.exceptions  # noqa: PLC0415 -- botocore costs ~0.3 s; only a transfer needs it
    import botocore.session  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    _quiet_botocore_debug()
    try:
        session = botocore.session.Session()
        region = session.get_config_variable("region") or DEFAULT_REGION
        style = (session.get_scoped_config().get("s3") or {}).get("addressing_style")
        if session.get_credentials() is None:
            raise RemoteConfigError(
                "no AWS credentials found for the remote store: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where a web identity token "
                "or instance role provides them"
            )
        config = Config(
            region_name=region,
            retries={"mode": "standard", "max_attempts": settings.max_attempts},
            max_pool_connections=settings.max_connections,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            tcp_keepalive=True,
            parameter_validation=False,  # every request is built here, typed; saves CPU per call
            # Content-MD5 is the transport checksum (every S3 store checks it); the newer
            # x-amz-checksum-* trailers are not understood by older RGW and MinIO releases.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            user_agent_extra="fetchproxy",
        )
        client = cast("S3Client", session.create_client("s3", config=config))
        endpoint = client.meta.endpoint_url
        if style is None and not _is_aws(endpoint):
            path_style = config.merge(Config(s3={"addressing_style": "path"}))
            client = cast("S3Client", session.create_client("s3", config=path_style))
    except RemoteStoreError:
        raise
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise translate(exc, action="configure", where="the remote store", endpoint="") from exc
    return client, _without_userinfo(endpoint)


def _quiet_botocore_debug() -> None:
    """botocore's DEBUG records carry request headers (a session token among them)."""
    logger = logging.getLogger("botocore")
    if logger.getEffectiveLevel() < logging.INFO:
        logger.setLevel(logging.INFO)


def _is_aws(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def _without_userinfo(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.username is None and parts.password is None:
        return endpoint
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _safe_code(code: object) -> str:
    """An error code from the store, if it looks like one (it is the store's untrusted text)."""
    return code if isinstance(code, str) and _CODE_RE.fullmatch(code) else "an error"


def translate(exc: Exception, *, action: str, where: str, endpoint: str) -> RemoteStoreError:
    """The remote-store error for a botocore/urllib3 exception met while ACTION on WHERE.

    Messages are built here from the error code and status alone: the store's own message
    text is untrusted, and neither it nor anything of the credentials is repeated.
    """
    import botocore.exceptions as bce  # noqa: PLC0415 -- loaded already by the client

    if isinstance(exc, RemoteStoreError):
        return exc
    at = f" at {endpoint}" if endpoint else ""
    if isinstance(exc, bce.ClientError):
        code = _safe_code(exc.response.get("Error", {}).get("Code"))
        raw_status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        status = raw_status if isinstance(raw_status, int) else None
        answer = f"HTTP {status} {code}" if status else code
        error: RemoteStoreError
        if code in _ACCESS_CODES or status == 403:
            hint = _ACCESS_HINTS.get(code, _NO_ACCESS_HINT)
            error = RemoteAccessError(
                f"cannot {action} {where}: the store refused ({answer}); {hint}"
            )
        elif code == "NoSuchBucket":
            error = RemoteConfigError(
                f"cannot {action} {where}: the bucket does not exist{at} ({answer}); check "
                "--remote and AWS_ENDPOINT_URL"
            )
        elif code in {"NoSuchKey", "404", "NotFound"} or status == 404:
            error = RemoteMissingError(f"cannot {action} {where}: no such object ({answer})")
        elif (status is not None and status >= 500) or code in {"SlowDown", "Throttling"}:
            error = RemoteUnavailableError(
                f"cannot {action} {where}: the store is failing{at} ({answer}); retry later"
            )
        else:
            error = RemoteStoreError(f"cannot {action} {where}: the store answered {answer}")
        error.http_status = status
        return error
    if isinstance(exc, bce.NoRegionError | bce.ProfileNotFound | bce.PartialCredentialsError):
        return RemoteConfigError(
            f"cannot {action} {where}: the AWS configuration is incomplete "
            f"({type(exc).__name__}); check AWS_PROFILE, AWS_REGION and the config files"
        )
    if isinstance(exc, bce.NoCredentialsError | bce.CredentialRetrievalError):
        return RemoteConfigError(
            f"cannot {action} {where}: no AWS credentials could be obtained "
            f"({type(exc).__name__}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE, or provide a web identity token or instance role"
        )
    if isinstance(exc, bce.SSLError):
        return RemoteUnavailableError(
            f"cannot {action} {where}: TLS with the store failed{at}; if it uses a private CA, "
            "point AWS_CA_BUNDLE at its certificate"
        )
    if isinstance(exc, bce.BotoCoreError | ConnectionError | TimeoutError | OSError) or _is_http(
        exc
    ):
        kind = type(exc).__name__
        return RemoteUnavailableError(
            f"cannot {action} {where}: the connection to the store failed{at} ({kind}); "
            "check that it is up and reachable, then retry"
        )
    return RemoteStoreError(f"cannot {action} {where}: {type(exc).__name__}")


def _is_http(exc: Exception) -> bool:
    import http.client  # noqa: PLC0415

    import urllib3.exceptions  # noqa: PLC0415

    return isinstance(exc, http.client.HTTPException | urllib3.exceptions.HTTPError)

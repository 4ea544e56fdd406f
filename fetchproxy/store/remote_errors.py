"""The remote store's errors, and the translation of botocore's and urllib3's into them.

Every failure the remote store reports is one of these, raised at the S3 boundary
(``remote_client``, ``remote_http``) from the error code and HTTP status alone: the store's own
message text is untrusted and may be long, and neither it nor anything of the credentials is
ever repeated. Each subclasses the builtin it refines, so a caller can catch either.
"""

from __future__ import annotations

import re

from fetchproxy.store.base import StoreError

_CODE_RE = re.compile(r"[A-Za-z0-9.]{1,64}")
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
    "delete, and S3 answers a missing object this way to credentials that may not list the "
    "bucket; see docs/remote-store.md, 'Access model')"
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


def answer_error(
    status: int | None, code: str, *, action: str, where: str, endpoint: str
) -> RemoteStoreError:
    """The error for the store's answer ``status``/``code`` while ACTION on WHERE."""
    code = safe_code(code)
    at = f" at {endpoint}" if endpoint else ""
    answer = f"HTTP {status} {code}" if status else code
    error: RemoteStoreError
    if code in _ACCESS_CODES or status == 403:
        hint = _ACCESS_HINTS.get(code, _NO_ACCESS_HINT)
        error = RemoteAccessError(f"cannot {action} {where}: the store refused ({answer}); {hint}")
    elif status in {301, 307} or code in {"PermanentRedirect", "TemporaryRedirect"}:
        error = RemoteConfigError(
            f"cannot {action} {where}: the store sent it elsewhere ({answer}); the bucket is in "
            "another region: set AWS_REGION (or the profile's region) to the bucket's"
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


def safe_code(code: object) -> str:
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
        code = exc.response.get("Error", {}).get("Code", "")
        raw_status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        status = raw_status if isinstance(raw_status, int) else None
        return answer_error(status, str(code), action=action, where=where, endpoint=endpoint)
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

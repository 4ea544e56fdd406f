"""Where the remote store is and who we are to it: the AWS configuration, resolved once.

What a transfer needs is small — the object URL every key is appended to, the region, the
credentials, the CA bundle — and it comes from the standard AWS configuration chain:
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the
shared config and credentials files (assume-role, SSO, credential processes), web identity
tokens (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``), container and instance metadata,
``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` or a profile's ``endpoint_url``, ``AWS_CA_BUNDLE``.
The region is ``AWS_REGION``, else what botocore resolves (``AWS_DEFAULT_REGION``, the
profile), else ``us-east-1``.

:func:`resolve` takes one of two ways to the same answer:

- **botocore** (:func:`through_botocore`), the reference: its session resolves the chain, its
  client the endpoint and the object URL (a presigned URL made locally for a probe key), so
  none of S3's endpoint rules is reimplemented. Against an endpoint other than AWS, path-style
  addressing is the default (what Ceph RGW and MinIO need) unless the profile's
  ``s3.addressing_style`` says otherwise. Importing botocore and making a client costs about
  0.3 s of CPU.
- **the environment alone** (:func:`from_environment`), when it says everything and nothing
  else could add to it: static keys in the environment, an endpoint URL other than AWS's
  (no path, no user info), no profile named, no shared config file with anything in it, none
  of the variables that change endpoints (FIPS, dual-stack, ignoring configured endpoints).
  That is how CI jobs reach an S3-compatible store, and then the object URL is plainly
  ``ENDPOINT/BUCKET/`` (path-style): no botocore at all until a list or a delete needs its
  client. ``tests/store/test_remote_config.py`` checks that both ways agree on every such
  environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from fetchproxy.store.remote_errors import RemoteConfigError, RemoteStoreError, translate

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DEFAULT_REGION = "us-east-1"
PROBE_KEY = "fetchproxy-probe-key"
_UNLESS_SET = (
    # a profile negates the environment's keys; the others change which endpoint is used
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT",
    "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS",
)
_NO_CREDENTIALS = (
    "no AWS credentials found for the remote store: set AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where a web identity token or instance role "
    "provides them"
)


class FrozenCredentials(Protocol):
    @property
    def access_key(self) -> str | None: ...
    @property
    def secret_key(self) -> str | None: ...
    @property
    def token(self) -> str | None: ...


class CredentialSource(Protocol):
    """botocore's ``Credentials`` (refreshed as they expire), or :class:`StaticCredentials`."""

    def get_frozen_credentials(self) -> FrozenCredentials: ...


@dataclass(frozen=True, slots=True)
class StaticCredentials:
    """Keys from the environment: they do not change while the process runs."""

    access_key: str
    secret_key: str
    token: str | None = None

    def get_frozen_credentials(self) -> StaticCredentials:
        return self

    def __repr__(self) -> str:  # never the secret, nor the token
        return f"StaticCredentials(access_key={self.access_key!r}, secret_key=***, token=***)"


@dataclass(frozen=True, kw_only=True)
class RemoteConfig:
    """What a transfer needs to reach one bucket."""

    base: str
    """The object URL every key is appended to, e.g. ``http://127.0.0.1:17480/bucket/``."""
    region: str
    endpoint: str
    """The endpoint without user info, for messages."""
    ca_bundle: str | None
    credentials: CredentialSource
    session: Any = None
    """botocore's session, when it resolved this (for the client list and delete use)."""
    client: Any = None
    """The client it made (the same configuration), if any."""


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """How botocore's client (list, delete) talks: connections, timeouts, attempts."""

    max_connections: int
    connect_timeout: float
    read_timeout: float
    max_attempts: int


def resolve(bucket: str, options: ClientOptions) -> RemoteConfig:
    """The configuration for ``bucket``: from the environment alone if it says everything,
    else through botocore (see the module docstring)."""
    return from_environment(bucket, os.environ) or through_botocore(bucket, options)


def from_environment(bucket: str, env: Mapping[str, str]) -> RemoteConfig | None:
    """The configuration from ``env`` alone, or ``None`` when botocore must resolve it."""

    def get(name: str) -> str | None:
        return env.get(name) or None

    if any(get(name) for name in _UNLESS_SET):
        return None
    if (get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or "").lower() == "true":
        return None
    key, secret = get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")
    endpoint = get("AWS_ENDPOINT_URL_S3") or get("AWS_ENDPOINT_URL")
    if key is None or secret is None or endpoint is None:
        return None
    parts = urlsplit(endpoint)
    plain = (
        parts.scheme in ("http", "https")
        and parts.hostname
        and parts.path in ("", "/")
        and not (parts.query or parts.fragment or "@" in parts.netloc)
    )
    if not plain or is_aws(endpoint):
        return None
    config_file = Path(get("AWS_CONFIG_FILE") or "~/.aws/config").expanduser()
    try:
        if config_file.stat().st_size > 0:  # a profile there may add to or change all this
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return RemoteConfig(
        base=f"{parts.scheme}://{parts.netloc}/{bucket}/",
        region=get("AWS_REGION") or get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        endpoint=endpoint,
        ca_bundle=get("AWS_CA_BUNDLE"),
        credentials=StaticCredentials(key, secret, get("AWS_SESSION_TOKEN")),
    )


def through_botocore(bucket: str, options: ClientOptions) -> RemoteConfig:
    """The configuration as botocore's session and client resolve it."""
    import botocore.exceptions  # noqa: PLC0415 -- botocore costs ~0.3 s; only a transfer needs it

    quiet_botocore_debug()
    try:
        session = new_session()
        region = os.environ.get("AWS_REGION") or session.get_config_variable("region")
        credentials = session.get_credentials()
        if credentials is None:
            raise RemoteConfigError(_NO_CREDENTIALS)
        client = make_client(session, region=region or DEFAULT_REGION, options=options)
        url: str = client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": PROBE_KEY}, ExpiresIn=60
        )
    except RemoteStoreError:
        raise
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise translate(exc, action="configure", where="the remote store", endpoint="") from exc
    parts = urlsplit(url)  # the query (a signature) is dropped here, never kept or shown
    if not parts.path.endswith("/" + PROBE_KEY) or parts.scheme not in ("http", "https"):
        raise RemoteStoreError(f"cannot work out object URLs for bucket {bucket}")
    netloc = parts.netloc.rpartition("@")[2]
    return RemoteConfig(
        base=f"{parts.scheme}://{netloc}{parts.path[: -len(PROBE_KEY)]}",
        region=client.meta.region_name,
        endpoint=without_userinfo(client.meta.endpoint_url),
        ca_bundle=session.get_config_variable("ca_bundle"),
        credentials=credentials,
        session=session,
        client=client,
    )


def new_session() -> Any:  # noqa: ANN401 -- botocore's Session
    import botocore.session  # noqa: PLC0415

    return botocore.session.Session()


def make_client(
    session: Any,  # noqa: ANN401 -- botocore's Session
    *,
    region: str,
    options: ClientOptions,
) -> S3Client:
    """botocore's S3 client for ``session``: path-style against an endpoint other than AWS's,
    unless the profile says otherwise."""
    from botocore.config import Config  # noqa: PLC0415

    style = (session.get_scoped_config().get("s3") or {}).get("addressing_style")
    config = Config(
        region_name=region,
        retries={"mode": "standard", "max_attempts": options.max_attempts},
        max_pool_connections=options.max_connections,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        tcp_keepalive=True,
        parameter_validation=False,  # every request is built here, typed; saves CPU per call
        # Content-MD5 is the transport checksum (every S3 store checks it); the newer
        # x-amz-checksum-* trailers are not understood by older RGW and MinIO releases.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        user_agent_extra="fetchproxy",
    )
    client: S3Client = session.create_client("s3", config=config)
    if style is None and not is_aws(client.meta.endpoint_url):
        path_style = config.merge(Config(s3={"addressing_style": "path"}))
        client = session.create_client("s3", config=path_style)
    return client


def quiet_botocore_debug() -> None:
    """botocore's DEBUG records carry request headers (a session token among them)."""
    import logging  # noqa: PLC0415

    logger = logging.getLogger("botocore")
    if logger.getEffectiveLevel() < logging.INFO:
        logger.setLevel(logging.INFO)


def default_ca_bundle() -> str:
    """The CA bundle botocore verifies with when ``AWS_CA_BUNDLE`` names none: certifi's if it
    is installed, else the one botocore ships (``botocore.httpsession.where()``, without
    importing botocore)."""
    try:
        import certifi  # noqa: PLC0415

        return str(certifi.where())
    except ImportError:
        import importlib.util  # noqa: PLC0415

        spec = importlib.util.find_spec("botocore")
        if spec is None or spec.origin is None:
            raise RemoteConfigError("botocore is not installed: reinstall fetchproxy") from None
        return str(Path(spec.origin).parent / "cacert.pem")


def is_aws(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def without_userinfo(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.username is None and parts.password is None:
        return endpoint
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

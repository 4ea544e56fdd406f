"""The real S3 endpoint the remote-store tests use: a Ceph RADOS Gateway on loopback (fixtures).

``.ci/object-store/up.sh DIR`` starts it and writes ``DIR/s3.env``; the tests find that file
through ``FETCHPROXY_TEST_S3_ENV`` (``.ci/run`` exports it). Nothing here starts the gateway:
a cluster of three daemons, 280 MB and 7 s per test session, on fixed ports, is not something
a fixture should do behind a developer's back. So without the variable, a test that needs the
endpoint fails under CI (``CI`` set) and skips elsewhere, with the command that starts it —
as the tests that need root do. A variable naming an endpoint that does not answer fails
everywhere: then something is broken, not missing.

Every test gets a prefix of its own in the shared bucket and removes its objects at the end;
``aws_env`` sets the standard AWS variables (and only those) the product reads, and
``no_secret_anywhere`` checks after each test that no secret reached a log record.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fetchproxy.store.remote import RemoteStore, TransferSettings
from fetchproxy.store.remote_client import ClientSettings
from fetchproxy.store.remote_url import RemoteURL, parse_remote_url

ENV_VAR = "FETCHPROXY_TEST_S3_ENV"
HOW = (
    "start one with `.ci/object-store/up.sh DIR` (as root, with Debian's radosgw ceph-mon "
    f"ceph-osd ceph-common installed) and `export {ENV_VAR}=DIR/s3.env`; stop it with "
    "`.ci/object-store/down.sh DIR`"
)
# Variables of the AWS chain a developer's shell may hold: the tests must not use them.
_FOREIGN = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
)


@dataclass(frozen=True, kw_only=True)
class S3Endpoint:
    """What up.sh wrote: the endpoint and the test users."""

    endpoint: str
    region: str
    bucket: str
    writer_key: str
    writer_secret: str
    reader_key: str
    reader_secret: str

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    @property
    def secrets(self) -> tuple[str, str]:
        return (self.writer_secret, self.reader_secret)


def _read_env_file(path: Path) -> S3Endpoint:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        pytest.fail(f"{ENV_VAR}={path}: cannot read it ({exc.strerror}); {HOW}")
    values = dict(line.split("=", 1) for line in lines if "=" in line)
    try:
        return S3Endpoint(
            endpoint=values["FETCHPROXY_TEST_S3_ENDPOINT"],
            region=values["FETCHPROXY_TEST_S3_REGION"],
            bucket=values["FETCHPROXY_TEST_S3_BUCKET"],
            writer_key=values["FETCHPROXY_TEST_S3_WRITER_KEY"],
            writer_secret=values["FETCHPROXY_TEST_S3_WRITER_SECRET"],
            reader_key=values["FETCHPROXY_TEST_S3_READER_KEY"],
            reader_secret=values["FETCHPROXY_TEST_S3_READER_SECRET"],
        )
    except KeyError as exc:
        pytest.fail(f"{path} lacks {exc.args[0]}: was it written by up.sh? {HOW}")


@pytest.fixture(scope="session")
def s3() -> S3Endpoint:
    """The endpoint from ``$FETCHPROXY_TEST_S3_ENV``, checked to answer."""
    value = os.environ.get(ENV_VAR, "")
    if not value:
        message = f"the remote-store tests need a real S3 endpoint and {ENV_VAR} is not set: {HOW}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    endpoint = _read_env_file(Path(value))
    try:
        with urllib.request.urlopen(endpoint.endpoint + "/", timeout=5) as answer:
            status = answer.status
    except (urllib.error.URLError, OSError) as exc:
        pytest.fail(
            f"the S3 endpoint {endpoint.endpoint} from {value} does not answer ({exc}); {HOW}"
        )
    if status != 200:
        pytest.fail(f"the S3 endpoint {endpoint.endpoint} answered GET / with {status}; {HOW}")
    return endpoint


def use_credentials(
    monkeypatch: pytest.MonkeyPatch,
    s3: S3Endpoint,
    *,
    key: str,
    secret: str,
    endpoint: str | None = None,
) -> None:
    """Point the standard AWS variables at the test endpoint with these credentials."""
    for name in _FOREIGN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint or s3.endpoint)
    monkeypatch.setenv("AWS_REGION", s3.region)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3: S3Endpoint) -> S3Endpoint:
    """The writer's credentials in the environment, as a CI record job would have them."""
    use_credentials(monkeypatch, s3, key=s3.writer_key, secret=s3.writer_secret)
    return s3


@pytest.fixture
def remote_url(s3: S3Endpoint) -> Iterator[RemoteURL]:
    """A prefix of this test's own; its objects are deleted afterwards (writer credentials)."""
    url = parse_remote_url(f"s3://{s3.bucket}/tests/{uuid.uuid4().hex[:12]}")
    yield url
    with pytest.MonkeyPatch.context() as patch:
        use_credentials(patch, s3, key=s3.writer_key, secret=s3.writer_secret)
        remote = RemoteStore(url)
        keys = [info.key for info in remote.client.list(url.prefix + "/")]
        for start in range(0, len(keys), 1000):
            remote.client.delete(keys[start : start + 1000])


QUICK = TransferSettings(
    concurrency=8,
    client=ClientSettings(max_connections=8, connect_timeout=2, read_timeout=10, max_attempts=2),
)


def make_remote(url: RemoteURL, settings: TransferSettings = QUICK) -> RemoteStore:
    return RemoteStore(url, settings=settings)


@pytest.fixture(autouse=True)
def no_secret_anywhere(
    caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Capture every log record at DEBUG; after the test, none may hold a test secret."""
    caplog.set_level(logging.DEBUG)
    yield
    if "s3" not in request.fixturenames:
        return
    s3: S3Endpoint = request.getfixturevalue("s3")
    for record in caplog.records:
        text = record.getMessage() + (caplog.text if record.exc_info else "")
        for secret in s3.secrets:
            assert secret not in text, f"a secret reached a log record of {record.name}"
    for secret in s3.secrets:
        assert secret not in caplog.text

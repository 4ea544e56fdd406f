"""The AWS configuration, resolved two ways that must agree: from the environment alone (CI's
usual set-up, no botocore) and through botocore's session and client (the reference)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fetchproxy.store import DiskStore
from fetchproxy.store.remote_config import (
    ClientOptions,
    RemoteConfig,
    from_environment,
    through_botocore,
)
from fetchproxy.store.remote_url import RemoteURL
from tests.support.s3 import S3Endpoint, make_remote

OPTIONS = ClientOptions(max_connections=2, connect_timeout=2, read_timeout=5, max_attempts=1)
KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t-for-tests"}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No AWS variable of the developer's; no shared files; never instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def facts(config: RemoteConfig) -> tuple[str, str, str, str | None, tuple[str | None, ...]]:
    frozen = config.credentials.get_frozen_credentials()
    keys = (frozen.access_key, frozen.secret_key, frozen.token)
    return config.base, config.region, config.endpoint, config.ca_bundle, keys


@pytest.mark.parametrize(
    ("bucket", "env"),
    [
        ("fetchproxy-test", {"AWS_ENDPOINT_URL": "http://127.0.0.1:17480"}),
        ("b1", {"AWS_ENDPOINT_URL": "http://127.0.0.1:17480/", "AWS_REGION": "eu-west-1"}),
        ("b2", {"AWS_ENDPOINT_URL_S3": "https://storage.googleapis.com",
                "AWS_ENDPOINT_URL": "https://elsewhere.example", "AWS_DEFAULT_REGION": "auto"}),
        ("my.dotted.bucket", {"AWS_ENDPOINT_URL": "https://acct.r2.cloudflarestorage.com",
                              "AWS_SESSION_TOKEN": "tok", "AWS_REGION": "auto",
                              "AWS_DEFAULT_REGION": "us-west-2"}),
        ("b3", {"AWS_ENDPOINT_URL": "http://minio.internal:9000",
                "AWS_CA_BUNDLE": sys.executable, "AWS_CONFIG_FILE": os.devnull}),
    ],
)  # fmt: skip
def test_the_environment_alone_agrees_with_botocore(
    clean_env: pytest.MonkeyPatch, bucket: str, env: dict[str, str]
) -> None:
    for name, value in {**KEYS, **env}.items():
        clean_env.setenv(name, value)
    fast = from_environment(bucket, os.environ)
    assert fast is not None
    assert fast.session is None
    assert facts(fast) == facts(through_botocore(bucket, OPTIONS))


@pytest.mark.parametrize(
    "extra",
    [
        {"AWS_PROFILE": "ci"},
        {"AWS_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com"},
        {"AWS_ENDPOINT_URL": "https://gateway.example/s3"},
        {"AWS_ENDPOINT_URL": "https://user:pw@gateway.example"},
        {"AWS_USE_FIPS_ENDPOINT": "true"},
        {"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
        {"AWS_SECRET_ACCESS_KEY": ""},
        {"AWS_ENDPOINT_URL": ""},
    ],
)
def test_what_only_botocore_can_say(clean_env: pytest.MonkeyPatch, extra: dict[str, str]) -> None:
    for name, value in {**KEYS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", **extra}.items():
        clean_env.setenv(name, value)
    assert from_environment("bucket", os.environ) is None


def test_a_shared_config_file_with_anything_in_it_goes_to_botocore(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in {**KEYS, "AWS_ENDPOINT_URL": "http://store.example:9"}.items():
        clean_env.setenv(name, value)
    config = tmp_path / "home" / ".aws" / "config"
    config.parent.mkdir(parents=True)
    config.write_text("[default]\ns3 =\n  addressing_style = virtual\n")
    assert from_environment("bucket", os.environ) is None
    assert through_botocore("bucket", OPTIONS).base == "http://bucket.store.example:9/"
    config.write_text("")
    assert from_environment("bucket", os.environ) is not None


def test_a_profile_reaches_the_store_through_botocore(
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    s3: S3Endpoint,
    remote_url: RemoteURL,
) -> None:
    """The reference way end to end: a named profile, its keys in the shared credentials file
    and its endpoint in the config file, as a developer's machine has them."""
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[fp-tests]\naws_access_key_id = {s3.writer_key}\n"
        f"aws_secret_access_key = {s3.writer_secret}\n"
    )
    config = tmp_path / "config"
    config.write_text(f"[profile fp-tests]\nregion = {s3.region}\nendpoint_url = {s3.endpoint}\n")
    clean_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    clean_env.setenv("AWS_CONFIG_FILE", str(config))
    clean_env.setenv("AWS_PROFILE", "fp-tests")
    assert from_environment(remote_url.bucket, os.environ) is None
    here, there = DiskStore(tmp_path / "here"), DiskStore(tmp_path / "there")
    digests = [here.put(os.urandom(size)) for size in (10, 20_000, 2 << 20)]
    remote = make_remote(remote_url)
    assert sorted(remote.push(digests, here).moved) == sorted(digests)
    assert remote.client._config.session is not None  # resolved by botocore, not the shortcut
    assert sorted(make_remote(remote_url).pull(digests, there).moved) == sorted(digests)
    assert sorted(there.digests()) == sorted(digests)

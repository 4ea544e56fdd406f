"""The remote store's SigV4 signer agrees with botocore's, header for header (pure, no store)."""

from __future__ import annotations

import datetime

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest

from fetchproxy.store.sigv4 import (
    EMPTY_PAYLOAD,
    UNSIGNED_PAYLOAD,
    SigningCredentials,
    sign,
    signing_key,
)

NOW = datetime.datetime(2026, 3, 14, 15, 9, 26, tzinfo=datetime.UTC)
KEY = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
PATH = "/my-bucket/ci/fetchproxy/blake3/" + "ab" * 32


def botocore_headers(
    method: str,
    url: str,
    headers: dict[str, str],
    token: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    """What botocore's S3 signer sends for the same request at ``NOW`` (payload unsigned)."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = botocore.awsrequest.AWSRequest(method=method, url=url, headers=dict(headers))
    request.context["payload_signing_enabled"] = False
    credentials = botocore.credentials.Credentials(KEY, SECRET, token)
    botocore.auth.S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
    return {name.lower(): value for name, value in request.headers.items()}


@pytest.mark.parametrize(
    ("method", "headers", "token"),
    [
        ("GET", {}, None),
        ("GET", {"Range": "bytes=1048576-", "If-Match": '"0123abcd"'}, None),
        ("HEAD", {}, "FQoGZXIvYXdzEJr//////////wEaDOTOKEN"),
        (
            "PUT",
            {
                "Content-Length": "16384",
                "Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg==",
                "Content-Type": "application/octet-stream",
                "If-None-Match": "*",
            },
            None,
        ),
    ],
)
def test_the_signature_is_botocores(
    method: str, headers: dict[str, str], token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = "s3.eu-west-1.amazonaws.com"
    ours = sign(
        method,
        host,
        PATH,
        headers,
        credentials=SigningCredentials(access_key=KEY, secret_key=SECRET, token=token),
        region="eu-west-1",
        now=NOW,
        payload=UNSIGNED_PAYLOAD if method == "PUT" else EMPTY_PAYLOAD,
    )
    theirs = botocore_headers(method, f"https://{host}{PATH}", headers, token, monkeypatch)
    assert ours["authorization"] == theirs["authorization"]
    assert {k: v for k, v in ours.items() if k != "host"} == theirs


def test_a_port_is_part_of_the_host_and_the_key_is_kept_for_the_day(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    creds = SigningCredentials(access_key=KEY, secret_key=SECRET)
    ours = sign("GET", "127.0.0.1:17480", PATH, {}, credentials=creds, region="eu-west-1", now=NOW)
    theirs = botocore_headers("GET", f"https://127.0.0.1:17480{PATH}", {}, None, monkeypatch)
    assert ours["authorization"] == theirs["authorization"]
    signing_key.cache_clear()
    for minute in range(3):
        sign("GET", "h", PATH, {}, credentials=creds, region="eu-west-1",
             now=NOW + datetime.timedelta(minutes=minute))  # fmt: skip
    assert signing_key.cache_info().misses == 1
    assert SECRET not in repr(creds)

"""``s3://BUCKET/PREFIX``: parsing, refusals with the fix in the message, object keys."""

from __future__ import annotations

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.errors import FetchproxyError
from fetchproxy.store.remote_url import RemoteURL, RemoteURLError, parse_remote_url

DIGEST = digest_bytes(b"blob")
HEX = DIGEST.removeprefix("blake3:")


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://my-bucket", "my-bucket", ""),
        ("s3://my-bucket/", "my-bucket", ""),
        ("s3://my-bucket/fetchproxy", "my-bucket", "fetchproxy"),
        ("s3://my-bucket/team/ci-cache/", "my-bucket", "team/ci-cache"),
        ("s3://a.b-c/x_y~z.1", "a.b-c", "x_y~z.1"),
    ],
)
def test_valid_urls(text: str, bucket: str, prefix: str) -> None:
    url = parse_remote_url(text)
    assert url == RemoteURL(bucket=bucket, prefix=prefix)
    assert parse_remote_url(str(url)) == url


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("my-bucket/x", "it must start with s3://"),
        ("gs://my-bucket/x", "scheme 'gs' is not supported; only s3:// is"),
        ("s3://", "the bucket name is missing"),
        ("s3:///prefix", "the bucket name is missing"),
        ("s3://fp", "bucket 'fp' is not a valid bucket name"),
        ("s3://My-Bucket", "bucket 'My-Bucket' is not a valid bucket name"),
        ("s3://-bucket", "is not a valid bucket name"),
        ("s3://a..b", "is not a valid bucket name"),
        ("s3://bucket//x", "has an empty, '.' or '..' segment"),
        ("s3://bucket/a/../b", "has an empty, '.' or '..' segment"),
        ("s3://bucket/a b", "prefix segment 'a b' has characters other than"),
        ("s3://bucket/a%2Fb", "has characters other than"),
        ("s3://bucket/a?x=1", "has characters other than"),
        ("s3://bucket/a#frag", "has characters other than"),
        ("s3://bucket/team/blake3", "the prefix must not end in /blake3"),
    ],
)
def test_invalid_urls_say_why(text: str, why: str) -> None:
    with pytest.raises(RemoteURLError) as caught:
        parse_remote_url(text, source="FETCHPROXY_REMOTE")
    message = str(caught.value)
    assert message.startswith(f"FETCHPROXY_REMOTE: {text!r} is not a remote store URL: ")
    assert why in message
    assert "for example s3://my-bucket/fetchproxy" in message
    assert isinstance(caught.value, FetchproxyError)
    assert isinstance(caught.value, ValueError)


def test_credentials_in_the_url_are_refused_and_never_repeated() -> None:
    with pytest.raises(RemoteURLError) as caught:
        parse_remote_url("s3://AKIAEXAMPLE:s3cr3t@my-bucket/p")
    message = str(caught.value)
    assert "s3cr3t" not in message
    assert "AKIAEXAMPLE" not in message
    assert "'s3://***@my-bucket/p'" in message
    assert "must not carry credentials" in message


def test_long_and_control_text_is_shown_safely() -> None:
    with pytest.raises(RemoteURLError) as caught:
        parse_remote_url("s3://bucket/\x1b[31m" + "a" * 500)
    message = str(caught.value)
    assert "\x1b" not in message
    assert "\\x1b" in message
    assert len(message) < 500


def test_keys_and_digests() -> None:
    url = parse_remote_url("s3://bucket/team/cache")
    assert url.blob_prefix == "team/cache/blake3/"
    assert url.key_of(DIGEST) == f"team/cache/blake3/{HEX}"
    assert url.digest_of(f"team/cache/blake3/{HEX}") == DIGEST
    assert url.location(url.key_of(DIGEST)) == f"s3://bucket/team/cache/blake3/{HEX}"
    bare = parse_remote_url("s3://bucket")
    assert bare.key_of(DIGEST) == f"blake3/{HEX}"
    assert str(bare) == "s3://bucket"


@pytest.mark.parametrize(
    "key",
    [
        f"other/blake3/{HEX}",
        f"team/cache/blake3/{HEX.upper()}",
        f"team/cache/blake3/{HEX[:-1]}",
        f"team/cache/blake3/{HEX}x",
        f"team/cache/blake3/ab/{HEX[2:]}",
        "team/cache/blake3/",
        f"team/cache/sha256/{HEX}",
    ],
)
def test_keys_naming_no_blob(key: str) -> None:
    assert parse_remote_url("s3://bucket/team/cache").digest_of(key) is None


def test_a_malformed_digest_never_becomes_a_key() -> None:
    url = parse_remote_url("s3://bucket/p")
    with pytest.raises(ValueError, match="is not a digest"):
        url.key_of("blake3:../../x")  # type: ignore[arg-type]

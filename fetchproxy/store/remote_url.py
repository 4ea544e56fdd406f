"""Where a remote store is and how blobs are named in it (pure: no I/O, no S3 client).

A remote is written ``s3://BUCKET/PREFIX`` (``--remote``, ``FETCHPROXY_REMOTE``, ``[store]
remote``). Blob ``blake3:<64 hex>`` is the object ``PREFIX/blake3/<64 hex>``: immutable, named
by its digest, the same for every bucket and provider. Which endpoint, region and credentials
reach the bucket is not part of the URL: they come from the standard AWS configuration chain
(see ``remote_client``), so a URL never carries a secret and can sit in a config file in git.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fetchproxy.digest import ALGORITHM, HEX_LENGTH, Digest, from_hex, hex_of, parse_digest
from fetchproxy.errors import FetchproxyError

SCHEME = "s3://"
# S3's rules for new bucket names (and so for every S3-compatible store): 3-63 characters of
# lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit.
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SEGMENT_RE = re.compile(r"[A-Za-z0-9._~-]+")
_HEX_RE = re.compile(rf"[0-9a-f]{{{HEX_LENGTH}}}")
_EXAMPLE = "for example s3://my-bucket/fetchproxy"


class RemoteURLError(FetchproxyError, ValueError):
    """A remote URL that cannot name a bucket and prefix."""


@dataclass(frozen=True, kw_only=True)
class RemoteURL:
    """``s3://BUCKET/PREFIX``: a bucket and a prefix inside it (possibly empty)."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"

    @property
    def blob_prefix(self) -> str:
        """The key prefix every blob's object starts with: ``PREFIX/blake3/``."""
        return f"{self.prefix}/{ALGORITHM}/" if self.prefix else f"{ALGORITHM}/"

    def key_of(self, digest: Digest) -> str:
        """The object key of ``digest``: ``PREFIX/blake3/<64 hex>`` (validated first)."""
        return self.blob_prefix + hex_of(parse_digest(digest))

    def digest_of(self, key: str) -> Digest | None:
        """The digest ``key`` stands for, or ``None`` for a key that names no blob here."""
        if not key.startswith(self.blob_prefix):
            return None
        rest = key[len(self.blob_prefix) :]
        return from_hex(rest) if _HEX_RE.fullmatch(rest) else None

    def location(self, key: str) -> str:
        """``s3://BUCKET/KEY``: where an object is, for messages."""
        return f"{SCHEME}{self.bucket}/{key}"


def parse_remote_url(text: str, *, source: str = "--remote") -> RemoteURL:
    """Validate ``text`` as ``s3://BUCKET[/PREFIX]``; ``RemoteURLError`` says what is wrong.

    ``source`` names where the text came from (an option, a variable, a config key) so the
    message points at what to fix. A trailing slash is dropped; empty segments, ``.`` and
    ``..``, and characters S3 keys make awkward (spaces, ``%``, ``?``, ``#``, backslashes,
    controls) are refused rather than guessed at, as are credentials (``user:secret@``),
    queries and fragments: a remote URL is written once, by hand, and must mean one thing.
    """
    shown = _shown(text)

    def fail(why: str) -> RemoteURLError:
        return RemoteURLError(f"{source}: {shown} is not a remote store URL: {why} ({_EXAMPLE})")

    if not text.startswith(SCHEME):
        scheme = text.partition("://")[0] if "://" in text else ""
        if scheme:
            raise fail(f"scheme {_part(scheme)} is not supported; only s3:// is")
        raise fail("it must start with s3://")
    rest = text[len(SCHEME) :]
    bucket, _, prefix = rest.partition("/")
    if "@" in bucket:
        raise fail(
            "it must not carry credentials; they come from the AWS configuration "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID, web identity, instance metadata)"
        )
    if not bucket:
        raise fail("the bucket name is missing")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
        raise fail(
            f"bucket {_part(bucket)} is not a valid bucket name (3-63 lowercase letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit)"
        )
    prefix = prefix.removesuffix("/")
    if prefix:
        for segment in prefix.split("/"):
            if segment in {"", ".", ".."}:
                raise fail(f"prefix {_part(prefix)} has an empty, '.' or '..' segment")
            if not _SEGMENT_RE.fullmatch(segment):
                raise fail(
                    f"prefix segment {_part(segment)} has characters other than letters, digits "
                    "and . _ ~ - (no spaces, %, ?, #, backslashes or controls)"
                )
        if prefix.split("/")[-1] == ALGORITHM:
            raise fail(f"the prefix must not end in /{ALGORITHM}: fetchproxy adds that itself")
    return RemoteURL(bucket=bucket, prefix=prefix)


def _part(text: str) -> str:
    """A piece of the URL for a message: quoted, controls escaped, cut if long."""
    return repr(text if len(text) <= 60 else text[:60] + "…")


def _shown(text: str) -> str:
    """``text`` for a message: quoted, controls escaped, userinfo replaced, cut if long."""
    scheme, sep, rest = text.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            text = f"{scheme}://***@{authority.rpartition('@')[2]}{slash}{path}"
    if len(text) > 200:
        text = text[:200] + "…"
    return repr(text)

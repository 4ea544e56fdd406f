"""AWS Signature Version 4 for the remote store's object requests (pure: no I/O, no clock).

The data path (``remote_http``) sends three kinds of request — GET, HEAD and create-only PUT of
one object, no query string — and signs each here. SigV4, as AWS specifies it: a canonical
request (method, the path as sent, an empty query, the signed headers lower-cased and sorted,
their names, the payload hash), a string to sign over its SHA-256 with the time and scope
(``DATE/REGION/s3/aws4_request``), and an HMAC-SHA256 with a key derived from the secret by
four HMACs. The derived key depends only on the secret, the day and the region, so it is made
once a day and kept (:func:`signing_key`) instead of four times per request.

A request without a body signs the SHA-256 of the empty payload (a constant); a PUT's body
is ``UNSIGNED-PAYLOAD``, over http and https alike, so it is read once, not twice: it carries
``Content-MD5``, which is signed, so the store refuses a body changed on the way (and a GET's
bytes are verified against their BLAKE3 digest anyway). Every header sent is signed but
``user-agent`` and ``expect`` (the ones a proxy may touch); ``host``, ``x-amz-date``,
``x-amz-content-sha256`` and, with temporary credentials, ``x-amz-security-token`` are added.
``tests/store/test_sigv4.py`` checks the result against botocore's own signer.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_PAYLOAD = hashlib.sha256(b"").hexdigest()
ALGORITHM = "AWS4-HMAC-SHA256"
_UNSIGNED_HEADERS = frozenset({"user-agent", "expect"})


@dataclass(frozen=True, slots=True)
class SigningCredentials:
    """One moment's credentials (botocore refreshes temporary ones; take them fresh each time)."""

    access_key: str
    secret_key: str
    token: str | None = None

    def __repr__(self) -> str:  # never the secret, nor the token, in a repr or a traceback
        return f"SigningCredentials(access_key={self.access_key!r}, secret_key=***, token=***)"


@functools.lru_cache(maxsize=8)
def signing_key(secret_key: str, day: str, region: str, service: str = "s3") -> bytes:
    """The key of ``day`` (``YYYYMMDD``) derived from ``secret_key``: four HMACs, once a day."""
    key = hmac.digest(f"AWS4{secret_key}".encode(), day.encode(), "sha256")
    for part in (region, service, "aws4_request"):
        key = hmac.digest(key, part.encode(), "sha256")
    return key


def sign(
    method: str,
    host: str,
    path: str,
    headers: Mapping[str, str],
    *,
    credentials: SigningCredentials,
    region: str,
    now: datetime.datetime,
    payload: str = EMPTY_PAYLOAD,
) -> dict[str, str]:
    """The headers to send for ``method path`` on ``host``: ``headers`` plus the date, payload,
    token and ``authorization`` headers, names lower-cased.

    ``path`` is the request target as sent (already percent-encoded; S3 does not encode it
    again), ``host`` the ``Host`` header's value (with the port when not the default), ``now``
    the time in UTC, ``payload`` the body's SHA-256 (hex) or :data:`UNSIGNED_PAYLOAD`.
    """
    stamp = now.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    sent = {name.lower(): value for name, value in headers.items()}
    sent["host"] = host
    sent["x-amz-date"] = stamp
    sent["x-amz-content-sha256"] = payload
    if credentials.token:
        sent["x-amz-security-token"] = credentials.token
    signed = sorted(name for name in sent if name not in _UNSIGNED_HEADERS)
    canonical = "\n".join(
        [
            method,
            path,
            "",  # no query string
            *(f"{name}:{' '.join(sent[name].split())}" for name in signed),
            "",
            ";".join(signed),
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = signing_key(credentials.secret_key, day, region)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    sent["authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={';'.join(signed)}, Signature={signature}"
    )
    return sent

"""DSSE envelopes (github.com/secure-systems-lab/dsse): sign a payload, verify a signature.

A signature is over ``PAE(payloadType, payload)``; the JSON envelope carries the payload in
base64, its type, and one or more ``{"keyid", "sig"}``. Keys are Ed25519 (the signature is
its 64 bytes) or ECDSA on P-256 with SHA-256 (the signature is DER, as ``cryptography``,
securesystemslib, sigstore and Go's ``crypto/ecdsa`` write it). Keys come from PEM files:
PKCS#8 or the traditional forms for private keys, SubjectPublicKeyInfo for public ones.

The key id fetchproxy writes is the lowercase hex SHA-256 of the public key's DER
SubjectPublicKeyInfo (``openssl pkey -pubin -outform DER | sha256sum``). DSSE makes key ids
unauthenticated hints: :func:`verify` tries the given key on every signature, whatever its id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from fetchproxy.errors import FetchproxyError

PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
"""The payload type of an in-toto Statement."""
MAX_SIGNATURES: Final = 16
"""An envelope with more signatures is refused: no attestation needs them, and each costs a
verification."""

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey

_FIX_KEY = (
    "give an Ed25519 or ECDSA P-256 key in PEM form (e.g. `openssl genpkey -algorithm ed25519`)"
)


class KeyFileError(FetchproxyError, ValueError):
    """A key that cannot be used: unreadable PEM, a wrong passphrase, an unsupported type."""


class EnvelopeError(FetchproxyError, ValueError):
    """An envelope that is not a DSSE JSON envelope, or whose signature does not verify."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 LEN(type) type LEN(body) body``."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True, kw_only=True, slots=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """A DSSE envelope, decoded."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_json(self) -> dict[str, object]:
        """The standard JSON envelope (base64 with padding, as the spec's examples)."""
        return {
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
                for s in self.signatures
            ],
        }

    def to_bytes(self) -> bytes:
        """The JSON envelope as a file holds it (one line, then a newline)."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode() + b"\n"


# ------------------------------------------------------------------------------------- keys


def load_private_key(
    pem: bytes, *, password: bytes | None = None, source: str, password_from: str | None = None
) -> PrivateKey:
    """The signing key in ``pem``; ``source`` (a path) names it in errors, and
    ``password_from`` where its passphrase is given (an environment variable's name)."""
    where = "" if password_from is None else f" ({password_from})"
    try:
        key = serialization.load_pem_private_key(pem, password=password)
    except TypeError:
        if password is None:
            raise KeyFileError(
                f"{source}: the private key is encrypted — give its passphrase{where}"
            ) from None
        raise KeyFileError(
            f"{source}: the private key is not encrypted — give no passphrase{where}"
        ) from None
    except ValueError:
        if password is not None and (b"ENCRYPTED" in pem):
            raise KeyFileError(
                f"{source}: the passphrase is wrong{where}: the private key does not decrypt"
            ) from None
        hint = "the passphrase is wrong, or " if password is not None else ""
        raise KeyFileError(
            f"{source}: not a PEM private key ({hint}the file holds something else) — {_FIX_KEY}"
        ) from None
    except UnsupportedAlgorithm:
        raise KeyFileError(f"{source}: a key of an unsupported type — {_FIX_KEY}") from None
    return _checked_private(key, source)


def _checked_private(key: object, source: str) -> PrivateKey:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if isinstance(key.curve, ec.SECP256R1):
            return key
        raise KeyFileError(f"{source}: an ECDSA key on {key.curve.name}, not P-256 — {_FIX_KEY}")
    raise KeyFileError(f"{source}: a {_kind(key)} key — {_FIX_KEY}")


def load_public_key(pem: bytes, *, source: str) -> PublicKey:
    """The verification key in ``pem`` (a ``PUBLIC KEY`` block)."""
    if b"PRIVATE KEY" in pem:
        raise KeyFileError(
            f"{source}: a private key — verify with the public key "
            "(`openssl pkey -in KEY -pubout`), and keep the private one secret"
        )
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(f"{source}: not a PEM public key — {_FIX_KEY}") from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return key
        raise KeyFileError(f"{source}: an ECDSA key on {key.curve.name}, not P-256 — {_FIX_KEY}")
    raise KeyFileError(f"{source}: a {_kind(key)} key — {_FIX_KEY}")


def _kind(key: object) -> str:
    name = type(key).__name__
    for suffix in ("PrivateKey", "PublicKey"):
        name = name.removeprefix("_").removesuffix(suffix)
    return name or "an unknown"


def key_id(key: PublicKey) -> str:
    """Hex SHA-256 of the public key's DER SubjectPublicKeyInfo."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


# ---------------------------------------------------------------------------- sign and verify


def sign(payload: bytes, key: PrivateKey, *, payload_type: str = PAYLOAD_TYPE) -> Envelope:
    """An envelope of ``payload`` with one signature by ``key``."""
    message = pae(payload_type, payload)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        sig = key.sign(message)
    else:
        sig = key.sign(message, ec.ECDSA(hashes.SHA256()))
    signature = Signature(keyid=key_id(key.public_key()), sig=sig)
    return Envelope(payload_type=payload_type, payload=payload, signatures=(signature,))


def verify(
    envelope: Envelope | bytes, key: PublicKey, *, payload_type: str = PAYLOAD_TYPE
) -> bytes:
    """The payload of ``envelope`` if one of its signatures verifies with ``key`` and its type
    is ``payload_type``; else :class:`EnvelopeError` saying which check failed.

    The bytes returned are the ones verified, never a second decoding of the envelope.
    """
    parsed = parse_envelope(envelope) if isinstance(envelope, bytes) else envelope
    message = pae(parsed.payload_type, parsed.payload)
    if not any(_verifies(key, s.sig, message) for s in parsed.signatures):
        ids = ", ".join(s.keyid or "(no key id)" for s in parsed.signatures) or "none"
        raise EnvelopeError(
            f"no signature verifies with the key {key_id(key)} (the envelope's key ids: {ids})"
            " — the envelope was changed, or signed with another key"
        )
    if parsed.payload_type != payload_type:
        raise EnvelopeError(
            f"the payload type is {parsed.payload_type!r}, not {payload_type!r}: "
            "this envelope does not hold an in-toto statement"
        )
    return parsed.payload


def _verifies(key: PublicKey, sig: bytes, message: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(sig, message)
        else:
            key.verify(sig, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def parse_envelope(data: bytes) -> Envelope:
    """A JSON envelope; :class:`EnvelopeError` names what is missing or malformed."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise EnvelopeError("not a DSSE envelope: the file is not JSON") from None
    if not isinstance(document, dict):
        raise EnvelopeError("not a DSSE envelope: a JSON object is expected")
    payload_type = document.get("payloadType")
    if not isinstance(payload_type, str):
        raise EnvelopeError("not a DSSE envelope: payloadType must be a string")
    payload = _base64(document.get("payload"), "payload")
    signatures = document.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise EnvelopeError("not a DSSE envelope: signatures must be a non-empty list")
    if len(signatures) > MAX_SIGNATURES:
        raise EnvelopeError(f"{len(signatures)} signatures: more than {MAX_SIGNATURES} are refused")
    parsed = []
    for index, item in enumerate(signatures):
        if not isinstance(item, Mapping):
            raise EnvelopeError(f"signatures[{index}] must be an object")
        keyid = item.get("keyid", "")
        if not isinstance(keyid, str):
            raise EnvelopeError(f"signatures[{index}].keyid must be a string")
        sig = _base64(item.get("sig"), f"signatures[{index}].sig")
        parsed.append(Signature(keyid=keyid, sig=sig))
    return Envelope(payload_type=payload_type, payload=payload, signatures=tuple(parsed))


def _base64(value: object, where: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE: verifiers must accept either)."""
    if not isinstance(value, str):
        raise EnvelopeError(f"not a DSSE envelope: {where} must be a base64 string")
    text = value.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"not a DSSE envelope: {where} is not base64") from None

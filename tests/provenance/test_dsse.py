"""DSSE envelopes: the spec's encoding, keys made by openssl, and interoperability with an
independent implementation (securesystemslib, which in-toto signs and verifies with)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey

from fetchproxy.provenance.dsse import (
    MAX_SIGNATURES,
    PAYLOAD_TYPE,
    EnvelopeError,
    KeyFileError,
    key_id,
    load_private_key,
    load_public_key,
    pae,
    parse_envelope,
    sign,
    verify,
)

PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1","subject":[]}'
GENPKEY = {
    "ed25519": ["-algorithm", "ed25519"],
    "p256": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    "p384": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
    "rsa": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
}


def openssl_key(tmp_path: Path, kind: str, *extra: str) -> tuple[bytes, bytes]:
    """A private key made by openssl (PEM), and its public key as openssl writes it."""
    private = tmp_path / f"{kind}.pem"
    subprocess.run(["openssl", "genpkey", *GENPKEY[kind], *extra, "-out", str(private)], check=True)
    public = subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            str(private),
            "-pubout",
            *(["-passin", "pass:pw"] if extra else []),
        ],
        check=True,
        capture_output=True,
    ).stdout
    return private.read_bytes(), public


@pytest.fixture(params=["ed25519", "p256"])
def keypair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[bytes, bytes]:
    return openssl_key(tmp_path, request.param)


def test_pae_is_the_specs_test_vector() -> None:
    # secure-systems-lab/dsse protocol.md, "Test Vectors"
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_sign_and_verify(keypair: tuple[bytes, bytes]) -> None:
    private, public = keypair
    envelope = sign(PAYLOAD, load_private_key(private, source="key.pem"))
    data = envelope.to_bytes()
    document = json.loads(data)
    assert document["payloadType"] == PAYLOAD_TYPE
    assert base64.b64decode(document["payload"]) == PAYLOAD
    assert verify(data, load_public_key(public, source="key.pub")) == PAYLOAD


def test_key_id_is_the_sha256_of_the_der_public_key(tmp_path: Path) -> None:
    private, public = openssl_key(tmp_path, "p256")
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "DER"],
        input=public,
        check=True,
        capture_output=True,
    ).stdout
    key = load_public_key(public, source="key.pub")
    assert key_id(key) == hashlib.sha256(der).hexdigest()
    envelope = sign(PAYLOAD, load_private_key(private, source="key.pem"))
    assert envelope.signatures[0].keyid == key_id(key)


def test_ours_verifies_with_securesystemslib(keypair: tuple[bytes, bytes]) -> None:
    private, public = keypair
    data = sign(PAYLOAD, load_private_key(private, source="key.pem")).to_bytes()
    theirs = SslibEnvelope.from_dict(json.loads(data))
    # securesystemslib matches signatures to keys by key id: give it ours
    ours_id = key_id(load_public_key(public, source="key.pub"))
    key = SSlibKey.from_crypto(load_pem_public_key(public), keyid=ours_id)
    assert ours_id in theirs.verify([key], 1)
    assert theirs.payload == PAYLOAD
    tampered = json.loads(data)
    tampered["payload"] = base64.b64encode(PAYLOAD + b" ").decode()
    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(tampered).verify([key], 1)


def test_securesystemslib_verifies_with_ours(keypair: tuple[bytes, bytes]) -> None:
    private, public = keypair
    signer = CryptoSigner(
        load_pem_private_key(private, password=None),
        SSlibKey.from_crypto(load_pem_public_key(public), keyid="their-own-key-id"),
    )
    theirs = SslibEnvelope(PAYLOAD, PAYLOAD_TYPE, {})
    theirs.sign(signer)
    data = json.dumps(theirs.to_dict()).encode()
    assert verify(data, load_public_key(public, source="key.pub")) == PAYLOAD
    tampered = theirs.to_dict()
    tampered["payloadType"] = "application/json"
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        verify(json.dumps(tampered).encode(), load_public_key(public, source="key.pub"))


def test_verify_refuses_other_keys_and_changed_envelopes(tmp_path: Path) -> None:
    private, public = openssl_key(tmp_path, "ed25519")
    _, other_public = openssl_key(tmp_path, "p256")
    envelope = sign(PAYLOAD, load_private_key(private, source="key.pem"))
    with pytest.raises(EnvelopeError) as caught:
        verify(envelope, load_public_key(other_public, source="other.pub"))
    assert str(caught.value).startswith("no signature verifies with the key ")
    assert envelope.signatures[0].keyid in str(caught.value)
    document = json.loads(envelope.to_bytes())
    document["payload"] = base64.b64encode(PAYLOAD.replace(b"[]", b"[1]")).decode()
    with pytest.raises(EnvelopeError, match="the envelope was changed, or signed with another key"):
        verify(json.dumps(document).encode(), load_public_key(public, source="key.pub"))


def test_verify_checks_the_payload_type_after_the_signature(tmp_path: Path) -> None:
    private, public = openssl_key(tmp_path, "ed25519")
    envelope = sign(PAYLOAD, load_private_key(private, source="k"), payload_type="text/plain")
    with pytest.raises(EnvelopeError, match="payload type is 'text/plain'"):
        verify(envelope, load_public_key(public, source="k.pub"))


def test_urlsafe_and_unpadded_base64_are_accepted(tmp_path: Path) -> None:
    private, public = openssl_key(tmp_path, "ed25519")
    payload = b"\xfb\xff" * 7  # '+' and '/' in standard base64
    envelope = sign(payload, load_private_key(private, source="k"), payload_type="x")
    document = envelope.to_json()
    sig = envelope.signatures[0].sig
    document["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    document["signatures"] = [{"sig": base64.urlsafe_b64encode(sig).decode().rstrip("=")}]
    data = json.dumps(document).encode()
    assert verify(data, load_public_key(public, source="k.pub"), payload_type="x") == payload


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff", "the file is not JSON"),
        (b"[]", "a JSON object is expected"),
        (b'{"payload": "", "signatures": [{"sig": ""}]}', "payloadType must be a string"),
        (b'{"payloadType": "x", "payload": 1, "signatures": []}', "payload must be a base64"),
        (b'{"payloadType": "x", "payload": "!!", "signatures": []}', "payload is not base64"),
        (b'{"payloadType": "x", "payload": "", "signatures": []}', "non-empty list"),
        (
            b'{"payloadType": "x", "payload": "", "signatures": [1]}',
            r"signatures\[0\] must be an object",
        ),
        (b'{"payloadType": "x", "payload": "", "signatures": [{"keyid": 1, "sig": ""}]}', "keyid"),
        (b'{"payloadType": "x", "payload": "", "signatures": [{}]}', r"signatures\[0\].sig"),
        (b"[" * 100_000, "the file is not JSON"),
    ],
)
def test_malformed_envelopes_say_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        parse_envelope(data)


def test_too_many_signatures_are_refused() -> None:
    document = {
        "payloadType": "x",
        "payload": "",
        "signatures": [{"sig": ""}] * (MAX_SIGNATURES + 1),
    }
    with pytest.raises(EnvelopeError, match="more than 16 are refused"):
        parse_envelope(json.dumps(document).encode())


def test_key_errors_are_clear(tmp_path: Path) -> None:
    rsa, rsa_public = openssl_key(tmp_path, "rsa")
    with pytest.raises(KeyFileError, match=r"^k.pem: a RSA key — give an Ed25519 or ECDSA P-256"):
        load_private_key(rsa, source="k.pem")
    with pytest.raises(KeyFileError, match="a RSA key"):
        load_public_key(rsa_public, source="k.pub")
    p384, p384_public = openssl_key(tmp_path, "p384")
    with pytest.raises(KeyFileError, match="an ECDSA key on secp384r1, not P-256"):
        load_private_key(p384, source="k.pem")
    with pytest.raises(KeyFileError, match="an ECDSA key on secp384r1, not P-256"):
        load_public_key(p384_public, source="k.pub")
    with pytest.raises(KeyFileError, match="not a PEM private key"):
        load_private_key(b"hello", source="k.pem")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(b"hello", source="k.pub")
    ed, _ = openssl_key(tmp_path, "ed25519")
    with pytest.raises(KeyFileError, match="a private key — verify with the public key"):
        load_public_key(ed, source="k.pem")
    with pytest.raises(KeyFileError, match="is not encrypted — give no passphrase"):
        load_private_key(ed, source="k.pem", password=b"pw")


def test_encrypted_private_keys(tmp_path: Path) -> None:
    encrypted, public = openssl_key(tmp_path, "p256", "-aes-256-cbc", "-pass", "pass:pw")
    with pytest.raises(KeyFileError, match="the private key is encrypted — give its passphrase"):
        load_private_key(encrypted, source="k.pem")
    with pytest.raises(KeyFileError, match="the passphrase is wrong"):
        load_private_key(encrypted, source="k.pem", password=b"nope")
    key = load_private_key(encrypted, source="k.pem", password=b"pw")
    assert verify(sign(PAYLOAD, key), load_public_key(public, source="k.pub")) == PAYLOAD

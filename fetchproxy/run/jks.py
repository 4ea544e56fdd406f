"""A Java trust store (JKS) holding every certificate of a PEM bundle, written without a JVM.

The JVM reads neither ``SSL_CERT_FILE`` nor any other CA variable, and ``keytool -importcert``
imports only the *first* certificate of a PEM file: a trust store made that way from the run's
bundle lacks either the system's CAs or the run's own, and Maven fails with "PKIX path building
failed". So the run writes ``truststore.jks`` itself: one ``trustedCertEntry`` per certificate,
in the JKS layout every JDK reads (JDK 9 and later read it whatever their default keystore type,
through ``keystore.type.compat``).

The layout (big-endian): magic ``0xFEEDFEED``, version 2, the entry count; per entry the tag 2
(trusted certificate), the alias and the certificate type as Java's modified UTF-8 (a 2-byte
length, then the bytes), an 8-byte creation time in milliseconds, the DER length and bytes; at
the end the SHA-1 of the password as UTF-16BE, the bytes ``Mighty Aphrodite`` and everything
before — the integrity check a JVM makes when it is given the password.

Pure: bytes in, bytes out (the same bundle gives the same store: the time is fixed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from typing import Final

PASSWORD: Final = "changeit"  # noqa: S105 -- public: it guards integrity, not secrecy
"""The store's password (the JDK's usual one): it only guards integrity; the store is public."""
_MAGIC: Final = 0xFEEDFEED
_VERSION: Final = 2
_TRUSTED_CERT: Final = 2
_WHITENER: Final = b"Mighty Aphrodite"
_PEM_RE = re.compile(
    rb"-----BEGIN (?:TRUSTED |X509 )?CERTIFICATE-----\r?\n(.*?)-----END (?:TRUSTED |X509 )?"
    rb"CERTIFICATE-----",
    re.DOTALL,
)


def pem_certificates(bundle: bytes) -> list[bytes]:
    """The DER bytes of each certificate in a PEM ``bundle``, in order; a block that is not
    base64 of a DER sequence is left out (the JVM would refuse the whole store over it)."""
    found = []
    for match in _PEM_RE.finditer(bundle):
        try:
            der = base64.b64decode(b"".join(match[1].split()), validate=True)
        except binascii.Error:
            continue
        if der[:1] == b"\x30":  # an ASN.1 SEQUENCE, as every certificate is
            found.append(der)
    return found


def jks_truststore(bundle: bytes, *, password: str = PASSWORD) -> bytes:
    """A JKS store with one trusted certificate entry per certificate of the PEM ``bundle``."""
    certificates = pem_certificates(bundle)
    out = bytearray(struct.pack(">III", _MAGIC, _VERSION, len(certificates)))
    for index, der in enumerate(certificates):
        out += struct.pack(">I", _TRUSTED_CERT)
        out += _java_utf(f"fetchproxy-{index:04d}")
        out += struct.pack(">Q", 0)
        out += _java_utf("X.509")
        out += struct.pack(">I", len(der)) + der
    out += hashlib.sha1(password.encode("utf-16-be") + _WHITENER + bytes(out)).digest()  # noqa: S324 -- JKS's own check
    return bytes(out)


def _java_utf(text: str) -> bytes:
    data = text.encode("ascii")  # the aliases and type are ASCII: modified UTF-8 is the same
    return struct.pack(">H", len(data)) + data

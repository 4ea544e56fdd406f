"""fetchproxy's own certificate authority, made with ``cryptography``.

Clients trust this CA so the proxy can read HTTPS fetches. ``serve`` uses a persistent CA kept in
a private directory (0700, key 0600) under ``$XDG_DATA_HOME/fetchproxy/ca``; every sandboxed
``record``/``replay`` run makes a fresh ephemeral one whose key lives only in the run's private
temporary directory and is removed with it.

mitmproxy reads a CA from its confdir as ``mitmproxy-ca.pem`` (key, then certificate); the
certificate alone is written beside it as ``fetchproxy-ca.pem`` for clients.
:func:`system_trust_bundle` reads the system's CA certificates: a build trusts them and the run's
CA; the recorder (and ``store fetch``) trusts them, certifi's and any ``--upstream-ca`` upstream
(:func:`upstream_trust`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fetchproxy.errors import FetchproxyError
from fetchproxy.files import write_atomic

MITMPROXY_CA_FILE = "mitmproxy-ca.pem"
CERT_FILE = "fetchproxy-ca.pem"
_LIFETIME = datetime.timedelta(days=3650)
_EPHEMERAL_LIFETIME = datetime.timedelta(days=2)
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/cert.pem",  # Alpine, macOS
)


class CAError(FetchproxyError, OSError):
    """The CA directory cannot be created, read or trusted."""


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path) -> Path:
        """Write the CA into ``directory`` for mitmproxy and clients; return the certificate path.

        The directory is made private (0700) and the key file is 0600.
        """
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        write_atomic(directory / MITMPROXY_CA_FILE, self.key_pem + self.cert_pem, mode=0o600)
        cert_path = directory / CERT_FILE
        write_atomic(cert_path, self.cert_pem, mode=0o644)
        return cert_path

    def issue_server_certificate(
        self, hosts: list[str], *, lifetime: datetime.timedelta = _EPHEMERAL_LIFETIME
    ) -> tuple[bytes, bytes]:
        """A server certificate for ``hosts`` (names or IP addresses): (cert PEM, key PEM)."""
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(_a_labels(host)))
        # Clients match the SubjectAltName; the CN is only a label, limited to 64 characters.
        common_name = str(names[0].value)[:64]
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + lifetime)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        return (
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )


def _a_labels(host: str) -> str:
    """A host name as a certificate names it: IDNA A-labels (``bücher.example`` →
    ``xn--bcher-kva.example``); ASCII names as they are."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise CAError(f"{host!r} is not a host name a certificate can name: {exc}") from None


def generate_ca(
    common_name: str = "fetchproxy CA", *, lifetime: datetime.timedelta = _LIFETIME
) -> CertificateAuthority:
    """A new self-signed CA (ECDSA P-256: fast enough to make one per run).

    Its SubjectKeyIdentifier is derived from its public key, so leaf certificates signed
    with it carry a matching AuthorityKeyIdentifier.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fetchproxy"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    public_key = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def generate_ephemeral_ca() -> CertificateAuthority:
    """A CA for one sandboxed run: short-lived, never written outside the run's directory."""
    return generate_ca("fetchproxy ephemeral CA", lifetime=_EPHEMERAL_LIFETIME)


def persistent_ca_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME/fetchproxy/ca``, else ``~/.local/share/fetchproxy/ca``."""
    data_home = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "fetchproxy" / "ca"


def ensure_persistent_ca(directory: Path) -> Path:
    """The persistent CA's certificate path, making the CA on first use.

    Refuses a directory that other users can read, since it holds the CA's private key.
    """
    try:
        if (directory / MITMPROXY_CA_FILE).exists():
            mode = directory.stat().st_mode & 0o777
            if mode & 0o077:
                raise CAError(
                    f"{directory}: the CA directory is readable by other users (mode {mode:o}) "
                    f"— run `chmod 700 {directory}`, or remove it to make a new CA"
                )
            cert_path = directory / CERT_FILE
            if not cert_path.exists():
                pem = (directory / MITMPROXY_CA_FILE).read_bytes()
                cert = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE") :])
                write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
            return cert_path
        return generate_ca().write(directory)
    except (OSError, ValueError) as exc:
        if isinstance(exc, CAError):
            raise
        raise CAError(f"{directory}: cannot set up fetchproxy's CA: {exc}") from exc


def load_ca(directory: Path) -> CertificateAuthority:
    """The CA that :meth:`CertificateAuthority.write` put into ``directory``."""
    path = directory / MITMPROXY_CA_FILE
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise CAError(f"{path}: cannot read fetchproxy's CA: {exc.strerror}") from None
    at = pem.find(b"-----BEGIN CERTIFICATE")
    if at < 0 or not pem[:at].strip():
        raise CAError(f"{path}: not a CA file (a private key, then a certificate, both PEM)")
    return CertificateAuthority(cert_pem=pem[at:], key_pem=pem[:at])


def system_trust_bundle() -> bytes:
    """The system's CA certificates: Python's default bundle, else the first of the usual
    places; empty when there is none."""
    for candidate in (ssl.get_default_verify_paths().cafile, *_SYSTEM_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


def upstream_trust(extra: Sequence[Path] = ()) -> bytes:
    """What record trusts upstream, as one PEM bundle: certifi's and the system's CA
    certificates, then each file of ``extra`` (``--upstream-ca``). ``store fetch`` verifies
    origins against the same bundle."""
    import certifi  # noqa: PLC0415 -- only who talks to origins needs it

    parts = [Path(certifi.where()).read_bytes()]
    system = system_trust_bundle()
    if system:
        parts.append(system)
    for path in extra:
        try:
            parts.append(path.read_bytes())
        except OSError as exc:
            raise CAError(f"{path}: cannot read --upstream-ca: {exc.strerror}") from None
    return b"\n".join(parts)

"""fetchproxy's CA: what it is, how it is kept on disk, and that mitmproxy signs with it."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fetchproxy.ca import (
    CERT_FILE,
    MITMPROXY_CA_FILE,
    CAError,
    ensure_persistent_ca,
    generate_ca,
    generate_ephemeral_ca,
    persistent_ca_dir,
)
from fetchproxy.errors import FetchproxyError
from tests.support.proxy import Paths, StartProxy


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_generated_ca_is_a_ca_whose_key_identifier_comes_from_its_key() -> None:
    authority = generate_ca("a test CA")
    cert = x509.load_pem_x509_certificate(authority.cert_pem)
    key = serialization.load_pem_private_key(authority.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert cert.public_key() == key.public_key()
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "a test CA"
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert (constraints.critical, constraints.value.ca) == (True, True)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (usage.key_cert_sign, usage.crl_sign) == (True, True)
    ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert.verify_directly_issued_by(cert)
    assert generate_ca().cert_pem != authority.cert_pem  # a new key every time


def test_an_ephemeral_ca_lives_two_days() -> None:
    cert = x509.load_pem_x509_certificate(generate_ephemeral_ca().cert_pem)
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=1, hours=23) < lifetime <= datetime.timedelta(days=2)


def test_write_keeps_the_key_private_and_the_certificate_readable(tmp_path: Path) -> None:
    authority = generate_ca()
    directory = tmp_path / "ca"
    directory.mkdir(mode=0o755)
    cert_path = authority.write(directory)
    assert cert_path == directory / CERT_FILE
    assert cert_path.read_bytes() == authority.cert_pem
    assert (directory / MITMPROXY_CA_FILE).read_bytes() == authority.key_pem + authority.cert_pem
    assert (mode_of(directory), mode_of(directory / MITMPROXY_CA_FILE), mode_of(cert_path)) == (
        0o700,
        0o600,
        0o644,
    )


def test_the_persistent_ca_is_made_once_under_xdg_data_home(tmp_path: Path) -> None:
    directory = persistent_ca_dir({"XDG_DATA_HOME": str(tmp_path / "data")})
    assert directory == tmp_path / "data" / "fetchproxy" / "ca"
    assert persistent_ca_dir({}) == Path.home() / ".local" / "share" / "fetchproxy" / "ca"
    cert_path = ensure_persistent_ca(directory)
    first = cert_path.read_bytes()
    assert ensure_persistent_ca(directory) == cert_path
    assert cert_path.read_bytes() == first
    # the clients' copy of the certificate is made again from the key file if it went missing
    cert_path.unlink()
    assert ensure_persistent_ca(directory).read_bytes() == first


def test_a_persistent_ca_directory_others_can_read_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "ca"
    ensure_persistent_ca(directory)
    directory.chmod(0o750)
    with pytest.raises(CAError) as refused:
        ensure_persistent_ca(directory)
    assert isinstance(refused.value, FetchproxyError)
    assert str(refused.value) == (
        f"{directory}: the CA directory is readable by other users (mode 750) "
        f"— run `chmod 700 {directory}`, or remove it to make a new CA"
    )


def test_a_persistent_ca_that_cannot_be_made_says_where(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CAError) as failed:
        ensure_persistent_ca(blocker / "ca")
    assert str(failed.value).startswith(f"{blocker / 'ca'}: cannot set up fetchproxy's CA: ")


def test_ca_path_prints_the_certificate_path(tmp_path: Path) -> None:
    # a subprocess: the CLI sets up logging on the root logger, which would outlive this test
    environ = {k: v for k, v in os.environ.items() if k != "XDG_DATA_HOME"}
    done = subprocess.run(
        [sys.executable, "-m", "fetchproxy", "ca", "path"],
        capture_output=True,
        text=True,
        env={**environ, "XDG_DATA_HOME": str(tmp_path)},
        timeout=60,
        check=False,
    )
    cert_path = tmp_path / "fetchproxy" / "ca" / CERT_FILE
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{cert_path}\n", "")
    assert (
        x509.load_pem_x509_certificate(cert_path.read_bytes())
        .extensions.get_extension_for_class(x509.BasicConstraints)
        .value.ca
    )


def test_mitmproxy_signs_with_our_ca(paths: Paths, start_proxy: StartProxy) -> None:
    """The certificate the proxy shows a client chains to our CA, and names it by its key."""
    proxy = start_proxy("record")
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(paths.ca_cert))
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # lazy connection strategy: CONNECT opens nothing upstream, so any port will do
        sock.sendall(b"CONNECT files.example.org:443 HTTP/1.1\r\nHost: files.example.org\r\n\r\n")
        assert sock.recv(1000).startswith(b"HTTP/1.1 200 ")
        with context.wrap_socket(sock, server_hostname="files.example.org") as tls:
            leaf_der = tls.getpeercert(binary_form=True)
    proxy.stop()
    assert leaf_der is not None
    leaf = x509.load_der_x509_certificate(leaf_der)
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    leaf.verify_directly_issued_by(ca)
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["files.example.org"]

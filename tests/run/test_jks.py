"""The Java trust store: every certificate of the bundle, read back by the JDK's own keytool."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fetchproxy.ca import generate_ca, system_trust_bundle
from fetchproxy.run.jks import jks_truststore, pem_certificates
from tests.support.tools import require

INSTALL = "apt-get install default-jdk-headless"


def keytool_list(store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    keytool = require("keytool", install=INSTALL)["keytool"]
    return subprocess.run(
        [str(keytool), "-list", "-keystore", str(store), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_certificate_of_the_bundle_is_in_the_store(tmp_path: Path) -> None:
    """``keytool -importcert`` takes a bundle's first certificate only; the store has all."""
    system = system_trust_bundle()
    run_ca = generate_ca("fetchproxy run CA").cert_pem
    bundle = system + b"\n" + run_ca
    expected = len(pem_certificates(system)) + 1
    assert expected > 100  # Debian's bundle: about 140 CAs
    store = tmp_path / "truststore.jks"
    store.write_bytes(jks_truststore(bundle))

    listed = keytool_list(store, "-storepass", "changeit", "-storetype", "JKS", "-rfc")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"Your keystore contains {expected} entries" in listed.stdout
    assert listed.stdout.count("trustedCertEntry") == expected
    # the last entry is the run's own CA, byte for byte
    assert run_ca.decode().strip() in listed.stdout.replace("\r", "")
    # a wrong password fails the integrity check: the check is the JDK's, not a formality
    wrong = keytool_list(store, "-storepass", "wrong-password")
    assert wrong.returncode != 0
    assert "password was incorrect" in wrong.stdout + wrong.stderr


def test_the_store_is_the_same_for_the_same_bundle_and_skips_what_is_no_certificate() -> None:
    ca = generate_ca("fetchproxy run CA").cert_pem
    junk = b"-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n"
    assert jks_truststore(ca) == jks_truststore(junk + ca)
    assert jks_truststore(ca) == jks_truststore(ca)  # no time, no randomness
    assert len(pem_certificates(junk + ca + b"trailing text")) == 1
    assert jks_truststore(b"")[:12] == bytes.fromhex("feedfeed0000000200000000")

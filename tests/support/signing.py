"""Signing keys made with the openssl command line, as a user makes a key for ``--attest-key``:
Ed25519 or P-256, the private key encrypted with a passphrase or not."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl_key(directory: Path, kind: str, *, passphrase: str | None = None) -> tuple[Path, Path]:
    """A private key made by openssl (encrypted with ``passphrase``), and its public key."""
    algorithm = (
        ["-algorithm", "ed25519"]
        if kind == "ed25519"
        else ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    )
    private, public = directory / f"{kind}.pem", directory / f"{kind}.pub"
    encrypt = [] if passphrase is None else ["-aes-256-cbc", "-pass", f"pass:{passphrase}"]
    subprocess.run(["openssl", "genpkey", *algorithm, *encrypt, "-out", private], check=True)
    unlock = [] if passphrase is None else ["-passin", f"pass:{passphrase}"]
    subprocess.run(
        ["openssl", "pkey", "-in", private, *unlock, "-pubout", "-out", public], check=True
    )
    return private, public

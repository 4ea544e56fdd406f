"""TLS server contexts for intercepted hosts: one certificate per host, issued by our CA.

The direct replay server terminates TLS inside each ``CONNECT`` tunnel as the origin would,
with a certificate for the host the client asked for (its SNI, else the ``CONNECT`` host)
signed by fetchproxy's CA. Certificates are made on first use and kept for the run; their keys
live only in memory (the PEM is written to a private temp file just long enough for OpenSSL to
load it).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from fetchproxy.ca import CertificateAuthority


class HostContexts:
    """``SSLContext`` per host name or address, each offering only ``alpn`` (HTTP/1.1)."""

    def __init__(
        self, ca: CertificateAuthority, workdir: Path, *, alpn: tuple[str, ...] = ("http/1.1",)
    ) -> None:
        self._ca = ca
        self._workdir = workdir
        self._alpn = list(alpn)
        self._contexts: dict[str, ssl.SSLContext] = {}

    def for_host(self, host: str) -> ssl.SSLContext:
        context = self._contexts.get(host)
        if context is None:
            context = self._make(host)
            self._contexts[host] = context
        return context

    def _make(self, host: str) -> ssl.SSLContext:
        cert_pem, key_pem = self._ca.issue_server_certificate([host])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(self._alpn)
        fd, name = tempfile.mkstemp(dir=self._workdir, prefix="leaf-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(key_pem + cert_pem + self._ca.cert_pem)
            context.load_cert_chain(name)
        finally:
            Path(name).unlink()
        context.sni_callback = self._switch
        return context

    def _switch(self, connection: ssl.SSLObject, server_name: str | None, _: object) -> None:
        """On a ClientHello with SNI: present the certificate for that name."""
        if server_name:
            connection.context = self.for_host(server_name)

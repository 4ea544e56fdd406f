"""TLS server contexts for intercepted hosts: one certificate per host, issued by our CA.

The direct replay server terminates TLS inside each ``CONNECT`` tunnel as the origin would,
with a certificate for the host the client asked for (its SNI, else the ``CONNECT`` host)
signed by fetchproxy's CA. Certificates are made on first use and kept for the run; their keys
live only in memory (OpenSSL reads the PEM from a ``memfd``, never the disk).
"""

from __future__ import annotations

import logging
import os
import ssl
import weakref
from collections import OrderedDict

from fetchproxy.ca import CertificateAuthority

logger = logging.getLogger("fetchproxy.replay")

MOST_HOSTS = 1024
"""Certificates kept at once (a build talks to a few dozen hosts; each costs a few KiB)."""


class HostContexts:
    """``SSLContext`` per host name or address, each offering only HTTP/1.1 (ALPN)."""

    def __init__(self, ca: CertificateAuthority, *, most: int = MOST_HOSTS) -> None:
        self._ca = ca
        self._most = most
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._names: weakref.WeakKeyDictionary[ssl.SSLObject, str] = weakref.WeakKeyDictionary()

    def for_host(self, host: str) -> ssl.SSLContext:
        """The context for ``host``, made on first use; the least recently used beyond
        ``most`` are dropped (a connection keeps the context it has)."""
        context = self._contexts.get(host)
        if context is None:
            context = self._make(host)
            self._contexts[host] = context
            if len(self._contexts) > self._most:
                self._contexts.popitem(last=False)
        else:
            self._contexts.move_to_end(host)
        return context

    def _make(self, host: str) -> ssl.SSLContext:
        cert_pem, key_pem = self._ca.issue_server_certificate([host])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # A TLS 1.2 client may not renegotiate: a second handshake could name another server
        # (SNI) on a connection whose requests were checked against the first.
        context.options |= ssl.OP_NO_RENEGOTIATION
        context.set_alpn_protocols(["http/1.1"])
        # OpenSSL loads a key only from a file: hand it one that lives in memory only.
        fd = os.memfd_create("fetchproxy-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, key_pem + cert_pem + self._ca.cert_pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        context.sni_callback = self._switch
        return context

    def for_host_or_none(self, host: str) -> ssl.SSLContext | None:
        """:meth:`for_host`, or None (and a warning) for a name no certificate can carry."""
        try:
            return self.for_host(host)
        except (ValueError, OSError) as exc:
            logger.warning("replay: no certificate for %r: %s", host[:100], exc)
            return None

    def server_name(self, tls: ssl.SSLObject) -> str | None:
        """The server name (SNI) the client of ``tls`` asked for, None when it sent none."""
        return self._names.get(tls)

    def _switch(self, connection: ssl.SSLObject, server_name: str | None, _: object) -> int | None:
        """On a ClientHello with SNI: present the certificate for that name."""
        if not server_name:
            return None
        self._names[connection] = server_name
        context = self.for_host_or_none(server_name)
        if context is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        connection.context = context
        return None

"""TLS inside a ``CONNECT`` tunnel, over memory BIOs: :class:`TLSTunnel`. No I/O.

The direct server terminates TLS as the origin would: ciphertext from the client goes into
:meth:`TLSTunnel.receive`, which answers the handshake and hands back plaintext; plaintext
answers go into :meth:`TLSTunnel.send`, which hands back ciphertext. The caller writes every
ciphertext it gets to the transport at once, so nothing waits inside the BIOs: what this costs
per connection is one TLS session, never a queue of answers.
"""

from __future__ import annotations

import ssl
from contextlib import suppress

_READ = 256 * 1024
_RECORD = 16 * 1024
"""The most plaintext in one TLS record."""


class TLSFailedError(Exception):
    """The client's TLS failed; ``handshake``: before the handshake was complete."""

    def __init__(self, reason: str, *, handshake: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.handshake = handshake


class TLSTunnel:
    """The server's end of one TLS session inside a tunnel."""

    __slots__ = ("_incoming", "_outgoing", "_tls", "handshaken", "peer_closed")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshaken = False
        self.peer_closed = False
        """The client sent its close_notify: it will send nothing more."""

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """Ciphertext from the client → (plaintext for the server, ciphertext to send back:
        the handshake's records). Raises :class:`TLSFailedError`."""
        tls = self._tls
        self._incoming.write(data)
        if not self.handshaken:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                return b"", self._outgoing.read()
            except OSError as exc:
                raise TLSFailedError(_reason(exc), handshake=True) from exc
            self.handshaken = True
        parts = []
        incoming = self._incoming
        try:
            while chunk := tls.read(_READ):
                parts.append(chunk)
                if not incoming.pending and not tls.pending():
                    break  # all read: another read would only raise SSLWantReadError
            else:
                self.peer_closed = True  # b"": the client sent its close_notify
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.peer_closed = True
        except OSError as exc:
            raise TLSFailedError(_reason(exc), handshake=False) from exc
        plain = parts[0] if len(parts) == 1 else b"".join(parts)
        return plain, self._outgoing.read()

    @property
    def session(self) -> ssl.SSLObject:
        """The TLS session itself (to ask the contexts which server name it was for)."""
        return self._tls

    def pending(self) -> bytes:
        """Ciphertext still to send (a handshake's last records, an alert)."""
        return self._outgoing.read()

    def send(self, data: bytes | memoryview) -> bytes:
        """Plaintext for the client → ciphertext to send.

        Encrypted a TLS record at a time and read out after each, so that the outgoing BIO
        never grows past one record: OpenSSL keeps a BIO's buffer at its largest size, which
        would cost every connection as much as the largest answer it ever sent.
        """
        tls, outgoing = self._tls, self._outgoing
        view = memoryview(data)
        if len(view) <= _RECORD:
            tls.write(view)
            return outgoing.read()
        out = []
        while view:
            written = tls.write(view[:_RECORD])
            view = view[written:]
            out.append(outgoing.read())
        return b"".join(out)

    def close(self) -> bytes:
        """The close_notify to send (nothing before the handshake is complete)."""
        if not self.handshaken:
            return b""
        with suppress(ssl.SSLError, OSError):
            self._tls.unwrap()
        return self._outgoing.read()


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", None) or exc)

"""A loopback HTTP/1.1 server that streams blobs out of the store, for replaying large bodies.

mitmproxy takes a locally made response only as one ``bytes`` object, so a 1 GiB body would cost
1 GiB of memory. Instead replay points such a flow at this server (on the host's loopback, with
an unguessable per-run path prefix) and lets mitmproxy stream its answer back to the client; the
replay addon then puts the recorded status and headers on it. The server is a dumb pipe: it
serves ``GET /<token>/<hex digest>/<start>-<end>`` as exactly those bytes with status 200, and
decides nothing. A whole blob is rehashed while it streams and its last chunk is withheld until
the digest checks out, so a corrupt blob never reaches a client whole.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from contextlib import suppress

from fetchproxy.digest import Digest, from_hex, hex_of
from fetchproxy.replay.blobs import VerifiedBlobs
from fetchproxy.store import CorruptBlobError

logger = logging.getLogger(__name__)

_REQUEST_LINE_RE = re.compile(rb"GET /([0-9a-f]{32})/([0-9a-f]{64})/(\d+)-(\d+) HTTP/1\.1\r\n")
_MAX_HEAD = 16 * 1024
_CHUNK = 1 << 20
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class BlobServer:
    """Serves byte ranges of blobs to mitmproxy over loopback."""

    def __init__(self, verified: VerifiedBlobs) -> None:
        self._verified = verified
        self._token = secrets.token_hex(16)
        self._server: asyncio.Server | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.corrupt: list[CorruptBlobError] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def path_for(self, digest: Digest, start: int, end: int) -> str:
        """The request path for bytes ``start`` to ``end`` (exclusive) of ``digest``."""
        return f"/{self._token}/{hex_of(digest)}/{start}-{end}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except CorruptBlobError as exc:
            self.corrupt.append(exc)  # the replay addon says so, and counts it
        finally:
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD:
            return False
        match = _REQUEST_LINE_RE.match(head)
        if match is None or not secrets.compare_digest(match.group(1).decode(), self._token):
            writer.write(_NOT_FOUND)
            await writer.drain()
            return False
        digest = from_hex(match.group(2).decode())
        start, end = int(match.group(3)), int(match.group(4))
        size = self._verified.verified_size(digest)
        if size is None:  # the replay addon verifies a blob before it points a flow here
            writer.write(_NOT_FOUND)
            await writer.drain()
            return False
        end = min(end, size)
        start = min(start, end)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (end - start))
        # Only bytes of the file verified: a whole blob is rehashed as it streams, a part is
        # read from a file whose identity is the verified one (or that was rehashed first).
        blob = await self._verified.open_verified(digest, size, start, end, chunk_size=_CHUNK)
        with blob:
            for part in blob:
                writer.write(part)
                await writer.drain()
        return True

"""Answering flows from recorded entries: shared by replay and by ``record --keep``.

Not an addon itself: the replay and record addons each hold one :class:`LockAnswers` and call it
from their hooks. A blob is rehashed before its first use in a run; bodies up to
:data:`SMALL_BODY` are answered from a bounded in-memory cache, larger ones by pointing the flow
at the loopback :class:`~fetchproxy.blobserver.BlobServer` and putting the recorded status and
headers on its streamed answer in ``responseheaders``.
"""

from __future__ import annotations

from mitmproxy import http

from fetchproxy.addons import flows
from fetchproxy.addons.blobserver import BlobServer
from fetchproxy.lock.model import Fetch
from fetchproxy.replay.blobs import SMALL_BODY, VerifiedBlobs
from fetchproxy.replay.decisions import Answer
from fetchproxy.store import CorruptBlobError

_STREAMED = "fetchproxy.streamed-digest"


class LockAnswers:
    """Serves recorded answers for one run. ``start()`` in ``running``, ``close()`` in ``done``."""

    def __init__(self, verified: VerifiedBlobs) -> None:
        self.verified = verified
        self.store = verified.store
        self.blobs: BlobServer | None = None

    async def start(self) -> None:
        if self.blobs is None:
            self.blobs = BlobServer(self.verified)
            await self.blobs.start()

    async def close(self) -> None:
        if self.blobs is not None:
            await self.blobs.close()
            self.blobs = None

    def is_blob_server(self, address: object) -> bool:
        blobs = self.blobs
        return blobs is not None and address == (blobs.host, blobs.port)

    async def answer(self, flow: http.HTTPFlow, fetch: Fetch, answer: Answer) -> None:
        """Answer ``flow`` with ``answer`` from ``fetch``'s blob, verified before in this run
        (:meth:`VerifiedBlobs.verify`); a large body streams from the blob server."""
        request = flow.request
        if not answer.send_body:
            flow.response = flows.response_from(flow, answer, b"")
            return
        start, end = answer.span(fetch.size)
        blobs = self.blobs
        if fetch.size <= SMALL_BODY or blobs is None:
            body = await self.verified.small_body(fetch.digest, fetch.size)
            flow.response = flows.response_from(flow, answer, body[start:end])
            return
        flow.metadata[flows.OWN] = answer
        flow.metadata[_STREAMED] = fetch.digest
        request.scheme = "http"
        request.host = blobs.host
        request.port = blobs.port
        request.method = "GET"
        request.path = blobs.path_for(fetch.digest, start, end)
        request.headers = http.Headers(host=f"{blobs.host}:{blobs.port}")
        # An HTTP/2 client's request has an :authority, with which mitmproxy would send the
        # HTTP/1 request line in absolute form ("GET http://..."); the blob server wants the
        # origin form.
        request.authority = ""
        request.content = b""
        request.http_version = "HTTP/1.1"

    def responseheaders(self, flow: http.HTTPFlow) -> bool | None:
        """For a flow sent to the blob server: restore the recorded answer and stream it.

        None for other flows; False when the blob server could not serve the blob.
        """
        answer = flow.metadata.get(flows.OWN)
        response = flow.response
        if not isinstance(answer, Answer) or response is None:
            return None
        if response.status_code != 200:
            return False
        flows.set_answer_headers(response, answer)
        response.stream = True
        return True

    def corrupt_while_streaming(self, flow: http.HTTPFlow) -> CorruptBlobError | None:
        """Why ``flow`` failed, when its blob turned out corrupt while it streamed."""
        digest = flow.metadata.get(_STREAMED)
        blobs = self.blobs
        if digest is None or blobs is None:
            return None
        return next((error for error in blobs.corrupt if error.expected == digest), None)

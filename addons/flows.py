"""Translation between mitmproxy flows and fetchproxy's core values.

This module and the addons beside it are the only code that touches mitmproxy's flow API. They
turn a flow into a :class:`~fetchproxy.normalize.RequestKey` and an
:class:`~fetchproxy.replaying.Answer` into a response; every decision is the core's.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from mitmproxy import http

from fetchproxy.digest import digest_bytes
from fetchproxy.keys.gitbody import canonical_body
from fetchproxy.keys.request import RequestKey, normalize_request
from fetchproxy.replay.decisions import Answer

KEY = "fetchproxy.key"
"""``flow.metadata`` entry holding the flow's RequestKey."""
OWN = "fetchproxy.answer"
"""``flow.metadata`` entry marking a flow that fetchproxy answers itself (replay)."""


def request_key(flow: http.HTTPFlow, secret_params: Collection[str]) -> RequestKey:
    """The key of the flow's request, computed once and kept in ``flow.metadata``.

    Raises :class:`~fetchproxy.normalize.InvalidURLError` for a URL that cannot be a key.
    """
    cached = flow.metadata.get(KEY)
    if isinstance(cached, RequestKey):
        return cached
    request = flow.request
    body = request.get_content(strict=False) or b""
    body_digest = None
    if body:
        content_type = request.headers.get("content-type")
        body_digest = digest_bytes(canonical_body(request.path, content_type, body))
    key = normalize_request(
        request.method,
        request.pretty_url,
        headers=request.headers.items(multi=True),
        body_digest=body_digest,
        secret_params=secret_params,
    )
    flow.metadata[KEY] = key
    return key


def response_from(flow: http.HTTPFlow, answer: Answer, body: bytes) -> http.Response:
    """A response carrying ``answer`` and exactly ``body``, without re-encoding anything.

    (``Response.make`` would re-encode per content-encoding and rewrite content-length.)
    """
    now = time.time()
    return http.Response(
        http_version=flow.request.data.http_version,
        status_code=answer.status,
        reason=answer.reason.encode(),
        headers=tuple(
            (name.encode(), value.encode("utf-8", "surrogateescape"))
            for name, value in answer.headers
        ),
        content=body,
        trailers=None,
        timestamp_start=now,
        timestamp_end=now,
    )


def set_answer_headers(response: http.Response, answer: Answer) -> None:
    """Give a streamed response the answer's status and headers (body bytes stay as they come)."""
    response.status_code = answer.status
    response.reason = answer.reason
    response.headers = http.Headers(
        tuple(
            (name.encode(), value.encode("utf-8", "surrogateescape"))
            for name, value in answer.headers
        )
    )

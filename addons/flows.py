"""Translation between mitmproxy flows and fetchproxy's core values.

This module and the addons beside it are the only code that touches mitmproxy's flow API. They
turn a flow into a :class:`~fetchproxy.keys.rules.RawRequest` and an
:class:`~fetchproxy.replay.decisions.Answer` into a response; every decision is the core's.
"""

from __future__ import annotations

import time

from mitmproxy import http

from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules, RawRequest
from fetchproxy.replay.decisions import Answer

KEY = "fetchproxy.key"
"""``flow.metadata`` entry holding the flow's RequestKey."""
INTERCEPTED = "fetchproxy.intercepted"
"""``flow.metadata`` entry: the authority of a request on a redirected connection
(``--intercept transparent``), set by the ``Intercepted`` addon."""
OWN = "fetchproxy.answer"
"""``flow.metadata`` entry marking a flow that fetchproxy answers itself (replay)."""


def raw_request(flow: http.HTTPFlow) -> RawRequest:
    """What the flow's request is made of, as :class:`~fetchproxy.keys.rules.KeyRules` reads it.

    The authority is the server mitmproxy sends the request to (the ``CONNECT`` target, or the
    authority of an absolute-form request; on a redirected connection, what its original
    destination stands for), never the ``Host`` header; an HTTP/2 request's
    ``:authority`` is checked like a ``Host`` header. The body is the one the client sent,
    still in its ``Content-Encoding``.
    """
    request = flow.request
    host = request.host
    authority = f"[{host}]:{request.port}" if ":" in host else f"{host}:{request.port}"
    intercepted = flow.metadata.get(INTERCEPTED)
    if isinstance(intercepted, str):
        authority = intercepted
    headers = request.headers.items(multi=True)
    if request.authority and "host" not in request.headers:
        headers = [*headers, ("host", request.authority)]
    return RawRequest(
        method=request.method,
        scheme=request.scheme,
        authority=authority,
        target=request.path,
        headers=list(headers),
        body=request.raw_content or b"",
        sni=flow.client_conn.sni if request.scheme == "https" else None,
        intercepted=isinstance(intercepted, str),
    )


def request_key(flow: http.HTTPFlow, rules: KeyRules) -> RequestKey:
    """The key of the flow's request, computed once and kept in ``flow.metadata``.

    Raises what :meth:`~fetchproxy.keys.rules.KeyRules.key` raises (``ValueError``s).
    """
    cached = flow.metadata.get(KEY)
    if isinstance(cached, RequestKey):
        return cached
    key = rules.key(raw_request(flow))
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

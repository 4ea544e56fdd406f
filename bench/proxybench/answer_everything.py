"""A mitmproxy addon script that answers every request itself with the same 1 KiB body.

    mitmdump -q -s bench/proxybench/answer_everything.py --set connection_strategy=lazy ...

No lookup, no store, no upstream: what one mitmproxy process can answer at most, with the same
TLS interception as fetchproxy's replay. It is the ceiling replay is measured against.
"""

from __future__ import annotations

from mitmproxy import http

BODY = bytes(range(256)) * 4
"""1 KiB, the size of the small files the benchmark records and replays."""


class AnswerEverything:
    def request(self, flow: http.HTTPFlow) -> None:
        flow.response = http.Response.make(200, BODY, {"content-type": "application/octet-stream"})


addons = [AnswerEverything()]

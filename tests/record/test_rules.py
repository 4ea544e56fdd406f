"""What recording keeps of an answer."""

from __future__ import annotations

from fetchproxy.digest import EMPTY, digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.keys.rules import KeyRules
from fetchproxy.record.rules import STRIPPED_REQUEST_HEADERS, fetch_from_answer, is_recordable

KEY = RequestKey(method="GET", url="https://example.org/dl/tool.zip")


def test_only_final_answers_below_500_are_locked() -> None:
    assert [s for s in (101, 200, 206, 302, 404, 499, 500, 503) if is_recordable(s)] == [
        200,
        206,
        302,
        404,
        499,
    ]


def test_range_conditionals_and_encoding_are_stripped() -> None:
    assert {
        "range",
        "if-none-match",
        "if-modified-since",
        "accept-encoding",
    } <= STRIPPED_REQUEST_HEADERS


def test_kept_headers_and_nothing_volatile() -> None:
    fetch = fetch_from_answer(
        KEY,
        rules=KeyRules(),
        status=200,
        headers=[
            ("Content-Type", "application/zip"),
            ("Date", "Sun, 29 Nov 2026 10:00:00 GMT"),
            ("ETag", '"abc"'),
            ("Set-Cookie", "session=secret"),
            ("Content-Disposition", "attachment"),
        ],
        digest=digest_bytes(b"zip"),
        size=3,
    )
    assert fetch.content_type == "application/zip"
    assert fetch.content_disposition == "attachment"
    assert "secret" not in repr(fetch)
    assert "2026" not in repr(fetch)


def test_redirect_location_is_absolute_normalized_and_without_secrets() -> None:
    fetch = fetch_from_answer(
        KEY,
        rules=KeyRules(),
        status=302,
        headers=[("Location", "/objects/tool.zip?X-Amz-Signature=s3cr3t&b=2&a=1#frag")],
        digest=EMPTY,
        size=0,
    )
    assert fetch.location == "https://example.org/objects/tool.zip?a=1&b=2"


def test_head_keeps_the_announced_length() -> None:
    head = RequestKey(method="HEAD", url=KEY.url)
    fetch = fetch_from_answer(
        head,
        status=200,
        headers=[("content-length", "1234")],
        digest=EMPTY,
        size=0,
        rules=KeyRules(),
    )
    assert fetch.content_length == 1234
    assert fetch.size == 0

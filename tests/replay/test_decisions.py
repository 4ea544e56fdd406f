"""Replay's pure decisions: the answer for a hit, the refusal for a miss, the nearest entry."""

from __future__ import annotations

from fetchproxy.digest import Digest, digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import Fetch, Lock
from fetchproxy.replay.decisions import (
    accept_hint,
    answer_for,
    invalid_request,
    key_differences,
    nearest,
    refusal,
    store_refusal,
)
from fetchproxy.replay.ranges import ByteRange
from fetchproxy.replay.replayer import Hit
from fetchproxy.store import CorruptBlobError, StoreError
from tests.support.locks import make_fetch

D = digest_bytes(b"0123456789")


def fetch(url: str = "https://example.org/pkg/a.tgz", **fields: object) -> Fetch:
    values: dict[str, object] = {
        "method": "GET",
        "url": url,
        "status": 200,
        "digest": D,
        "size": 10,
    }
    values.update(fields)
    return make_fetch(**values)


def test_hit_restores_recorded_headers_and_length() -> None:
    answer = answer_for(
        fetch(content_type="application/gzip", content_encoding="gzip"),
        method="GET",
        range_header=None,
    )
    assert answer.status == 200
    assert answer.headers == (
        ("content-type", "application/gzip"),
        ("content-encoding", "gzip"),
        ("content-length", "10"),
    )
    assert answer.body is None
    assert answer.send_body


def test_head_sends_recorded_length_and_no_body() -> None:
    answer = answer_for(
        fetch(method="HEAD", size=0, content_length=1234), method="HEAD", range_header=None
    )
    assert answer.headers == (("content-length", "1234"),)
    assert not answer.send_body


def test_range_on_a_200_is_a_206() -> None:
    answer = answer_for(fetch(), method="GET", range_header="bytes=2-4")
    assert answer.status == 206
    assert ("content-range", "bytes 2-4/10") in answer.headers
    assert ("content-length", "3") in answer.headers
    assert answer.body == ByteRange(2, 4, 10)


def test_unsatisfiable_range_is_416_and_range_on_a_redirect_is_ignored() -> None:
    assert answer_for(fetch(), method="GET", range_header="bytes=50-").status == 416
    redirect = fetch(status=302, location="https://example.org/b")
    assert answer_for(redirect, method="GET", range_header="bytes=0-1").status == 302


def test_refusal_names_method_url_and_lock() -> None:
    key = RequestKey(method="GET", url="https://example.org/new")
    refused = refusal(key, lock_name="app.lock.toml")
    text = b"fetchproxy: refused GET https://example.org/new: not in the lock app.lock.toml\n"
    assert refused.text == text
    assert refused.answer.status == 403
    assert ("x-fetchproxy-refused", "not-in-lock") in refused.answer.headers
    assert ("content-length", str(len(text))) in refused.answer.headers


def test_an_invalid_request_is_a_400_refusal_with_its_reason() -> None:
    refused = invalid_request("bad port in 'http://a:x/'")
    assert refused.answer.status == 400
    assert refused.text == b"fetchproxy: refused: bad port in 'http://a:x/'\n"
    assert dict(refused.answer.headers) == {
        "x-fetchproxy-refused": "invalid-request",
        "content-type": "text/plain; charset=utf-8",
        "content-length": str(len(refused.text)),
    }


def test_a_blob_the_store_cannot_serve_is_a_502_naming_why() -> None:
    digest = Digest("blake3:" + "0" * 64)
    rotted = CorruptBlobError("rotted", expected=digest, actual=digest, path=None)
    assert store_refusal(rotted) == ("corrupt-blob", 502)
    assert store_refusal(StoreError("wrong size")) == ("store-error", 502)


def test_nearest_is_the_longest_shared_prefix_on_the_same_host() -> None:
    lock = Lock.from_fetches(
        [
            fetch("https://example.org/pkg/a-1.0.tgz"),
            fetch("https://example.org/pkg/b-1.0.tgz"),
            fetch("https://other.org/pkg/a-1.1.tgz"),
        ]
    )
    key = RequestKey(method="GET", url="https://example.org/pkg/a-1.1.tgz")
    assert nearest(lock, key) == fetch("https://example.org/pkg/a-1.0.tgz")
    assert nearest(lock, RequestKey(method="GET", url="https://new.org/pkg/a-1.1.tgz")) is None
    assert nearest(Lock(), key) is None


def test_a_refusal_whose_nearest_entry_differs_only_in_accept_says_what_to_do() -> None:
    """A lock recorded by cargo 1.95 (``Accept: text/plain``), replayed by cargo 1.65 (``*/*``)."""
    url = "https://crates.example.org/index/config.json"
    lock = Lock.from_fetches([fetch(url, accept="text/plain"), fetch(url + "x")])
    key = RequestKey(method="GET", url=url)
    near = nearest(lock, key)
    assert near is not None
    assert key_differences(key, near.key) == ["accept"]
    assert accept_hint(key, near) == (
        f'the lock holds GET {url} with accept = "text/plain", and this request has no Accept '
        "(or */*): the only difference is the Accept header, so another client, or another "
        "version of it, made the lock. Record again with this one; or, if Accept selects "
        "nothing there, run `fetchproxy config add fetchproxy.accept-selects-nothing "
        "crates.example.org` and record again"
    )
    # the other way round, and when the settings of record and replay differ
    assert 'this request has accept = "text/plain"' in (
        accept_hint(RequestKey(method="GET", url=url, accept="text/plain"), fetch(url)) or ""
    )
    any_accept = fetch(url, accept="*")
    assert accept_hint(key, any_accept) == (
        f"the lock holds GET {url} for any Accept (recorded with fetchproxy.toml's "
        "[fetchproxy] accept-selects-nothing naming it), but this run's fetchproxy.toml does "
        "not name it: replay with the fetchproxy.toml the lock was recorded with"
    )
    assert accept_hint(RequestKey(method="GET", url=url, accept="*"), fetch(url)) == (
        f"this run's fetchproxy.toml says Accept selects nothing at {url}, but the lock holds "
        "it with no Accept (or */*) (recorded without that setting): record again with this "
        "fetchproxy.toml"
    )


def test_no_accept_hint_when_more_than_accept_differs() -> None:
    url = "https://crates.example.org/index/config.json"
    other = fetch(url + "?v=2", accept="text/plain")
    key = RequestKey(method="GET", url=url)
    assert key_differences(key, other.key) == ["url", "accept"]
    assert accept_hint(key, other) is None
    assert accept_hint(key, None) is None
    assert accept_hint(key, fetch(url, method="HEAD", accept="text/plain")) is None


def test_a_hits_body_bytes_are_counted_alike_before_and_after_its_answer_is_made() -> None:
    """A hit sent from prepared bytes never makes its answer; what it counts as served must be
    what the answer would have sent."""
    for status in (200, 206, 304, 404):
        locked = fetch(status=status, size=1000)
        for method in ("GET", "HEAD", "POST"):
            for range_header in (None, "bytes=0-9", "bytes=5000-"):
                lazy = Hit(locked.key, locked, method=method, range_header=range_header)
                made = Hit(locked.key, locked, method=method, range_header=range_header)
                expected = made.answer.body_bytes(locked.size)
                assert lazy.body_bytes == expected, (status, method, range_header)

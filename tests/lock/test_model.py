"""The lock model: exact lookup only, validation of each field, one entry per key."""

from __future__ import annotations

import datetime

import pytest

from fetchproxy.digest import digest_bytes
from fetchproxy.keys.request import RequestKey
from fetchproxy.lock.model import DuplicateFetchError, Fetch, Lock, LockFieldError
from fetchproxy.lock.toml import toml_spelling
from tests.support.locks import make_fetch

D = digest_bytes(b"body")


def fetch(url: str = "https://example.org/a", **fields: object) -> Fetch:
    values: dict[str, object] = {"method": "GET", "url": url, "status": 200, "digest": D, "size": 4}
    values.update(fields)
    return make_fetch(**values)


def test_lookup_is_exact_never_near() -> None:
    lock = Lock.from_fetches([fetch(), fetch(accept="application/json")])
    assert lock.lookup(RequestKey(method="GET", url="https://example.org/a")) == fetch()
    assert lock.lookup(RequestKey(method="GET", url="https://example.org/a/")) is None
    assert lock.lookup(RequestKey(method="HEAD", url="https://example.org/a")) is None
    assert (
        lock.lookup(RequestKey(method="GET", url="https://example.org/a", accept="text/html"))
        is None
    )
    json_key = RequestKey(method="GET", url="https://example.org/a", accept="application/json")
    assert lock.lookup(json_key) == fetch(accept="application/json")


def test_entries_are_sorted_by_key() -> None:
    lock = Lock.from_fetches(
        [fetch("https://b.org/"), fetch("https://a.org/", method="HEAD"), fetch("https://a.org/")]
    )
    assert [(f.key.url, f.key.method) for f in lock.fetches] == [
        ("https://a.org/", "GET"),
        ("https://a.org/", "HEAD"),
        ("https://b.org/", "GET"),
    ]


def test_duplicate_keys_are_refused_with_both_positions() -> None:
    with pytest.raises(DuplicateFetchError) as info:
        Lock.from_fetches([fetch(), fetch("https://example.org/b"), fetch(size=5)])
    assert (info.value.first, info.value.second) == (0, 2)


def test_round_trip_through_dict_keeps_field_order() -> None:
    entry = fetch(location="https://example.org/b", status=302, content_type="text/html")
    table = entry.to_dict()
    assert list(table) == ["method", "url", "status", "location", "digest", "size", "content-type"]
    assert Fetch.from_dict(table) == entry


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"size": -1}, "fetch[7].size: -1 is negative"),
        ({"size": True}, "fetch[7].size: true is not an integer"),
        ({"size": 3.0}, "fetch[7].size: 3.0 is not an integer"),
        ({"url": None, "method": ["GET"]}, "fetch[7].method: ['GET'] is not a string"),
        ({"method": "it's"}, 'fetch[7].method: "it\'s" is not an uppercase HTTP method'),
        (
            {"location": "/b\r\nset-cookie: x"},
            'fetch[7].location: "/b\\r\\nset-cookie: x" has a line break or NUL in it, which no '
            "header value can hold",
        ),
        (
            {"location": "https://u:pw@h/b#t=x"},
            "fetch[7].location: has userinfo, which no lock holds — recording removes it, "
            "normalized or not; re-record this fetch",
        ),
        ({"status": 99}, "fetch[7].status: 99 is not a recordable HTTP status (200-499)"),
        (
            {"status": 101},
            "fetch[7].status: 101 is not a recordable HTTP status (200-499) (1xx answers are not "
            "final: none is ever locked)",
        ),
        (
            {"size": 1 << 63},
            f"fetch[7].size: {1 << 63} is over {(1 << 63) - 1} (no file is that large)",
        ),
        (
            {"url": "https://h/\x1b[8m"},
            'fetch[7].url: "https://h/\\u001B[8m" has a space or control character, which no '
            "recorded URL holds (recording percent-encodes them)",
        ),
        (
            {"body-digest": "blake3:00"},
            "fetch[7].body-digest: 'blake3:00' is not a digest: "
            "expected exactly 64 lowercase hex digits after 'blake3:'",
        ),
    ],
)
def test_field_errors_name_the_entry_and_field(change: dict[str, object], message: str) -> None:
    table: dict[str, object] = {**fetch().to_dict(), **change}
    with pytest.raises(LockFieldError) as info:
        Fetch.from_dict(table, index=7)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("value", "spelling"),
    [
        (True, "true"),
        (False, "false"),
        (-7, "-7"),
        (1.5, "1.5"),
        (1e100, "1e+100"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "nan"),
        ("text/html", "'text/html'"),
        ("it's", '"it\'s"'),
        ('a\tb"\\\x00\x7f', '"a\\tb\\"\\\\\\u0000\\u007F"'),
        (datetime.date(1979, 5, 27), "1979-05-27"),
        (datetime.time(7, 32, 0, 999000), "07:32:00.999000"),
        (datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.UTC), "1979-05-27T07:32:00+00:00"),
        ([], "[]"),
        ([1, "a", [True]], "[1, 'a', [true]]"),
        ({}, "{}"),
        ({"a": 1, "b c": {"d": False}}, '{ a = 1, "b c" = { d = false } }'),
        (b"\x00", "b'\\x00'"),  # no TOML spelling: Python's
    ],
)
def test_values_are_spelled_as_toml_spells_them(value: object, spelling: str) -> None:
    assert toml_spelling(value) == spelling


def test_digests_and_total_size_count_each_blob_once() -> None:
    lock = Lock.from_fetches([fetch(), fetch("https://example.org/copy")])
    assert lock.digests() == {D}
    assert lock.total_size() == 4

"""Canonical JSON and the fetch-set digest: RFC 8785 against an independent implementation,
order and text independence, and the worked example in docs/provenance.md recomputed."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import blake3
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchproxy.digest import digest_bytes
from fetchproxy.lock.file import parse_lock, render_lock
from fetchproxy.provenance.entry import Entry, InvalidEntryError, entry_from_fetch
from fetchproxy.provenance.fetchset import (
    TAG,
    ConflictingAnswersError,
    entry_line,
    entry_object,
    fetch_set_bytes,
    fetch_set_digest,
    key_line,
)
from fetchproxy.provenance.jcs import CanonicalJSONError, canonical_json
from tests.provenance.docexamples import doc_block

PROPERTIES = settings(derandomize=True, max_examples=300, deadline=None)

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@PROPERTIES
@given(_json)
def test_canonical_json_is_rfc8785(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)  # type: ignore[arg-type]


def test_canonical_json_orders_members_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3: U+1F600 (a surrogate pair, D83D) sorts before U+FB01
    value = {"\ufb01": 1, "\U0001f600": 2, "a": 3, "\x7f": 4}
    assert canonical_json(value) == '{"a":3,"\x7f":4,"\U0001f600":2,"\ufb01":1}'.encode()
    assert canonical_json(value) == rfc8785.dumps(value)


def test_canonical_json_escapes_only_what_json_must() -> None:
    assert canonical_json('"\\\b\f\n\r\t\x01\x1f/\u2028é') == (
        b'"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\xe2\x80\xa8\xc3\xa9"'
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, r"\$: float has no canonical JSON form"),
        ({"a": [2**53]}, r"\$\.a\[0\]: 9007199254740992 is beyond 2\*\*53-1"),
        ({1: 2}, r"member name 1 is not a string"),
        ({"k": "\ud800"}, r"\$\.k: a string holds a lone surrogate"),
        (b"x", "bytes has no canonical JSON form"),
    ],
)
def test_canonical_json_refuses_what_it_cannot_encode(value: object, message: str) -> None:
    with pytest.raises(CanonicalJSONError, match=message):
        canonical_json(value)


def entry(url: str = "https://example.org/a", body: bytes = b"a", **fields: object) -> Entry:
    values: dict[str, object] = {
        "method": "GET",
        "url": url,
        "status": 200,
        "digest": digest_bytes(body),
        "size": len(body),
    }
    values.update(fields)
    return Entry(**values)  # type: ignore[arg-type]


def test_the_digest_ignores_order_and_repeats() -> None:
    a, b, c = (
        entry("https://example.org/a"),
        entry("https://example.org/b"),
        entry("https://example.org/c", b"c", headers=(("content-type", "text/plain"),)),
    )
    assert fetch_set_digest([a, b, c]) == fetch_set_digest([c, a, b, a, c])
    assert fetch_set_digest([a, b]) != fetch_set_digest([a, b, c])
    assert fetch_set_digest([]) == digest_bytes(TAG)


@pytest.mark.parametrize(
    "change",
    [
        {"method": "HEAD"},
        {"url": "https://example.org/A"},
        {"accept": "application/json"},
        {"git_protocol": "version=2"},
        {"body_digest": digest_bytes(b"body")},
        {"status": 404},
        {"digest": digest_bytes(b"b"), "size": 1},
        {"size": 2},
        {"headers": (("content-type", "text/html"),)},
        {"headers": (("location", "https://example.org/b"),)},
    ],
)
def test_every_part_of_key_and_answer_counts(change: dict[str, Any]) -> None:
    assert fetch_set_digest([entry()]) != fetch_set_digest([entry(**change)])


_any_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_entries = st.builds(
    Entry,
    method=st.sampled_from(["GET", "HEAD", "POST"]),
    url=_any_text.map(lambda text: f"https://example.org/{text}"),
    accept=st.none() | _any_text,
    git_protocol=st.none() | _any_text,
    body_digest=st.none() | st.binary(max_size=4).map(digest_bytes),
    status=st.integers(100, 599),
    digest=st.binary(max_size=4).map(digest_bytes),
    size=st.integers(0, 2**53 - 1),
    headers=st.lists(
        st.tuples(st.sampled_from(["content-type", "location", "content-length"]), _any_text),
        max_size=3,
    ).map(tuple),
)


@PROPERTIES
@given(_entries)
def test_entry_lines_are_rfc8785(value: Entry) -> None:
    # the fast encoder of entry lines writes what the general one and an independent one do
    assert entry_line(value) == canonical_json(entry_object(value))
    assert entry_line(value) == rfc8785.dumps(entry_object(value))  # type: ignore[arg-type]
    assert key_line(value) == canonical_json(value.key_fields())


def test_an_entry_with_a_lone_surrogate_has_no_line() -> None:
    with pytest.raises(CanonicalJSONError, match="lone surrogate"):
        entry_line(entry(headers=(("content-type", "\ud800"),)))


def test_header_order_does_not_count() -> None:
    one = entry(headers=(("content-type", "a"), ("content-disposition", "b")))
    two = entry(headers=(("content-disposition", "b"), ("content-type", "a")))
    assert one == two
    assert entry_line(one) == entry_line(two)


def test_two_answers_to_one_request_are_refused() -> None:
    with pytest.raises(ConflictingAnswersError) as caught:
        fetch_set_digest([entry(), entry(status=404)])
    assert str(caught.value) == (
        "GET https://example.org/a: two different answers to one request (200, "
        f"{digest_bytes(b'a')} and 404, {digest_bytes(b'a')}) — a fetch set holds one answer "
        "per request"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "get"}, "method: 'get' is not an uppercase HTTP method"),
        ({"url": "ftp://x"}, "url: 'ftp://x' is not an http"),
        ({"status": 600}, r"status: 600 is not an HTTP status \(100-599\)"),
        ({"status": True}, "status: True is not an HTTP status"),
        ({"size": -1}, "size: -1 is not a size in bytes"),
        ({"size": 2**53}, "size: 9007199254740992 is not a size in bytes"),
        ({"digest": "sha256:00"}, "digest: 'sha256:00' is not a digest"),
        ({"accept": ""}, "accept: '' is not None or a non-empty string"),
        ({"headers": (("Content-Type", "x"),)}, "headers: 'Content-Type' is not a lowercase"),
        ({"headers": (("a", 1),)}, "headers: the value of a is not a string"),
    ],
)
def test_entries_refuse_values_that_cannot_be_one(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEntryError, match=message):
        entry(**fields)


def test_the_lock_text_does_not_count() -> None:
    lock = parse_lock(doc_block("fetch-set-lock"))
    canonical = [entry_from_fetch(f) for f in lock.fetches]
    # the same entries written by hand: comments, another key order, literal strings
    by_hand = "version = 1\n# hand-written\n" + "\n".join(
        "[[fetch]]\n"
        + "\n".join(
            f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}"
            for k, v in reversed(list(f.to_dict().items()))
        )
        for f in lock.fetches
    )
    relaxed = parse_lock(by_hand)
    assert render_lock(relaxed) == render_lock(lock)
    assert fetch_set_digest(entry_from_fetch(f) for f in relaxed.fetches) == fetch_set_digest(
        canonical
    )


def test_the_worked_example_in_the_docs_recomputes() -> None:
    lock = parse_lock(doc_block("fetch-set-lock"))
    entries = [entry_from_fetch(f) for f in lock.fetches]
    hashed = fetch_set_bytes(entries)
    assert doc_block("fetch-set-bytes").encode() == hashed, hashed.decode()
    digest = fetch_set_digest(entries)
    assert doc_block("fetch-set-digest") == f"{digest}\n", digest
    assert digest == f"blake3:{blake3.blake3(hashed).hexdigest()}"


def test_b3sum_recomputes_the_example() -> None:
    # What docs/provenance.md tells another tool to do; CI installs b3sum.
    b3sum = shutil.which("b3sum")
    if b3sum is None:
        pytest.skip("b3sum is not installed (CI installs it)")
    hashed = doc_block("fetch-set-bytes").encode()
    output = subprocess.run([b3sum, "--no-names"], input=hashed, capture_output=True, check=True)
    assert f"blake3:{output.stdout.decode().strip()}\n" == doc_block("fetch-set-digest")

"""Token answers: stored with the credentials replaced, stable across records, well-formed."""

from __future__ import annotations

import gzip
import json

import brotli  # type: ignore[import-untyped]
import pytest
import zstandard

from fetchproxy.keys.bodies import decoded_body
from fetchproxy.record.tokens import (
    PLACEHOLDER,
    TOKEN_ANSWER_LIMIT,
    may_be_token_answer,
    redacted_token_answer,
)

JWT_1 = "eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiIxIn0.c2lnbmF0dXJlMQ"
JWT_2 = "eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiIyIn0.c2lnbmF0dXJlMg"


def docker_answer(token: str, issued_at: str) -> bytes:
    """What Docker's token protocol answers (the shape docker-registry's clients read)."""
    return json.dumps(
        {"token": token, "access_token": token, "expires_in": 300, "issued_at": issued_at}
    ).encode()


def test_a_docker_token_answer_is_stored_redacted_and_the_same_every_time() -> None:
    first = redacted_token_answer(docker_answer(JWT_1, "2026-01-01T00:00:00Z"), None)
    second = redacted_token_answer(docker_answer(JWT_2, "2026-01-01T00:05:00Z"), None)
    assert first == second
    assert first is not None
    assert json.loads(first) == {
        "token": PLACEHOLDER,
        "access_token": PLACEHOLDER,
        "expires_in": 300,  # kept: a client computes the expiry from it
    }  # issued_at dropped: it changes on every fetch, and a fixed past time means "expired"
    assert first.isascii()
    assert b"\n" not in first


def test_oauth_and_oidc_answers_and_nested_tokens_are_redacted() -> None:
    oauth = {
        "access_token": "gho_secret",
        "token_type": "bearer",
        "refresh_token": "ghr_secret",
        "id_token": JWT_1,
        "scope": "repo",
    }
    stored = redacted_token_answer(json.dumps(oauth).encode(), None)
    assert stored is not None
    assert json.loads(stored) == {
        "access_token": PLACEHOLDER,
        "token_type": "bearer",
        "refresh_token": PLACEHOLDER,
        "id_token": PLACEHOLDER,
        "scope": "repo",
    }
    nested = json.dumps({"data": [{"token": "npm_secret", "name": "ci"}]}).encode()
    assert redacted_token_answer(nested, None) == (
        b'{"data":[{"token":"fetchproxy-redacted-token","name":"ci"}]}'
    )


def test_an_encoded_token_answer_is_stored_decoded_and_redacted() -> None:
    stored = redacted_token_answer(gzip.compress(docker_answer(JWT_1, "x")), "gzip")
    assert stored is not None
    assert JWT_1.encode() not in stored
    assert json.loads(stored)["token"] == PLACEHOLDER


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "fp-hello", "versions": {}}',  # a packument: no credential
        b'{"token": 12}',  # not a string: no credential
        b'["token", "access_token"]',
        b"token=abc",
        b'{"token": "abc"',  # not JSON
        b"\xff\xfe{",
        b"",
        b"{" * 100_000 + b"}" * 100_000,  # nesting past the parser's limit
    ],
)
def test_an_answer_without_a_credential_is_stored_as_it_came(body: bytes) -> None:
    assert redacted_token_answer(body, None) is None


def test_only_small_bodies_are_held_for_the_check() -> None:
    assert may_be_token_answer("GET", None)
    assert may_be_token_answer("GET", str(TOKEN_ANSWER_LIMIT))
    assert not may_be_token_answer("GET", str(TOKEN_ANSWER_LIMIT + 1))
    assert not may_be_token_answer("GET", "12, 12")
    assert not may_be_token_answer("HEAD", "100")
    big = json.dumps({"token": "x", "pad": "a" * TOKEN_ANSWER_LIMIT}).encode()
    assert redacted_token_answer(big, None) is None


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_compressed_answer_is_decoded_no_further_than_a_token_answer_may_be(coding: str) -> None:
    """Record looks at every small answer for a token: a 256 KiB body that would inflate to
    64 MiB is given up at the token answer's limit, not decoded whole first."""
    big = b'{"token": "' + b"a" * (8 * TOKEN_ANSWER_LIMIT) + b'"}'
    packed = {
        "gzip": gzip.compress,
        "br": brotli.compress,
        "zstd": zstandard.ZstdCompressor().compress,
    }[coding](big)
    assert decoded_body(packed, coding, most=TOKEN_ANSWER_LIMIT) == packed  # as it came
    assert decoded_body(packed, coding) == big  # the default limit is far above it
    assert redacted_token_answer(packed, coding) is None

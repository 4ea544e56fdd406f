"""The ``WWW-Authenticate`` challenge ``store fetch`` answers: RFC 9110's grammar with hostile
values refused, and the realm held to the lock's https origins (pure)."""

from __future__ import annotations

import pytest

from fetchproxy.sync.challenge import (
    BearerChallenge,
    Challenge,
    ChallengeError,
    bearer_challenge,
    parse_challenges,
    token_url,
)

DOCKER = (
    'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
    'scope="repository:library/alpine:pull"'
)
AUTH = {("auth.docker.io", 443), ("registry-1.docker.io", 443)}


# -------------------------------------------------------------------------------------- parse


def test_docker_hubs_challenge() -> None:
    assert bearer_challenge(DOCKER) == BearerChallenge(
        realm="https://auth.docker.io/token",
        service="registry.docker.io",
        scope=("repository:library/alpine:pull",),
    )


def test_the_grammar_commas_and_quotes_inside_quoted_strings_are_values() -> None:
    assert parse_challenges(
        'Basic realm="a, b", BEARER Realm = "https://r/t" , scope="repository:x:pull,push '
        'repository:y:pull",error="insufficient_scope", Newauth abc==, ,'
    ) == [
        Challenge(scheme="basic", params=(("realm", "a, b"),)),
        Challenge(
            scheme="bearer",
            params=(
                ("realm", "https://r/t"),
                ("scope", "repository:x:pull,push repository:y:pull"),
                ("error", "insufficient_scope"),
            ),
        ),
        Challenge(scheme="newauth", token68="abc=="),
    ]
    found = bearer_challenge('Basic realm="x",Bearer realm="https://r/t",scope="a:b:c d:e:f"')
    assert found is not None
    assert found.scope == ("a:b:c", "d:e:f")  # scopes are separated by spaces
    assert found.service is None
    # an escaped quote does not end the string: no `service` parameter is smuggled in
    smuggled = bearer_challenge(r'Bearer realm="https://r/t\",service=\"evil"')
    assert smuggled == BearerChallenge(realm='https://r/t",service="evil', service=None, scope=())


def test_a_name_after_a_comma_without_a_value_is_the_next_challenge() -> None:
    assert parse_challenges('Bearer realm="https://r/t",service') == [
        Challenge(scheme="bearer", params=(("realm", "https://r/t"),)),
        Challenge(scheme="service"),
    ]


def test_no_bearer_challenge_is_none() -> None:
    assert bearer_challenge('Basic realm="token"') is None
    assert bearer_challenge("") is None
    assert bearer_challenge("Negotiate") is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('Bearer realm="https://r/t', "a quoted string that does not end"),
        ('Bearer realm="https://r/t\\', "a backslash in a quoted string before no character"),
        ('Bearer realm="https://r/t\r\nX-Evil: 1"', "a control character in a quoted string"),
        ('Bearer realm="https://r/\x00t"', "a control character in a quoted string"),
        ('Bearer realm="https://r/t"x', "a parameter followed by something other than a comma"),
        ('Bearer realm=""x, service=y', "a parameter followed by something other than a comma"),
        ('Bearer realm="https://a/t",realm="https://b/t"', "the 'realm' parameter is given twice"),
        ('Bearer realm="https://a/t",REALM="https://b/t"', "the 'realm' parameter is given twice"),
        ('Bearer realm="https://r/t" service="x"', "a parameter followed by something other"),
        ('Bearer realm="https://r/t", service ="x', "a quoted string that does not end"),
        ("Bearer realm=,service=x", "a challenge followed by something other than a comma"),
        ("Bearer realm=?", "the 'realm' parameter without a value"),
        ("Bearer =x", "a parameter without a name"),
        ("Bearer realm=x,?=y", "a challenge that does not start with a scheme name"),
        ("Bearer realm=https://r/t", "a parameter followed by something other than a comma"),
        ('Bearer service="s"', "a Bearer challenge without a realm"),
        ('Bearer realm=""', "a Bearer challenge without a realm"),
        ("Bearer abc==", "a Bearer challenge without a realm"),
        ("Bearer", "a Bearer challenge without a realm"),
        ('Bearer realm="https://a/t", Bearer realm="https://b/t"', "more than one Bearer"),
        ('"Bearer" realm="https://r/t"', "a challenge that does not start with a scheme name"),
        ('Bearer realm="https://r/t", =x', "a challenge that does not start with a scheme name"),
        ('Bearer realm="https://r/\xe9"', "the 'realm' parameter holds characters a URL cannot"),
        ('Bearer realm="https://r/t\t"', "the 'realm' parameter holds characters a URL cannot"),
    ],
)
def test_hostile_challenges_are_refused(value: str, why: str) -> None:
    with pytest.raises(ChallengeError) as caught:
        bearer_challenge(value)
    assert str(caught.value).startswith(why)


# -------------------------------------------------------------------------------------- realm


def challenge(realm: str, service: str | None = "svc", *scope: str) -> BearerChallenge:
    return BearerChallenge(realm=realm, service=service, scope=scope)


def test_the_token_url_is_the_realm_with_the_scopes_and_the_service() -> None:
    found = bearer_challenge(DOCKER)
    assert found is not None
    assert token_url(found, AUTH) == (
        "https://auth.docker.io/token?scope=repository%3Alibrary%2Falpine%3Apull"
        "&service=registry.docker.io"
    )
    two = challenge("https://AUTH.docker.io:443/token?v=2", "svc", "a:b:pull", "c:d:pull")
    assert token_url(two, AUTH) == (
        "https://auth.docker.io/token?v=2&scope=a%3Ab%3Apull&scope=c%3Ad%3Apull&service=svc"
    )
    assert token_url(challenge("https://auth.docker.io/token", None), AUTH) == (
        "https://auth.docker.io/token"
    )


@pytest.mark.parametrize(
    ("realm", "why"),
    [
        ("http://auth.docker.io/token", "the realm http://auth.docker.io/token is not an https"),
        ("HTTP://auth.docker.io/token", "the realm HTTP://auth.docker.io/token is not an https"),
        ("file:///etc/passwd", "the realm file:///etc/passwd is not an https URL"),
        ("/token", "the realm /token is not an https URL"),
        (
            "https://evil.example/token",
            "the realm https://evil.example/token is on evil.example:443,"
            " which is not an https origin the lock names",
        ),
        (
            "https://auth.docker.io:8443/token",
            "the realm https://auth.docker.io:8443/token is on auth.docker.io:8443, which is not",
        ),
        ("https://127.0.0.1/token", "the realm https://127.0.0.1/token is on 127.0.0.1:443"),
        ("https://169.254.169.254/latest", "the realm https://169.254.169.254/latest is on "),
        ("https://auth.docker.io.evil.example/t", "the realm https://auth.docker.io.evil.example"),
        (
            "https://user:pw@auth.docker.io/token",
            "the realm https://auth.docker.io/token holds userinfo",
        ),
        ("https://evil.example@auth.docker.io/t", "the realm https://auth.docker.io/t holds user"),
        ("https://auth.docker.io/token#x", "the realm https://auth.docker.io/token holds a frag"),
        ("https://auth.docker.io:99999/t", "the realm https://auth.docker.io:99999/t: port"),
        ("https:///token", "the realm https:///token: no host"),
    ],
)
def test_a_realm_store_fetch_does_not_ask(realm: str, why: str) -> None:
    with pytest.raises(ChallengeError) as caught:
        token_url(challenge(realm), AUTH)
    assert str(caught.value).startswith(why)
    assert "pw" not in str(caught.value)

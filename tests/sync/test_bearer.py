"""``store fetch``'s tokens for a Bearer challenge, asked of a live HTTPS origin: once per
(realm, service, scope) until they expire, anonymous, a refusal said once, never a realm the
lock does not name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from fetchproxy.sync.bearer import BearerTokens, TokenError
from fetchproxy.sync.challenge import BearerChallenge, ChallengeError
from fetchproxy.sync.upstream import (
    OriginAnswer,
    OriginClient,
    OriginUnreachableError,
    upstream_context,
)
from tests.sync.origins import HOST, FileOrigin

AUTH = {("auth.docker.io", 443), ("registry-1.docker.io", 443)}


def challenge(realm: str, service: str | None = "svc", *scope: str) -> BearerChallenge:
    return BearerChallenge(realm=realm, service=service, scope=scope)


# ------------------------------------------------------------------------------------- tokens


@pytest.fixture
def origin(tmp_path: Path) -> FileOrigin:
    answer = {"token": "eyJ0.eyJ1.c2ln", "access_token": "eyJ0.eyJ1.c2ln", "expires_in": 300}
    files = {
        "/token": json.dumps(answer).encode(),
        "/oauth": json.dumps({"access_token": "opaque-token_1~", "issued_at": "x"}).encode(),
        "/html": b"<html>login</html>",
        "/header": json.dumps({"token": "abc\r\nX-Evil: 1"}).encode(),
    }
    return FileOrigin(files, tls=True, pki=tmp_path / "pki")


def test_tokens_are_asked_once_per_realm_service_and_scope_until_they_expire(
    origin: FileOrigin,
) -> None:
    assert origin.ca_cert is not None
    client = OriginClient(upstream_context([origin.ca_cert]))
    now = [1000.0]
    with origin:
        tokens = BearerTokens(client, {(HOST, origin.port)}, user_agent="ua", clock=lambda: now[0])
        pull = challenge(origin.url("/token"), "svc", "repository:app:pull")
        assert tokens.authorization(pull) == "Bearer eyJ0.eyJ1.c2ln"
        assert tokens.authorization(pull) == "Bearer eyJ0.eyJ1.c2ln"
        assert len(origin.seen) == 1
        tokens.authorization(challenge(origin.url("/token"), "svc", "repository:other:pull"))
        assert len(origin.seen) == 2
        now[0] += 289  # 300 s less 10: still good
        tokens.authorization(pull)
        assert len(origin.seen) == 2
        now[0] += 1
        tokens.authorization(pull)
        assert len(origin.seen) == 3
        # OAuth's access_token, no expires_in: 60 s
        assert tokens.authorization(challenge(origin.url("/oauth"))) == "Bearer opaque-token_1~"
        seen = origin.seen
    client.close()
    assert [s.path for s in seen] == [
        "/token?scope=repository%3Aapp%3Apull&service=svc",
        "/token?scope=repository%3Aother%3Apull&service=svc",
        "/token?scope=repository%3Aapp%3Apull&service=svc",
        "/oauth?service=svc",
    ]
    for request in seen:  # anonymous
        assert not {"authorization", "cookie"} & set(request.headers)


def test_a_realm_that_gives_no_token_is_said_once(origin: FileOrigin) -> None:
    assert origin.ca_cert is not None
    client = OriginClient(upstream_context([origin.ca_cert]))
    with origin:
        tokens = BearerTokens(client, {(HOST, origin.port)}, user_agent="ua")
        for path, why in [
            ("/missing", "refused (HTTP 404) to give an anonymous token"),
            ("/html", "answered something other than a token answer"),
            ("/header", "answered without a token fit for a header"),
        ]:
            for _ in range(2):
                with pytest.raises(TokenError) as caught:
                    tokens.authorization(challenge(origin.url(path)))
                assert str(caught.value) == f"the token server {origin.url(path)} {why}"
        assert len(origin.seen) == 3  # each asked once: a refusal is remembered for the run
        with pytest.raises(ChallengeError):  # not an origin the lock names: never asked
            BearerTokens(client, AUTH, user_agent="ua").authorization(
                challenge(origin.url("/token"))
            )
        assert len(origin.seen) == 3
    client.close()


class _FirstCallBreaks(OriginClient):
    """The real client, whose first request meets a broken network (a timeout, a reset)."""

    broken = False

    def get(self, url: str, headers: Mapping[str, str]) -> OriginAnswer:
        if not self.broken:
            self.broken = True
            raise OriginUnreachableError("timed out")
        return super().get(url, headers)


def test_a_network_error_on_the_way_to_the_realm_is_not_remembered(origin: FileOrigin) -> None:
    """A refusal holds for the run; a timeout may pass, so the next entry asks again."""
    assert origin.ca_cert is not None
    client = _FirstCallBreaks(upstream_context([origin.ca_cert]))
    with origin:
        tokens = BearerTokens(client, {(HOST, origin.port)}, user_agent="ua")
        pull = challenge(origin.url("/token"), "svc", "repository:app:pull")
        with pytest.raises(TokenError, match="timed out") as caught:
            tokens.authorization(pull)
        assert not caught.value.lasting
        assert tokens.authorization(pull) == "Bearer eyJ0.eyJ1.c2ln"
        assert len(origin.seen) == 1
    client.close()

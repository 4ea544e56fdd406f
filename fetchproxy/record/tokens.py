"""Token answers: what record stores in place of an answer that carries a credential.

A token endpoint (the ``realm`` of a ``WWW-Authenticate: Bearer`` challenge, an OAuth 2 token
URL, ``docker login``) answers every request with a fresh credential. Stored as received, the
credential would sit in the store, and every record would show the entry's content drifting.
So record gives the client the real answer (the registry checks the token) and stores this one
instead: the same JSON with every ``token``, ``access_token``, ``refresh_token`` and ``id_token``
string replaced by :data:`PLACEHOLDER`, ``issued_at`` dropped (it changes on every fetch, and a
fixed past time makes clients fetch a new token at once), everything else — ``expires_in`` as
the integer the origin sent — kept. Replay ignores ``Authorization``, so the placeholder is as
good as the token there, and the entry says ``redacted = "token"`` in the lock.

Which answers: any answer whose body is a JSON object of at most :data:`TOKEN_ANSWER_LIMIT`
bytes with one of those fields holding a string, at any depth — whatever its URL, status or
content type. Not the realm of a challenge seen in the same run: a client may ask a token
endpoint it knows without being challenged (``docker login``, OAuth clients, a ``--keep`` run
that answered the challenge from the lock), and a rule that misses one stores a credential;
one that matches a JSON document that is not a credential only stores it redacted, which the
lock shows (docs/lock-format.md, "Token answers").

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
from typing import Final

from fetchproxy.keys.bodies import decoded_body

TOKEN_FIELDS: Final = frozenset({"token", "access_token", "refresh_token", "id_token"})
"""JSON members whose string values are credentials (RFC 6749 5.1, OpenID Connect, Docker)."""
DROPPED_FIELDS: Final = frozenset({"issued_at"})
"""JSON members left out of a stored token answer: they change on every fetch."""
PLACEHOLDER: Final = "fetchproxy-redacted-token"
"""What a stored token answer holds in place of each credential: ASCII, safe in a header."""
TOKEN_ANSWER_LIMIT: Final = 256 * 1024
"""The largest body record examines for a token; token answers are a few KiB."""


def may_be_token_answer(method: str, content_length: str | None) -> bool:
    """Whether record must hold an answer's body (in memory, off the store) until it knows
    whether it carries a token: a body that can be at most :data:`TOKEN_ANSWER_LIMIT` bytes
    (an answer of unknown length is held until it is known to be longer)."""
    if method == "HEAD":
        return False
    if content_length is None:
        return True
    return content_length.isdigit() and int(content_length) <= TOKEN_ANSWER_LIMIT


def redacted_token_answer(body: bytes, content_encoding: str | None) -> bytes | None:
    """The body to store for an answer that carries a token (decoded from its
    ``content_encoding``: the stored answer has none); None when it carries none."""
    data = decoded_body(body, content_encoding, most=TOKEN_ANSWER_LIMIT)
    if len(data) > TOKEN_ANSWER_LIMIT or not data.lstrip(b" \t\r\n").startswith(b"{"):
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError)
        return None
    redacted, found = _redacted(document)
    if not found:
        return None
    return json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode()


def _redacted(value: object) -> tuple[object, bool]:
    """``value`` with every credential replaced and volatile members dropped; whether it held
    a credential."""
    if isinstance(value, list):
        items = [_redacted(item) for item in value]
        return [item for item, _ in items], any(found for _, found in items)
    if not isinstance(value, dict):
        return value, False
    out: dict[str, object] = {}
    found = False
    for name, member in value.items():
        if name in DROPPED_FIELDS:
            continue
        if name in TOKEN_FIELDS and isinstance(member, str):
            out[name] = PLACEHOLDER
            found = True
            continue
        out[name], inner = _redacted(member)
        found = found or inner
    return out, found

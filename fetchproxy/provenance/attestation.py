"""Checking an attestation file against a lock: what ``fetchproxy attest verify`` decides.

Pure. :func:`check_envelope` takes a DSSE envelope's bytes and a public key; :func:`check_bare`
a statement written without a key. Both tell apart input that is not what it claims to be
(:class:`~fetchproxy.provenance.dsse.EnvelopeError` or
:class:`~fetchproxy.provenance.statement.StatementError`: bad input) from an attestation that
reads well but does not hold (an :class:`AttestationCheck` with problems, one sentence each).
Nothing in a payload is looked at before its signature verifies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from fetchproxy.provenance.dsse import (
    EnvelopeError,
    PublicKey,
    key_id,
    parse_envelope,
    verify,
)
from fetchproxy.provenance.entry import Entry
from fetchproxy.provenance.fetchset import ConflictingAnswersError
from fetchproxy.provenance.statement import (
    FetchSetStatement,
    LockReference,
    StatementError,
    parse_statement,
    statement_problems,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttestationCheck:
    """What checking one attestation found: the statement (None when it could not be read as
    one after its signature verified, or the signature did not), the key that verified it,
    and every problem."""

    statement: FetchSetStatement | None
    keyid: str | None
    problems: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return not self.problems


def _decode(payload: bytes) -> object:
    try:
        return json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise StatementError("the statement is not JSON") from None


def _looks_like_envelope(document: object) -> bool:
    return isinstance(document, dict) and "payloadType" in document and "signatures" in document


def check_envelope(
    data: bytes,
    key: PublicKey,
    *,
    lock_entries: Iterable[Entry],
    lock: LockReference,
    exact: bool = False,
) -> AttestationCheck:
    """Check the DSSE envelope ``data``: a signature verifies with ``key``, it holds an in-toto
    statement of fetchproxy's predicate, and that statement describes a run of ``lock``.

    Raises :class:`EnvelopeError` when ``data`` is not an envelope at all. ``exact``: also
    require the run to have been exact and complete.
    """
    try:
        envelope = parse_envelope(data)
    except EnvelopeError:
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise EnvelopeError("not a DSSE envelope: the file is not JSON") from None
        if isinstance(document, dict) and "_type" in document:
            raise EnvelopeError(
                "a bare statement, not a signed envelope — nothing vouches for it but its match "
                "with the lock: check that with --unsigned, or sign it (fetchproxy attest sign)"
            ) from None
        raise
    try:
        payload = verify(envelope, key)
    except EnvelopeError as exc:
        return AttestationCheck(statement=None, keyid=None, problems=(str(exc),))
    try:
        statement = parse_statement(_decode(payload))
    except StatementError as exc:
        return AttestationCheck(
            statement=None,
            keyid=key_id(key),
            problems=(f"the signed payload is not a fetch-set statement: {exc}",),
        )
    problems = _problems(statement, lock_entries, lock, exact=exact)
    return AttestationCheck(statement=statement, keyid=key_id(key), problems=problems)


def check_bare(
    data: bytes, *, lock_entries: Iterable[Entry], lock: LockReference, exact: bool = False
) -> AttestationCheck:
    """Check the unsigned statement ``data`` against ``lock``; :class:`StatementError` when it
    is not a fetch-set statement (and for an envelope: that one is checked with its key)."""
    document = _decode(data)
    if _looks_like_envelope(document):
        raise StatementError("a signed DSSE envelope: verify its signature with --key PUBLIC-KEY")
    statement = parse_statement(document)
    problems = _problems(statement, lock_entries, lock, exact=exact)
    return AttestationCheck(statement=statement, keyid=None, problems=problems)


def _problems(
    statement: FetchSetStatement,
    lock_entries: Iterable[Entry],
    lock: LockReference,
    *,
    exact: bool,
) -> tuple[str, ...]:
    try:
        problems = statement_problems(statement, lock_entries=lock_entries, lock=lock)
    except ConflictingAnswersError as exc:
        return (f"the statement lists two answers to one request: {exc}",)
    if exact and not statement.run.exact:
        problems.append(
            f"the run was not exact ({statement.run.refused} refused; "
            f"{len(statement.entries)} entries served) and --exact asks for it"
        )
    if exact and not statement.complete:
        problems.append(
            f"the build ran in sandbox {statement.run.sandbox!r}, with other routes than the "
            "proxy: what it fetched may not all be here, and --exact asks for a complete set"
        )
    return tuple(problems)

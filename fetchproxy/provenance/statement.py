"""The in-toto Statement a replay writes: what the build used, and the check against a lock.

The predicate, ``https://fetchproxy.dev/fetch-set/v1`` (docs/provenance.md says why it is not
SLSA Provenance itself), holds every served entry as a SLSA ``resolvedDependencies``
ResourceDescriptor (``uri``, ``digest: {"blake3": …}``, the rest in ``annotations``), so a build
platform can copy them into its own SLSA provenance unchanged, and beside them what SLSA has no
field for: the fetch-set digest, whether the set is complete (the sandbox left the build no
other route) and exact (it used the whole lock, nothing was refused), and the lock it came from.

Pure: :func:`fetch_set_statement` builds the JSON-compatible dict, :func:`serialize_statement`
gives its canonical bytes (RFC 8785), :func:`parse_statement` reads one back (refusing anything
malformed with the JSON path of the problem) and :func:`statement_problems` compares it with a
lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import blake3

from fetchproxy.digest import Digest, from_hex, hex_of
from fetchproxy.errors import FetchproxyError
from fetchproxy.provenance.entry import Entry, InvalidEntryError
from fetchproxy.provenance.fetchset import entry_line, fetch_set_digest, fetch_set_lines
from fetchproxy.provenance.jcs import canonical_json

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://fetchproxy.dev/fetch-set/v1"
SANDBOXED: Final = frozenset({"root", "user"})
"""Sandbox kinds whose only route is the proxy: what they served is all the network gave."""


class StatementError(FetchproxyError, ValueError):
    """A statement that is not a fetch-set statement; the message names the JSON path."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LockReference:
    """A lock file by its path (as the user named it) and the digests of its bytes."""

    path: str
    blake3: str
    sha256: str

    @classmethod
    def of(cls, path: str, data: bytes) -> LockReference:
        return cls(
            path=path,
            blake3=blake3.blake3(data).hexdigest(),
            sha256=hashlib.sha256(data).hexdigest(),
        )

    def descriptor(self) -> dict[str, object]:
        return {"name": self.path, "digest": {"blake3": self.blake3, "sha256": self.sha256}}


@dataclass(frozen=True, kw_only=True, slots=True)
class Subject:
    """What the statement is about: a name and its digests (``{"sha256": hex, ...}``)."""

    name: str
    digest: tuple[tuple[str, str], ...]

    def descriptor(self) -> dict[str, object]:
        return {"name": self.name, "digest": dict(self.digest)}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFacts:
    """What the replay knows about itself."""

    exact: bool
    """``--exact`` held: nothing was refused and every lock entry was used."""
    refused: int
    sandbox: str
    """``root``, ``user`` or ``none`` (no sandbox: other routes may have existed)."""
    fetchproxy_version: str

    @property
    def complete(self) -> bool:
        return self.sandbox in SANDBOXED


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchSetStatement:
    """A statement read back by :func:`parse_statement`."""

    subjects: tuple[Subject, ...]
    entries: tuple[Entry, ...]
    fetch_set_digest: Digest
    lock: LockReference
    run: RunFacts
    complete: bool


# ------------------------------------------------------------------------------------- writing


def resource_descriptor(entry: Entry) -> dict[str, object]:
    """One served entry as a SLSA ResourceDescriptor (usable as a ``resolvedDependencies``
    element as it is)."""
    annotations: dict[str, object] = {"method": entry.method, "status": entry.status}
    if entry.accept is not None:
        annotations["accept"] = entry.accept
    if entry.git_protocol is not None:
        annotations["gitProtocol"] = entry.git_protocol
    if entry.body_digest is not None:
        annotations["bodyDigest"] = {"blake3": hex_of(entry.body_digest)}
    annotations["size"] = entry.size
    annotations["headers"] = [[name, value] for name, value in entry.headers]
    return {
        "uri": entry.url,
        "digest": {"blake3": hex_of(entry.digest)},
        "annotations": annotations,
    }


def fetch_set_statement(
    entries: Iterable[Entry],
    *,
    lock: LockReference,
    run: RunFacts,
    subjects: Sequence[Subject] = (),
) -> dict[str, object]:
    """The statement that a build run under ``run`` used exactly ``entries`` from ``lock``.

    ``subjects`` are the build's outputs if the caller knows them; without any the subject is
    the lock itself. Raises ``ConflictingAnswersError`` for two answers to one request.
    """
    served = _sorted_entries(entries)
    digest = fetch_set_digest(served)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.descriptor() for s in subjects] or [lock.descriptor()],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "fetchSet": {"digest": {"blake3": hex_of(digest)}, "entries": len(served)},
            "complete": run.complete,
            "exact": run.exact,
            "refused": run.refused,
            "sandbox": run.sandbox,
            "lock": lock.descriptor(),
            "producer": {"name": "fetchproxy", "version": run.fetchproxy_version},
            "resolvedDependencies": [resource_descriptor(e) for e in served],
        },
    }


def _sorted_entries(entries: Iterable[Entry]) -> list[Entry]:
    """The distinct entries in fetch-set order (that of their canonical lines)."""
    distinct = {entry_line(e): e for e in entries}
    return [distinct[line] for line in fetch_set_lines(distinct.values())]


def serialize_statement(statement: Mapping[str, object]) -> bytes:
    """The canonical bytes of a statement (RFC 8785): what is signed and written."""
    return canonical_json(statement)


# ------------------------------------------------------------------------------------- reading


def parse_statement(document: object) -> FetchSetStatement:
    """Read a fetch-set statement (JSON already decoded); :class:`StatementError` otherwise."""
    top = _object(document, "$")
    if top.get("_type") != STATEMENT_TYPE:
        raise StatementError(f"$._type: not {STATEMENT_TYPE!r}: this is not an in-toto statement")
    if top.get("predicateType") != PREDICATE_TYPE:
        raise StatementError(
            f"$.predicateType: {top.get('predicateType')!r} is not {PREDICATE_TYPE!r}"
        )
    subjects = tuple(
        Subject(name=_string(s, "name", f"$.subject[{i}]"), digest=_digests(s, f"$.subject[{i}]"))
        for i, s in enumerate(_objects(top.get("subject"), "$.subject"))
    )
    if not subjects:
        raise StatementError("$.subject: a statement has at least one subject")
    predicate = _object(top.get("predicate"), "$.predicate")
    fetch_set = _object(predicate.get("fetchSet"), "$.predicate.fetchSet")
    stated = _blake3(
        _object(fetch_set.get("digest"), "$.predicate.fetchSet.digest"),
        "$.predicate.fetchSet.digest",
    )
    lock = _object(predicate.get("lock"), "$.predicate.lock")
    lock_digest = dict(_digests(lock, "$.predicate.lock"))
    if "blake3" not in lock_digest or "sha256" not in lock_digest:
        raise StatementError("$.predicate.lock.digest: blake3 and sha256 are both required")
    producer = _object(predicate.get("producer"), "$.predicate.producer")
    run = RunFacts(
        exact=_boolean(predicate, "exact", "$.predicate"),
        refused=_integer(predicate, "refused", "$.predicate"),
        sandbox=_string(predicate, "sandbox", "$.predicate"),
        fetchproxy_version=_string(producer, "version", "$.predicate.producer"),
    )
    path = "$.predicate.resolvedDependencies"
    entries = tuple(
        _entry(d, f"{path}[{i}]")
        for i, d in enumerate(_objects(predicate.get("resolvedDependencies"), path))
    )
    return FetchSetStatement(
        subjects=subjects,
        entries=entries,
        fetch_set_digest=stated,
        lock=LockReference(
            path=_string(lock, "name", "$.predicate.lock"),
            blake3=lock_digest["blake3"],
            sha256=lock_digest["sha256"],
        ),
        run=run,
        complete=_boolean(predicate, "complete", "$.predicate"),
    )


def _entry(descriptor: Mapping[str, object], where: str) -> Entry:
    annotations = _object(descriptor.get("annotations"), f"{where}.annotations")
    headers = []
    for i, pair in enumerate(_list(annotations.get("headers"), f"{where}.annotations.headers")):
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            raise StatementError(f"{where}.annotations.headers[{i}]: not a [name, value] pair")
        headers.append((pair[0], pair[1]))
    body = annotations.get("bodyDigest")
    try:
        return Entry(
            method=_string(annotations, "method", f"{where}.annotations"),
            url=_string(descriptor, "uri", where),
            accept=_optional_string(annotations, "accept", f"{where}.annotations"),
            git_protocol=_optional_string(annotations, "gitProtocol", f"{where}.annotations"),
            body_digest=None
            if body is None
            else _blake3(_object(body, f"{where}.annotations.bodyDigest"), f"{where}.bodyDigest"),
            status=_integer(annotations, "status", f"{where}.annotations"),
            digest=_blake3(_object(descriptor.get("digest"), f"{where}.digest"), f"{where}.digest"),
            size=_integer(annotations, "size", f"{where}.annotations"),
            headers=tuple(headers),
        )
    except InvalidEntryError as exc:
        raise StatementError(f"{where}: {exc}") from None


def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise StatementError(f"{where}: an object is expected")
    return value


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list):
        raise StatementError(f"{where}: a list is expected")
    return value


def _objects(value: object, where: str) -> list[Mapping[str, object]]:
    return [_object(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where))]


def _string(value: Mapping[str, object], name: str, where: str) -> str:
    found = value.get(name)
    if not isinstance(found, str):
        raise StatementError(f"{where}.{name}: a string is expected")
    return found


def _optional_string(value: Mapping[str, object], name: str, where: str) -> str | None:
    return None if value.get(name) is None else _string(value, name, where)


def _integer(value: Mapping[str, object], name: str, where: str) -> int:
    found = value.get(name)
    if type(found) is not int:
        raise StatementError(f"{where}.{name}: an integer is expected")
    return found


def _boolean(value: Mapping[str, object], name: str, where: str) -> bool:
    found = value.get(name)
    if not isinstance(found, bool):
        raise StatementError(f"{where}.{name}: true or false is expected")
    return found


def _digests(value: Mapping[str, object], where: str) -> tuple[tuple[str, str], ...]:
    digest = _object(value.get("digest"), f"{where}.digest")
    pairs = []
    for algorithm, hex_value in digest.items():
        if not isinstance(hex_value, str):
            raise StatementError(f"{where}.digest.{algorithm}: a string is expected")
        pairs.append((algorithm, hex_value))
    if not pairs:
        raise StatementError(f"{where}.digest: at least one digest is expected")
    return tuple(pairs)


def _blake3(digest: Mapping[str, object], where: str) -> Digest:
    value = digest.get("blake3")
    try:
        if isinstance(value, str):
            return from_hex(value)
    except ValueError:
        pass
    raise StatementError(f"{where}.blake3: 64 lowercase hex digits are expected")


# ------------------------------------------------------------------------------------ checking


def statement_problems(
    statement: FetchSetStatement, *, lock_entries: Iterable[Entry], lock: LockReference
) -> list[str]:
    """Why ``statement`` does not describe a run of ``lock`` (whose entries are
    ``lock_entries``): one sentence per problem; empty when it does.

    Checked: the fetch-set digest recomputes from the statement's entries; the lock's bytes are
    the ones the statement names; every entry is in the lock with the same answer; and an exact
    run used the lock's every entry.
    """
    problems = []
    recomputed = fetch_set_digest(statement.entries)
    if recomputed != statement.fetch_set_digest:
        problems.append(
            f"the fetch-set digest {statement.fetch_set_digest} does not match the statement's "
            f"own entries ({recomputed}): the statement was altered"
        )
    if (statement.lock.blake3, statement.lock.sha256) != (lock.blake3, lock.sha256):
        problems.append(
            f"the statement names a lock with blake3 {statement.lock.blake3}; {lock.path} has "
            f"{lock.blake3} — the lock changed since the run, or it is another lock"
        )
    in_lock = {canonical_json(e.key_fields()): e for e in lock_entries}
    for entry in statement.entries:
        recorded = in_lock.get(canonical_json(entry.key_fields()))
        request = f"{entry.method} {entry.url}"
        if recorded is None:
            problems.append(f"{request}: served, but the lock has no such entry")
        elif (recorded.status, recorded.digest, recorded.size) == (
            entry.status,
            entry.digest,
            entry.size,
        ) and recorded != entry:
            problems.append(
                f"{request}: served with the headers {_headers_text(entry)}, but the lock "
                f"answers with {_headers_text(recorded)}"
            )
        elif recorded != entry:
            problems.append(
                f"{request}: served {entry.status} {entry.digest}, but the lock answers "
                f"{recorded.status} {recorded.digest}"
                + ("" if recorded.headers == entry.headers else " (and other headers)")
            )
    if statement.run.exact:
        unused = len(set(in_lock) - {canonical_json(e.key_fields()) for e in statement.entries})
        if unused:
            problems.append(
                f"the run is called exact, but {unused} of the lock's entries are not among "
                "those served"
            )
    return problems


def _headers_text(entry: Entry) -> str:
    """``content-type: text/plain; location: …``, or ``none``."""
    return "; ".join(f"{name}: {value}" for name, value in entry.headers) or "none"

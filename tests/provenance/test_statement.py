"""The replay's in-toto statement: its shape (checked with the in-toto attestation framework's
own bindings), canonical bytes, reading it back, and the check against a lock."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from fetchproxy.digest import digest_bytes, hex_of
from fetchproxy.lock.file import parse_lock, render_lock
from fetchproxy.provenance.entry import Entry
from fetchproxy.provenance.fetchset import fetch_set_digest
from fetchproxy.provenance.jcs import canonical_json
from fetchproxy.provenance.statement import (
    PREDICATE_TYPE,
    LockReference,
    RunFacts,
    StatementError,
    Subject,
    fetch_set_statement,
    parse_statement,
    serialize_statement,
    statement_problems,
)
from tests.provenance.docexamples import RUN as DOCRUN
from tests.provenance.docexamples import doc_block, example_lock

RUN = DOCRUN


def example() -> tuple[list[Entry], LockReference]:
    return example_lock()


def test_the_statement_in_the_docs_is_what_the_example_lock_gives() -> None:
    entries, lock = example()
    statement = fetch_set_statement(entries, lock=lock, run=RUN)
    shown = json.dumps(statement, indent=2) + "\n"
    assert doc_block("statement") == shown, shown


def test_the_in_toto_bindings_accept_the_statement() -> None:
    entries, lock = example()
    statement = fetch_set_statement(entries, lock=lock, run=RUN)
    proto = json_format.Parse(serialize_statement(statement), statement_pb2.Statement())
    Statement.copy_from_pb(proto).validate()  # raises ValueError on a malformed statement
    assert proto.predicate_type == PREDICATE_TYPE
    for dependency in statement["predicate"]["resolvedDependencies"]:  # type: ignore[index]
        rd = json_format.ParseDict(dependency, resource_descriptor_pb2.ResourceDescriptor())
        ResourceDescriptor.copy_from_pb(rd).validate()


def test_the_statement_carries_what_the_run_used() -> None:
    entries, lock = example()
    statement = fetch_set_statement(reversed(entries), lock=lock, run=RUN)
    predicate = statement["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["fetchSet"] == {
        "digest": {"blake3": hex_of(fetch_set_digest(entries))},
        "entries": 3,
    }
    assert (predicate["complete"], predicate["exact"], predicate["sandbox"]) == (True, True, "root")
    assert predicate["lock"] == {
        "name": "fetchproxy.lock.toml",
        "digest": {"blake3": lock.blake3, "sha256": lock.sha256},
    }
    assert statement["subject"] == [predicate["lock"]]  # no outputs given: the lock itself
    first = predicate["resolvedDependencies"][0]
    assert first == {
        "uri": "https://files.example.org/pkg/foo-1.0.tar.gz",
        "digest": {"blake3": hex_of(digest_bytes(b"foo"))},
        "annotations": {
            "method": "GET",
            "status": 200,
            "size": 3,
            "headers": [["content-type", "application/gzip"]],
        },
    }
    # the same run in any order gives the same bytes
    assert serialize_statement(statement) == serialize_statement(
        fetch_set_statement(entries, lock=lock, run=RUN)
    )
    assert serialize_statement(statement) == canonical_json(statement)


def test_outputs_given_are_the_subject_and_no_sandbox_is_not_complete() -> None:
    entries, lock = example()
    output = Subject(name="dist/app.whl", digest=(("sha256", "ab" * 32),))
    run = RunFacts(exact=False, refused=2, sandbox="none", fetchproxy_version="0.1.0")
    statement = fetch_set_statement(entries, lock=lock, run=run, subjects=[output])
    assert statement["subject"] == [{"name": "dist/app.whl", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicate"]["complete"] is False  # type: ignore[index]
    assert statement["predicate"]["refused"] == 2  # type: ignore[index]


def test_a_statement_reads_back_and_matches_its_lock() -> None:
    entries, lock = example()
    document = json.loads(serialize_statement(fetch_set_statement(entries, lock=lock, run=RUN)))
    parsed = parse_statement(document)
    assert sorted(parsed.entries, key=lambda e: e.url) == sorted(entries, key=lambda e: e.url)
    assert parsed.run == RUN
    assert parsed.lock == lock
    assert statement_problems(parsed, lock_entries=entries, lock=lock) == []


def test_what_the_check_finds() -> None:
    entries, lock = example()
    served = entries[:2]
    run = RunFacts(exact=True, refused=0, sandbox="root", fetchproxy_version="0.1.0")
    document = json.loads(serialize_statement(fetch_set_statement(served, lock=lock, run=run)))
    # an entry changed in the statement after it was made
    dependency = document["predicate"]["resolvedDependencies"][0]
    dependency["digest"]["blake3"] = "00" * 32
    other_lock = LockReference.of("fetchproxy.lock.toml", b"other text")
    problems = statement_problems(parse_statement(document), lock_entries=entries, lock=other_lock)
    url = dependency["uri"]
    assert problems == [
        f"the fetch-set digest {fetch_set_digest(served)} does not match the statement's own "
        f"entries ({fetch_set_digest(parse_statement(document).entries)}): the statement was "
        "altered",
        f"the statement names a lock with blake3 {lock.blake3}; fetchproxy.lock.toml has "
        f"{other_lock.blake3} — the lock changed since the run, or it is another lock",
        f"GET {url}: served 200 blake3:{'00' * 32}, but the lock answers 200 "
        f"{next(e.digest for e in entries if e.url == url)}",
        "the run is called exact, but 1 of the lock's entries are not among those served",
    ]


def test_an_entry_the_lock_never_had() -> None:
    entries, lock = example()
    stranger = Entry(
        method="GET", url="https://evil.example/x", status=200, digest=digest_bytes(b""), size=0
    )
    statement = parse_statement(
        json.loads(
            serialize_statement(fetch_set_statement([*entries, stranger], lock=lock, run=RUN))
        )
    )
    assert statement_problems(statement, lock_entries=entries, lock=lock)[0] == (
        "GET https://evil.example/x: served, but the lock has no such entry"
    )


def test_a_reformatted_lock_is_another_lock_file_with_the_same_fetch_set() -> None:
    entries, lock = example()
    text = doc_block("fetch-set-lock")
    reformatted = text.replace("\n\n[[fetch]]", "\n\n# comment\n[[fetch]]")
    assert render_lock(parse_lock(reformatted)) == text
    statement = parse_statement(
        json.loads(serialize_statement(fetch_set_statement(entries, lock=lock, run=RUN)))
    )
    problems = statement_problems(
        statement,
        lock_entries=entries,
        lock=LockReference.of("fetchproxy.lock.toml", reformatted.encode()),
    )
    assert len(problems) == 1
    assert problems[0].startswith("the statement names a lock with blake3")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(_type="x"), r"\$\._type: not 'https://in-toto.io/Statement/v1'"),
        (lambda d: d.update(predicateType="https://slsa.dev/provenance/v1"), "predicateType"),
        (lambda d: d.update(subject=[]), "at least one subject"),
        (lambda d: d.update(subject=[{"name": "x", "digest": {}}]), r"subject\[0\]\.digest"),
        (lambda d: d.update(predicate=[]), r"\$\.predicate: an object is expected"),
        (
            lambda d: d["predicate"]["fetchSet"]["digest"].update(blake3="XYZ"),
            r"\$\.predicate\.fetchSet\.digest\.blake3: 64 lowercase hex",
        ),
        (lambda d: d["predicate"].update(exact="yes"), r"\$\.predicate\.exact: true or false"),
        (lambda d: d["predicate"].update(refused=1.0), r"\$\.predicate\.refused: an integer"),
        (
            lambda d: d["predicate"]["lock"]["digest"].pop("sha256"),
            "blake3 and sha256 are both required",
        ),
        (
            lambda d: d["predicate"]["resolvedDependencies"][1].update(uri="file:///etc/passwd"),
            r"resolvedDependencies\[1\]: url: 'file:///etc/passwd' is not an http",
        ),
        (
            lambda d: d["predicate"]["resolvedDependencies"][0]["annotations"].update(
                headers=[["a"]]
            ),
            r"resolvedDependencies\[0\]\.annotations\.headers\[0\]: not a \[name, value\] pair",
        ),
        (
            lambda d: d["predicate"]["resolvedDependencies"][2]["annotations"].update(status=999),
            r"resolvedDependencies\[2\]: status: 999 is not an HTTP status",
        ),
    ],
)
def test_malformed_statements_name_the_json_path(edit: object, message: str) -> None:
    entries, lock = example()
    document = json.loads(serialize_statement(fetch_set_statement(entries, lock=lock, run=RUN)))
    edit(document)  # type: ignore[operator]
    with pytest.raises(StatementError, match=message):
        parse_statement(document)


@pytest.mark.parametrize("document", [None, [], "x", 1, {"_type": None}])
def test_not_even_an_object(document: object) -> None:
    with pytest.raises(StatementError):
        parse_statement(document)

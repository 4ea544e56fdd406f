"""CycloneDX and SPDX documents, checked with the real validators (cyclonedx-python-lib's JSON
schema validation and spdx-tools' parser and validator, both offline), and the example in
docs/provenance.md recomputed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fetchproxy.digest import digest_bytes, hex_of
from fetchproxy.lock.file import parse_lock
from fetchproxy.provenance.entry import Entry, entry_from_fetch
from fetchproxy.provenance.sbom import components, cyclonedx, render, spdx
from fetchproxy.provenance.statement import (
    LockReference,
    fetch_set_statement,
    parse_statement,
    serialize_statement,
    statement_problems,
)
from tests.provenance.docexamples import CREATED, LOCK_NAME, RUN, doc_block, example_lock
from tests.support.sbom import cyclonedx_errors, spdx_messages


def entry(url: str, body: bytes = b"x", status: int = 200, **fields: object) -> Entry:
    values: dict[str, object] = {
        "method": "GET",
        "url": url,
        "status": status,
        "digest": digest_bytes(body),
        "size": len(body),
    }
    values.update(fields)
    return Entry(**values)  # type: ignore[arg-type]


# A lock as pip, npm, cargo, go, apt, a GitHub download and curl leave one.
MIXED = [
    entry("https://pypi.org/simple/requests/", b"<html>", headers=(("content-type", "text/html"),)),
    entry(
        "https://files.pythonhosted.org/packages/aa/bb/cc/requests-2.32.3-py3-none-any.whl", b"whl"
    ),
    entry("https://registry.npmjs.org/@types%2Fnode", b"{}"),
    entry("https://registry.npmjs.org/@types/node/-/node-20.11.5.tgz", b"tgz"),
    entry(
        "https://crates.io/api/v1/crates/serde/1.0.197/download",
        b"",
        status=302,
        headers=(("location", "https://static.crates.io/crates/serde/serde-1.0.197.crate"),),
    ),
    entry("https://static.crates.io/crates/serde/serde-1.0.197.crate", b"crate"),
    entry("https://index.crates.io/se/rd/serde", b"index"),
    entry("https://proxy.golang.org/golang.org/x/text/@v/v0.14.0.zip", b"zip"),
    entry("https://proxy.golang.org/golang.org/x/text/@v/list", b"v0.14.0\n"),
    entry("https://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3_amd64.deb", b"deb"),
    entry(
        "https://repo.maven.apache.org/maven2/org/slf4j/slf4j-api/2.0.9/slf4j-api-2.0.9.jar",
        b"jar",
    ),
    entry(
        "https://github.com/cli/cli/releases/download/v2.45.0/gh.tar.gz",
        b"",
        status=302,
        headers=(("location", "https://objects.githubusercontent.com/rel/1?X-Amz-Date=1"),),
    ),
    entry("https://objects.githubusercontent.com/rel/1?X-Amz-Date=1", b"gh"),
    entry("https://example.org/tools/install.sh", b"#!/bin/sh\n"),
    entry("https://example.org/missing", b"nope", status=404),
    entry("https://example.org/tools/install.sh", b"", method="HEAD"),
]
LOCK = LockReference.of(LOCK_NAME, b"the lock's bytes")


def as_json(document: dict[str, object]) -> Any:
    """A document as a reader sees it (untyped JSON)."""
    return json.loads(render(document))


def test_cyclonedx_validates() -> None:
    document = cyclonedx(MIXED, name=LOCK_NAME, fetchproxy_version="0.1.0", lock=LOCK)
    assert cyclonedx_errors(document) is None


def test_spdx_validates(tmp_path: Path) -> None:
    document = spdx(MIXED, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0", lock=LOCK)
    assert spdx_messages(document, tmp_path) == []


def test_a_broken_document_is_caught_by_both_validators(tmp_path: Path) -> None:
    # the validators are not accepting everything
    bad = cyclonedx(MIXED, name=LOCK_NAME, fetchproxy_version="0.1.0")
    bad["components"][0]["hashes"][0]["alg"] = "BLAKE4"  # type: ignore[index]
    assert cyclonedx_errors(bad) is not None
    broken = spdx(MIXED, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0")
    broken["packages"][1]["externalRefs"][0]["referenceLocator"] = "not a purl"  # type: ignore[index]
    assert spdx_messages(broken, tmp_path) != []


def test_one_component_per_file_with_purls_for_packages_only() -> None:
    listed = {c.entry.url: c for c in components(MIXED)}
    # redirects, errors and HEAD answers carry no file
    assert "https://crates.io/api/v1/crates/serde/1.0.197/download" not in listed
    assert "https://example.org/missing" not in listed
    assert len(listed) == 12
    document = as_json(cyclonedx(MIXED, name=LOCK_NAME, fetchproxy_version="0.1.0"))
    by_url = {c["externalReferences"][0]["url"]: c for c in document["components"]}
    wheel = by_url[
        "https://files.pythonhosted.org/packages/aa/bb/cc/requests-2.32.3-py3-none-any.whl"
    ]
    assert (wheel["type"], wheel["name"], wheel["version"]) == ("library", "requests", "2.32.3")
    assert wheel["purl"] == "pkg:pypi/requests@2.32.3?file_name=requests-2.32.3-py3-none-any.whl"
    assert wheel["hashes"] == [{"alg": "BLAKE3", "content": hex_of(digest_bytes(b"whl"))}]
    index = by_url["https://pypi.org/simple/requests/"]
    assert index["type"] == "data"
    assert "purl" not in index
    assert {"name": "fetchproxy:role", "value": "metadata"} in index["properties"]
    assert {"name": "fetchproxy:describes", "value": "pkg:pypi/requests"} in index["properties"]
    script = by_url["https://example.org/tools/install.sh"]
    assert script["type"] == "file"
    assert script["purl"] == (
        "pkg:generic/install.sh?download_url=https:%2F%2Fexample.org%2Ftools%2Finstall.sh"
    )


def test_a_file_reached_by_redirect_is_named_after_its_source() -> None:
    document = as_json(cyclonedx(MIXED, name=LOCK_NAME, fetchproxy_version="0.1.0"))
    by_url = {c["externalReferences"][0]["url"]: c for c in document["components"]}
    asset = by_url["https://objects.githubusercontent.com/rel/1?X-Amz-Date=1"]
    assert asset["purl"] == "pkg:github/cli/cli@v2.45.0?file_name=gh.tar.gz"
    assert {
        "name": "fetchproxy:redirected-from",
        "value": "https://github.com/cli/cli/releases/download/v2.45.0/gh.tar.gz",
    } in asset["properties"]
    crate = by_url["https://static.crates.io/crates/serde/serde-1.0.197.crate"]
    assert crate["purl"] == "pkg:cargo/serde@1.0.197"  # its own URL says so: no redirect named
    assert all(p["name"] != "fetchproxy:redirected-from" for p in crate["properties"])


def test_redirect_loops_end() -> None:
    loop = [
        entry(
            "https://a.example/x", b"", status=302, headers=(("location", "https://b.example/y"),)
        ),
        entry(
            "https://b.example/y", b"", status=302, headers=(("location", "https://a.example/x"),)
        ),
        entry("https://c.example/z", b"z"),
    ]
    assert [c.entry.url for c in components(loop)] == ["https://c.example/z"]


def test_spdx_packages_and_relationships(tmp_path: Path) -> None:
    document = as_json(
        spdx(MIXED, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0", lock=LOCK)
    )
    packages = {p["SPDXID"]: p for p in document["packages"]}
    root = packages["SPDXRef-fetch-set"]
    assert root["checksums"] == [
        {"algorithm": "BLAKE3", "checksumValue": LOCK.blake3},
        {"algorithm": "SHA256", "checksumValue": LOCK.sha256},
    ]
    relationships = document["relationships"]
    assert relationships[0] == {
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": "SPDXRef-fetch-set",
    }
    assert len(relationships) == 1 + 12
    deb = next(p for p in packages.values() if p.get("versionInfo") == "2.10-3")
    assert deb["externalRefs"] == [
        {
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": "pkg:deb/debian/hello@2.10-3?arch=amd64",
        }
    ]
    assert deb["primaryPackagePurpose"] == "LIBRARY"
    listing = next(p for p in packages.values() if p["name"] == "text" and "externalRefs" not in p)
    assert listing["primaryPackagePurpose"] == "OTHER"
    assert "fetchproxy:role = metadata" in listing["comment"]


def test_documents_are_deterministic_and_their_ids_follow_their_content() -> None:
    one = cyclonedx(MIXED, name=LOCK_NAME, fetchproxy_version="0.1.0")
    two = cyclonedx(list(reversed(MIXED)), name=LOCK_NAME, fetchproxy_version="0.1.0")
    assert render(one) == render(two)
    other = cyclonedx(MIXED[:-3], name=LOCK_NAME, fetchproxy_version="0.1.0")
    assert one["serialNumber"] != other["serialNumber"]
    a = spdx(MIXED, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0")
    b = spdx(MIXED, name=LOCK_NAME, created="2026-01-02T00:00:00Z", fetchproxy_version="0.1.0")
    assert a["documentNamespace"] != b["documentNamespace"]
    assert render(a) == render(
        spdx(reversed(MIXED), name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0")
    )


def test_spdx_wants_a_utc_timestamp() -> None:
    with pytest.raises(ValueError, match="created: '2026-01-01' is not YYYY-MM-DDThh:mm:ssZ"):
        spdx(MIXED, name=LOCK_NAME, created="2026-01-01", fetchproxy_version="0.1.0")


def test_urls_no_reader_accepts_are_left_out() -> None:
    odd = [entry("https://example.org/a b\u00e9", b"a")]
    document = cyclonedx(odd, name=LOCK_NAME, fetchproxy_version="0.1.0")
    assert "externalReferences" not in document["components"][0]  # type: ignore[index]
    assert cyclonedx_errors(document) is None
    assert (
        spdx(odd, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0")["packages"][1][  # type: ignore[index]
            "downloadLocation"
        ]
        == "NOASSERTION"
    )


def test_the_examples_in_the_docs_are_what_the_example_lock_gives(tmp_path: Path) -> None:
    entries, lock = example_lock()
    bom = cyclonedx(entries, name=LOCK_NAME, fetchproxy_version="0.1.0", lock=lock)
    assert doc_block("cyclonedx") == render(bom), render(bom)
    assert cyclonedx_errors(bom) is None
    document = spdx(entries, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0", lock=lock)
    assert doc_block("spdx") == render(document), render(document)
    assert spdx_messages(document, tmp_path) == []
    assert json.loads(doc_block("spdx"))["creationInfo"]["created"] == CREATED


REPO = Path(__file__).parents[2]
# The shapes the real-client tests record (tests/clients/, tests/support/real_origins.py):
# pip against a static PEP 503 index, git over smart HTTP.
REAL_CLIENTS = """\
version = 1

[[fetch]]
method = "GET"
url = "https://127.0.0.2:40001/files/demo_pkg-1.0-py3-none-any.whl"
status = 200
digest = "blake3:04e0bb39f30b1a3feb89f536c93be15055482df748674b00d26e5a75777702e9"
size = 3
content-type = "application/octet-stream"

[[fetch]]
method = "GET"
url = "https://127.0.0.2:40001/simple/demo-pkg/"
accept = "application/vnd.pypi.simple.v1+json, text/html; q=0.01"
status = 200
digest = "blake3:6e46dd10defc9b56c29a6ec56b508c21f54c08192194e4df25bf36f0c9c3c279"
size = 2
content-type = "text/html"

[[fetch]]
method = "POST"
url = "https://127.0.0.2:40002/repo.git/git-upload-pack"
git-protocol = "version=2"
body-digest = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
status = 200
digest = "blake3:04e0bb39f30b1a3feb89f536c93be15055482df748674b00d26e5a75777702e9"
size = 3
content-type = "application/x-git-upload-pack-result"

[[fetch]]
method = "GET"
url = "https://127.0.0.2:40002/repo.git/info/refs?service=git-upload-pack"
git-protocol = "version=2"
status = 200
digest = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
size = 0
content-type = "application/x-git-upload-pack-advertisement"
"""


@pytest.mark.parametrize(
    "text",
    [
        (REPO / "lockfiles" / "demo.lock.toml").read_text(),
        (REPO / "lockfiles" / "golden" / "v1-every-field.lock.toml").read_text(),
        REAL_CLIENTS,
    ],
    ids=["demo", "every-field", "real-client-shapes"],
)
def test_locks_of_the_repository_give_valid_documents(text: str, tmp_path: Path) -> None:
    lock = LockReference.of(LOCK_NAME, text.encode())
    entries = [entry_from_fetch(f) for f in parse_lock(text, require_sorted=False).fetches]
    bom = cyclonedx(entries, name=LOCK_NAME, fetchproxy_version="0.1.0", lock=lock)
    assert cyclonedx_errors(bom) is None
    document = spdx(entries, name=LOCK_NAME, created=CREATED, fetchproxy_version="0.1.0", lock=lock)
    assert spdx_messages(document, tmp_path) == []
    statement = fetch_set_statement(entries, lock=lock, run=RUN)
    parsed = parse_statement(json.loads(serialize_statement(statement)))
    assert statement_problems(parsed, lock_entries=entries, lock=lock) == []


def test_the_real_client_shapes_are_named() -> None:
    entries = [entry_from_fetch(f) for f in parse_lock(REAL_CLIENTS).fetches]
    named = {c.entry.url: (c.role.value, str(c.purl)) for c in components(entries)}
    assert named == {
        "https://127.0.0.2:40001/files/demo_pkg-1.0-py3-none-any.whl": (
            "artifact",
            "pkg:pypi/demo-pkg@1.0?file_name=demo_pkg-1.0-py3-none-any.whl",
        ),
        "https://127.0.0.2:40001/simple/demo-pkg/": ("metadata", "pkg:pypi/demo-pkg"),
        "https://127.0.0.2:40002/repo.git/info/refs?service=git-upload-pack": (
            "metadata",
            "pkg:generic/repo",
        ),
        "https://127.0.0.2:40002/repo.git/git-upload-pack": (
            "artifact",
            "pkg:generic/repo?vcs_url=git%2Bhttps:%2F%2F127.0.0.2:40002%2Frepo.git",
        ),
    }


def test_spdx_locations_follow_its_grammar() -> None:
    # SPDX 2.3 section 7.7: a download location's host is a name with a top-level domain;
    # the real-client origins are IP addresses, so their URL moves into the comment.
    entries = [entry_from_fetch(f) for f in parse_lock(REAL_CLIENTS).fetches]
    document = as_json(spdx(entries, name=LOCK_NAME, created=CREATED, fetchproxy_version="0"))
    wheel = next(p for p in document["packages"] if p.get("versionInfo") == "1.0")
    assert wheel["downloadLocation"] == "NOASSERTION"
    assert wheel["comment"].endswith(
        "; fetchproxy:url = https://127.0.0.2:40001/files/demo_pkg-1.0-py3-none-any.whl"
    )
    named = as_json(spdx(MIXED, name=LOCK_NAME, created=CREATED, fetchproxy_version="0"))
    assert any(
        p["downloadLocation"] == "https://example.org/tools/install.sh" for p in named["packages"]
    )

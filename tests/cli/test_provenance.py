"""``fetchproxy lock digest`` and ``fetchproxy lock sbom`` as users run them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fetchproxy.lock.eventlog import EventLog
from fetchproxy.lock.file import parse_lock
from fetchproxy.replay.book import ReplayBook
from tests.provenance.docexamples import doc_block
from tests.support.cli import run_fetchproxy
from tests.support.sbom import cyclonedx_errors, spdx_messages

LOCK = "fetchproxy.lock.toml"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A directory holding the example lock of docs/provenance.md."""
    (tmp_path / LOCK).write_text(doc_block("fetch-set-lock"))
    return tmp_path


def fetchproxy(work: Path, *args: str | Path, **env: str) -> tuple[int, str, str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("FETCHPROXY_LOCK", "SOURCE_DATE_EPOCH")
    }
    done = run_fetchproxy(*map(str, args), cwd=work, env={**clean, **env})
    return done.returncode, done.stdout, done.stderr


def test_lock_digest_prints_the_fetch_set_digest(work: Path) -> None:
    assert fetchproxy(work, "lock", "digest") == (0, doc_block("fetch-set-digest"), "")
    # another layout of the same entries: the same digest
    lock = parse_lock(doc_block("fetch-set-lock"))
    reversed_text = "version = 1\n" + "".join(
        "\n[[fetch]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in f.to_dict().items())
        for f in reversed(lock.fetches)
    )
    (work / "other.lock.toml").write_text(reversed_text)
    assert fetchproxy(work, "lock", "digest", "--lock", "other.lock.toml")[1] == doc_block(
        "fetch-set-digest"
    )
    (work / "bad.lock.toml").write_text("version = 1\n\n[[fetch]]\nmethod = 7\n")
    status, out, err = fetchproxy(work, "lock", "digest", "--lock", "bad.lock.toml")
    assert (status, out) == (2, "")
    assert err.startswith("fetchproxy: error: bad.lock.toml:4: fetch[0].method: 7 is not a string")


def test_lock_sbom_writes_documents_the_validators_accept(work: Path) -> None:
    status, out, err = fetchproxy(work, "lock", "sbom", "--format", "cyclonedx")
    assert (status, err) == (0, "")
    bom = json.loads(out)
    assert cyclonedx_errors(bom) is None
    assert [c["name"] for c in bom["components"]] == ["foo-1.0.tar.gz", "foo"]
    expected = json.loads(doc_block("cyclonedx"))
    for document in (bom, expected):  # what the installed version changes
        del document["serialNumber"], document["metadata"]["tools"]
    assert bom == expected

    status, out, err = fetchproxy(
        work, "lock", "sbom", "--format", "spdx", "--created", "2026-01-01T00:00:00Z"
    )
    assert (status, err) == (0, "")
    assert spdx_messages(json.loads(out), work) == []
    assert json.loads(out)["creationInfo"]["created"] == "2026-01-01T00:00:00Z"
    # the same from SOURCE_DATE_EPOCH, byte for byte
    epoch = fetchproxy(work, "lock", "sbom", "--format", "spdx", SOURCE_DATE_EPOCH="1767225600")
    assert epoch == (0, out, "")


def test_lock_sbom_output_is_written_atomically(work: Path) -> None:
    status, out, err = fetchproxy(
        work, "lock", "sbom", "--format", "cyclonedx", "--output", "sbom.cdx.json"
    )
    assert (status, out, err) == (0, "", "")
    written = json.loads((work / "sbom.cdx.json").read_text())
    assert cyclonedx_errors(written) is None
    assert sorted(p.name for p in work.iterdir()) == [LOCK, "sbom.cdx.json"]  # no temp file
    status, _, err = fetchproxy(
        work, "lock", "sbom", "--format", "cyclonedx", "--output", "nowhere/sbom.json"
    )
    assert status == 2
    assert err.startswith("fetchproxy: error: cannot write nowhere/sbom.json: ")
    assert err.endswith("— no SBOM was written\n")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ("--format", "cyclonedx", "--created", "2026-01-01T00:00:00Z"),
            {},
            "--created is SPDX's creation time; a CycloneDX SBOM carries no timestamp",
        ),
        (
            ("--format", "spdx", "--created", "yesterday"),
            {},
            "--created 'yesterday' is not YYYY-MM-DDThh:mm:ssZ (UTC)",
        ),
        (
            ("--format", "spdx"),
            {"SOURCE_DATE_EPOCH": "1.5e9"},
            "SOURCE_DATE_EPOCH='1.5e9' is not a number of seconds since 1970",
        ),
        (("--format", "xml"), {}, "argument --format: invalid choice: 'xml'"),
    ],
)
def test_lock_sbom_refuses_what_it_cannot_do(
    work: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    status, out, err = fetchproxy(work, "lock", "sbom", *args, **env)
    assert (status, out) == (2, "")
    assert message in err


def test_lock_sbom_served_lists_only_what_the_replay_served(work: Path) -> None:
    lock = parse_lock(doc_block("fetch-set-lock"))
    log = work / "replay.log.jsonl"
    book = ReplayBook(lock, work / LOCK, EventLog(log), sandbox="root")
    tarball = next(f for f in lock.fetches if f.key.url.endswith(".tar.gz"))
    book.served(tarball.key, tarball.size)
    book.close()
    status, out, err = fetchproxy(
        work, "lock", "sbom", "--format", "cyclonedx", "--served", "replay.log.jsonl"
    )
    assert (status, err) == (0, "")
    bom = json.loads(out)
    assert cyclonedx_errors(bom) is None
    assert [c["name"] for c in bom["components"]] == ["foo-1.0.tar.gz"]
    digest = json.loads(log.read_text().splitlines()[-1])["digest"]
    assert {"name": "fetchproxy:fetch-set-digest", "value": digest} in bom["metadata"]["component"][
        "properties"
    ]

    log.write_text(log.read_text().replace('"used"', '"uzed"'))
    status, out, err = fetchproxy(
        work, "lock", "sbom", "--format", "spdx", "--served", "replay.log.jsonl"
    )
    assert (status, out) == (2, "")
    assert err.startswith("fetchproxy: error: replay.log.jsonl:")
    (work / "record.log.jsonl").write_text('{"event": "refused", "key": null, "reason": "x"}\n')
    status, out, err = fetchproxy(
        work, "lock", "sbom", "--format", "spdx", "--served", "record.log.jsonl"
    )
    assert (status, out) == (2, "")
    assert err.startswith(
        "fetchproxy: error: record.log.jsonl:1: the log ends without a fetch-set line"
    )
    status, _, err = fetchproxy(work, "lock", "sbom", "--format", "spdx", "--served", LOCK)
    assert status == 2
    assert err.startswith(f"fetchproxy: error: {LOCK}:1: not an event-log line")

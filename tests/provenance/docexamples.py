"""The worked examples of docs/provenance.md: each is a fenced block after a marker line
``<!-- example: NAME -->``; the tests recompute every one, so the page cannot drift.

:func:`generated` makes every block but the hand-written fetch-set ones (which the tests only
check): the statement and SBOMs from the pure functions, and the command-line examples by
running ``fetchproxy`` in a scratch directory, as a user would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import blake3
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fetchproxy.lock.eventlog import EventLog
from fetchproxy.lock.file import parse_lock, write_lock
from fetchproxy.provenance.entry import Entry, entry_from_fetch
from fetchproxy.provenance.statement import LockReference, RunFacts
from fetchproxy.replay.book import ReplayBook

DOC = Path(__file__).parents[2] / "docs" / "provenance.md"
LOCK_NAME = "fetchproxy.lock.toml"
RUN = RunFacts(exact=True, refused=0, sandbox="root", fetchproxy_version="0.1.0")
CREATED = "2026-01-01T00:00:00Z"
KEY_SEED = blake3.blake3(b"fetchproxy docs: the example signing key").digest()
"""The example key's 32 bytes: Ed25519 signatures are deterministic, so its envelope is too."""


def doc_block(name: str) -> str:
    """The text of the example ``name`` (ending with a newline)."""
    match = re.search(
        rf"<!-- example: {re.escape(name)} -->\n```[a-z]*\n(.*?)```",
        DOC.read_text(encoding="utf-8"),
        re.DOTALL,
    )
    assert match is not None, f"docs/provenance.md has no example {name!r}"
    return match[1]


def example_lock() -> tuple[list[Entry], LockReference]:
    """The example lock's entries, and the reference to its file."""
    text = doc_block("fetch-set-lock")
    entries = [entry_from_fetch(f) for f in parse_lock(text).fetches]
    return entries, LockReference.of(LOCK_NAME, text.encode())


def example_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(KEY_SEED)


def _pem(key: Ed25519PrivateKey) -> tuple[bytes, bytes]:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


class _Shell:
    """``$ fetchproxy ARGS`` run in ``work``; each call's transcript as docs show it."""

    def __init__(self, work: Path) -> None:
        self.work = work

    def __call__(self, *args: str, status: bool = False, stderr: bool = True) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "fetchproxy", *args],
            cwd=self.work,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        shown = f"$ fetchproxy {' '.join(args)}\n{done.stdout}"
        if stderr:
            shown += done.stderr
        if status:
            shown += f"$ echo $?\n{done.returncode}\n"
        return shown


def generated() -> dict[str, str]:
    """Every generated example, by name."""
    from fetchproxy.provenance.sbom import cyclonedx, render, spdx
    from fetchproxy.provenance.statement import (
        fetch_set_statement,
        serialize_statement,
    )
    from tests.review.example_locks import NEW, OLD, conflicted

    entries, lock = example_lock()
    version = RUN.fetchproxy_version
    statement = fetch_set_statement(entries, lock=lock, run=RUN)
    blocks = {
        "statement": json.dumps(statement, indent=2) + "\n",
        "cyclonedx": render(
            cyclonedx(entries, name=LOCK_NAME, fetchproxy_version=version, lock=lock)
        ),
        "spdx": render(
            spdx(entries, name=LOCK_NAME, created=CREATED, fetchproxy_version=version, lock=lock)
        ),
    }
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        shell = _Shell(work)
        (work / LOCK_NAME).write_text(doc_block("fetch-set-lock"))
        (work / "statement.json").write_bytes(serialize_statement(statement))
        private, public = _pem(example_key())
        (work / "key.pem").write_bytes(private)
        (work / "key.pub").write_bytes(public)
        blocks["lock-digest"] = shell("lock", "digest")
        book = ReplayBook(
            parse_lock(doc_block("fetch-set-lock")),
            work / LOCK_NAME,
            EventLog(work / "replay.log.jsonl"),
            sandbox="root",
        )
        for fetch in book.lock.fetches:
            book.served(fetch.key, fetch.size)
        book.close()
        blocks["fetch-set-event"] = (work / "replay.log.jsonl").read_text().splitlines()[-1] + "\n"
        blocks["public-key"] = public.decode()
        blocks["attest-sign"] = shell(
            "attest", "sign", "statement.json", "--key", "key.pem", "--output", "att.dsse.json"
        )
        envelope = json.loads((work / "att.dsse.json").read_bytes())
        blocks["envelope"] = json.dumps(envelope, indent=2) + "\n"
        blocks["attest-verify"] = shell("attest", "verify", "att.dsse.json", "--key", "key.pub")
        (work / LOCK_NAME).write_text(
            doc_block("fetch-set-lock").replace('content-type = "application/gzip"\n', "")
        )
        blocks["attest-verify-fails"] = shell(
            "attest", "verify", "att.dsse.json", "--key", "key.pub", status=True
        )

        write_lock(work / "old.lock.toml", OLD)
        write_lock(work / "new.lock.toml", NEW)
        blocks["package-diff"] = shell(
            "lock", "diff", "--packages", "old.lock.toml", "new.lock.toml"
        )
        blocks["package-diff-markdown"] = shell(
            "lock", "diff", "--format", "markdown", "old.lock.toml", "new.lock.toml"
        ).split("\n", 1)[1]

        from tests.review.example_locks import merge_sides

        for name, side in zip(("base", "ours", "theirs"), merge_sides(), strict=True):
            write_lock(work / f"{name}.lock.toml", side)
        blocks["merge"] = shell(
            "lock", "merge", "base.lock.toml", "ours.lock.toml", "theirs.lock.toml", status=True
        )
        merged = (work / "ours.lock.toml").read_text()
        assert merged == conflicted()
        blocks["merge-result"] = merged
        blocks["merge-fmt"] = shell("lock", "fmt", "--lock", "ours.lock.toml", status=True)
    return blocks


def regenerate() -> None:
    """Rewrite the generated examples (after a deliberate change to what they show):
    ``python -m tests.provenance.docexamples``. The fetch-set blocks are written by hand and
    only checked."""
    text = DOC.read_text(encoding="utf-8")
    for name, body in generated().items():
        pattern = rf"(<!-- example: {re.escape(name)} -->\n```[a-z]*\n)(.*?)(```)"
        match = re.search(pattern, text, re.DOTALL)
        assert match is not None, f"docs/provenance.md has no example {name!r}"
        text = text[: match.start(2)] + body + text[match.end(2) :]
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    regenerate()

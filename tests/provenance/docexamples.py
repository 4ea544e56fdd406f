"""The worked examples of docs/provenance.md: each is a fenced block after a marker line
``<!-- example: NAME -->``; the tests recompute every one, so the page cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from fetchproxy.lock.file import parse_lock
from fetchproxy.provenance.entry import Entry, entry_from_fetch
from fetchproxy.provenance.statement import LockReference, RunFacts

DOC = Path(__file__).parents[2] / "docs" / "provenance.md"
LOCK_NAME = "fetchproxy.lock.toml"
RUN = RunFacts(exact=True, refused=0, sandbox="root", fetchproxy_version="0.1.0")
CREATED = "2026-01-01T00:00:00Z"


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


def regenerate() -> None:
    """Rewrite the statement and SBOM examples from the example lock (after a deliberate change
    to their format): ``python -m tests.provenance.docexamples``. The fetch-set blocks are
    written by hand and only checked."""
    import json

    from fetchproxy.provenance.sbom import cyclonedx, render, spdx
    from fetchproxy.provenance.statement import fetch_set_statement

    entries, lock = example_lock()
    version = RUN.fetchproxy_version
    blocks = {
        "statement": json.dumps(fetch_set_statement(entries, lock=lock, run=RUN), indent=2) + "\n",
        "cyclonedx": render(
            cyclonedx(entries, name=LOCK_NAME, fetchproxy_version=version, lock=lock)
        ),
        "spdx": render(
            spdx(entries, name=LOCK_NAME, created=CREATED, fetchproxy_version=version, lock=lock)
        ),
    }
    text = DOC.read_text(encoding="utf-8")
    for name, body in blocks.items():
        pattern = rf"(<!-- example: {re.escape(name)} -->\n```[a-z]*\n)(.*?)(```)"
        match = re.search(pattern, text, re.DOTALL)
        assert match is not None, name
        text = text[: match.start(2)] + body + text[match.end(2) :]
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    regenerate()

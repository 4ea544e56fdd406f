"""``replay --attest PATH [--attest-key KEY]``: the statement of what a replay served.

:meth:`Attester.prepare` runs before the build: it loads the signing key (its passphrase, if
any, from :data:`~fetchproxy.run.buildenv.ATTEST_PASSPHRASE`, never from the command line) and
checks that ``PATH`` can be written, so a wrong passphrase or an unwritable path stops the run
before anything happens. :meth:`Attester.finish` runs when the replay is over: if the build
succeeded it writes the in-toto statement of the served set (canonical JSON), or a DSSE
envelope of it signed with the key; if the build failed it writes none, and removes what an
earlier run left at ``PATH``, so the file there is always this run's or nothing.
The statement itself is :mod:`fetchproxy.provenance.statement`'s.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from fetchproxy.files import check_writable, write_atomic, write_error
from fetchproxy.provenance.dsse import KeyFileError, PrivateKey, key_id, load_private_key, sign
from fetchproxy.provenance.entry import entry_from_fetch
from fetchproxy.provenance.statement import (
    LockReference,
    RunFacts,
    fetch_set_statement,
    serialize_statement,
)
from fetchproxy.replay.book import ReplayBook, ServedSet
from fetchproxy.run.buildenv import ATTEST_PASSPHRASE

_FIX = "give --attest a path fetchproxy can write"


def fetchproxy_version() -> str:
    """The installed distribution's version, as statements and SBOMs name their producer."""
    try:
        return metadata.version("fetchproxy")
    except metadata.PackageNotFoundError:
        return "unknown"


def load_signing_key(path: Path, environ: Mapping[str, str]) -> PrivateKey:
    """The private key in the PEM file ``path``, decrypted with the passphrase in
    ``environ[ATTEST_PASSPHRASE]`` when that is set; :class:`KeyFileError` otherwise."""
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the signing key: {exc.strerror}") from None
    passphrase = environ.get(ATTEST_PASSPHRASE)
    return load_private_key(
        pem,
        password=None if passphrase is None else passphrase.encode("utf-8"),
        source=str(path),
        password_from=ATTEST_PASSPHRASE,
    )


def statement_bytes(served: ServedSet, lock: LockReference) -> bytes:
    """The canonical statement that a run used exactly ``served`` of ``lock``."""
    run = RunFacts(
        exact=served.exact,
        refused=served.refused,
        sandbox=served.sandbox,
        fetchproxy_version=fetchproxy_version(),
    )
    entries = [entry_from_fetch(f) for f in served.fetches]
    return serialize_statement(fetch_set_statement(entries, lock=lock, run=run))


@dataclass(frozen=True, slots=True)
class Attester:
    """Where the attestation goes, and the key that signs it (None: a bare statement)."""

    path: Path
    key: PrivateKey | None = None

    @classmethod
    def prepare(cls, path: Path, key_path: Path | None, environ: Mapping[str, str]) -> Attester:
        """Load the key and check ``path`` can be written; before the build."""
        key = None if key_path is None else load_signing_key(key_path, environ)
        check_writable(path, _FIX)
        return cls(path, key)

    def finish(self, book: ReplayBook, *, build_status: int) -> None:
        """Write the attestation of what ``book`` served, if the build succeeded."""
        if build_status != 0:
            self._none_for_a_failed_build()
            return
        assert book.lock_reference is not None, "a replay book opened from a file knows its bytes"
        payload = statement_bytes(book.served_set(), book.lock_reference)
        if self.key is None:
            data, what = payload, "statement"
        else:
            data = sign(payload, self.key).to_bytes()
            what = f"envelope signed by key {key_id(self.key.public_key())}"
        try:
            write_atomic(self.path, data)
        except OSError as exc:
            fix = "the build ran, but no attestation was written"
            raise write_error(self.path, exc, fix) from None
        print(f"fetchproxy: attestation written to {self.path} ({what})", file=sys.stderr)

    def _none_for_a_failed_build(self) -> None:
        removed = False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            removed = True
        earlier = "; the file an earlier run left there is removed" if removed else ""
        print(
            f"fetchproxy: no attestation written to {self.path}: the build failed{earlier}",
            file=sys.stderr,
        )

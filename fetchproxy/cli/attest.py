"""``fetchproxy attest verify`` and ``fetchproxy attest sign``.

``attest verify ENVELOPE --key PUB [--lock L] [--exact]`` (or ``--unsigned`` for a bare
statement): exit 0 when the attestation holds, printing one line that says what it vouches
for; 1 with one line per problem (a signature that does not verify, a statement that does not
match the lock); 2 when a file is not what it should be (not an envelope, not a key, no lock).

``attest sign STATEMENT --key KEY --output ENVELOPE``: sign a statement ``replay --attest``
wrote without a key, in a later step, so that the key is never where the build could read it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fetchproxy.cli.options import Parser, UsageError, add_lock

VERIFY_DESCRIPTION = (
    "Check an attestation that `fetchproxy replay --attest` wrote: its signature (Ed25519 or "
    "ECDSA P-256), and that its statement describes a run of the lock: the lock's bytes are "
    "the ones it names, every entry it lists is in the lock with the same answer, its "
    "fetch-set digest recomputes, and an exact run used every entry. Exit status 0 when it "
    "holds, 1 with one line per problem, 2 for a file that is not what it should be."
)


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    if words[1] == "verify":
        parser.description = VERIFY_DESCRIPTION
        parser.add_argument("attestation", type=Path, metavar="ENVELOPE", help="the attestation")
        how = parser.add_mutually_exclusive_group(required=True)
        how.add_argument(
            "--key", type=Path, metavar="PATH", help="the public key (PEM) its signature must match"
        )
        how.add_argument(
            "--unsigned",
            action="store_true",
            help="ENVELOPE is a bare statement (replay --attest without a key): check only that "
            "it matches the lock, since nothing vouches for it",
        )
        add_lock(parser)
        parser.add_argument(
            "--exact",
            action="store_true",
            help="also require an exact run (nothing refused, every entry used) in a sandbox "
            "(so the set is complete)",
        )
        return
    parser.add_argument("statement", type=Path, metavar="STATEMENT", help="the bare statement")
    parser.add_argument(
        "--key",
        type=Path,
        required=True,
        metavar="PATH",
        help="the Ed25519 or ECDSA P-256 private key (PEM); an encrypted key's passphrase is "
        "read from $FETCHPROXY_ATTEST_PASSPHRASE",
    )
    parser.add_argument(
        "--output", type=Path, required=True, metavar="PATH", help="where the envelope goes"
    )


def run(args: argparse.Namespace) -> int:
    return _verify(args) if args.words[1] == "verify" else _sign(args)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror}") from None


def _verify(args: argparse.Namespace) -> int:
    from fetchproxy.lock.file import read_lock  # noqa: PLC0415
    from fetchproxy.provenance.attestation import check_bare, check_envelope  # noqa: PLC0415
    from fetchproxy.provenance.dsse import load_public_key  # noqa: PLC0415
    from fetchproxy.provenance.entry import entry_from_fetch  # noqa: PLC0415
    from fetchproxy.provenance.statement import LockReference  # noqa: PLC0415
    from fetchproxy.run.outcome import ExitStatus  # noqa: PLC0415
    from fetchproxy.text import counted, printable  # noqa: PLC0415

    path: Path = args.attestation
    data = _read(path, "attestation")
    key = (
        None if args.key is None else load_public_key(_read(args.key, "key"), source=str(args.key))
    )
    lock, lock_bytes = read_lock(args.lock, require_sorted=False)
    entries = [entry_from_fetch(f) for f in lock.fetches]
    reference = LockReference.of(str(args.lock), lock_bytes)
    try:
        if key is None:
            check = check_bare(data, lock_entries=entries, lock=reference, exact=args.exact)
        else:
            check = check_envelope(
                data, key, lock_entries=entries, lock=reference, exact=args.exact
            )
    except ValueError as exc:  # EnvelopeError, StatementError: not what it claims to be
        raise UsageError(f"{path}: {exc}") from None
    if not check.holds:
        for problem in check.problems:
            print(f"{path}: {printable(problem, lines=False)}")
        return ExitStatus.INCOMPLETE
    statement = check.statement
    assert statement is not None
    signed = "not signed" if check.keyid is None else f"signed by key {check.keyid}"
    run = statement.run
    facts = ", ".join(
        [
            "exact" if run.exact else f"not exact ({run.refused} refused)",
            f"complete (sandbox {run.sandbox})"
            if statement.complete
            else f"not complete (sandbox {run.sandbox})",
        ]
    )
    print(
        printable(
            f"{path}: holds — {signed}; "
            f"{counted(len(statement.entries), 'entry', 'entries')} of {args.lock}, "
            f"fetch set {statement.fetch_set_digest}; {facts}",
            lines=False,
        )
    )
    return 0


def _sign(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    from fetchproxy.files import write_atomic, write_error  # noqa: PLC0415
    from fetchproxy.provenance.dsse import key_id, sign  # noqa: PLC0415
    from fetchproxy.provenance.statement import StatementError, parse_statement  # noqa: PLC0415
    from fetchproxy.run.attest import load_signing_key  # noqa: PLC0415

    path: Path = args.statement
    payload = _read(path, "statement")
    try:
        parse_statement(json.loads(payload))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise UsageError(f"{path}: not a statement: the file is not JSON") from None
    except StatementError as exc:
        raise UsageError(f"{path}: not a fetch-set statement: {exc}") from None
    key = load_signing_key(args.key, os.environ)
    try:
        write_atomic(args.output, sign(payload, key).to_bytes())
    except OSError as exc:
        raise write_error(args.output, exc, "nothing was written") from None
    print(
        f"fetchproxy: {args.output}: {path} signed by key {key_id(key.public_key())}",
        file=sys.stderr,
    )
    return 0

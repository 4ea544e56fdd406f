"""``fetchproxy lock digest`` and ``fetchproxy lock sbom``: what a lock (or a replay of it)
fetches, in words other tools read. Both exit 0; bad input is status 2."""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from fetchproxy.cli.options import Parser, UsageError, add_lock

_TIMESTAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
SBOM_DESCRIPTION = (
    "An SBOM of the files a lock fetches (or, with --served, of those a replay served): one "
    "component per file, with its BLAKE3 hash, its URL and, where the registry's layout says "
    "what it is, its package URL. Indexes and other metadata are listed as data, never as "
    "packages (docs/provenance.md)."
)


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    add_lock(parser)
    if words[1] == "digest":
        parser.description = (
            "Print the fetch-set digest of a lock: one digest of its entries, independent of "
            "their order and of the file's layout; `replay` prints the digest of what it served, "
            "which is this one when the replay was exact (docs/provenance.md)."
        )
        return
    parser.description = SBOM_DESCRIPTION
    parser.add_argument(
        "--format", required=True, choices=("cyclonedx", "spdx"), help="CycloneDX 1.6 or SPDX 2.3"
    )
    parser.add_argument(
        "--served",
        type=Path,
        metavar="PATH",
        help="list only what the replay that wrote this event log served",
    )
    parser.add_argument(
        "--created",
        metavar="TIMESTAMP",
        help="SPDX's creation time, YYYY-MM-DDThh:mm:ssZ (default: $SOURCE_DATE_EPOCH, else now)",
    )
    parser.add_argument(
        "--output", type=Path, metavar="PATH", help="write the SBOM to PATH (default: stdout)"
    )
    parser.check = _check_sbom


def _check_sbom(args: argparse.Namespace) -> str | None:
    if args.created is not None and args.format != "spdx":
        return "--created is SPDX's creation time; a CycloneDX SBOM carries no timestamp"
    if args.created is not None and not _TIMESTAMP_RE.fullmatch(args.created):
        return f"--created {args.created!r} is not YYYY-MM-DDThh:mm:ssZ (UTC)"
    return None


def run(args: argparse.Namespace) -> int:
    return _digest(args) if args.words[1] == "digest" else _sbom(args)


def _digest(args: argparse.Namespace) -> int:
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.provenance.entry import entry_from_fetch  # noqa: PLC0415
    from fetchproxy.provenance.fetchset import fetch_set_digest  # noqa: PLC0415

    lock = load_lock(args.lock, require_sorted=False)
    print(fetch_set_digest(entry_from_fetch(f) for f in lock.fetches))
    return 0


def created_time(given: str | None, environ: Mapping[str, str]) -> str:
    """SPDX's ``created``: ``--created``, else ``$SOURCE_DATE_EPOCH``, else now (UTC)."""
    if given is not None:
        return given
    epoch = environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        moment = datetime.datetime.now(datetime.UTC)
    else:
        if not (epoch.isascii() and epoch.isdigit()):
            raise UsageError(
                f"SOURCE_DATE_EPOCH={epoch!r} is not a number of seconds since 1970 "
                "(reproducible-builds.org/specs/source-date-epoch)"
            )
        moment = datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sbom(args: argparse.Namespace) -> int:
    from fetchproxy.files import write_atomic, write_error  # noqa: PLC0415
    from fetchproxy.lock.file import read_lock  # noqa: PLC0415
    from fetchproxy.provenance.entry import entry_from_fetch  # noqa: PLC0415
    from fetchproxy.provenance.sbom import cyclonedx, render, spdx  # noqa: PLC0415
    from fetchproxy.provenance.servedlog import served_entries  # noqa: PLC0415
    from fetchproxy.provenance.statement import LockReference  # noqa: PLC0415
    from fetchproxy.run.attest import fetchproxy_version  # noqa: PLC0415

    created = created_time(args.created, os.environ) if args.format == "spdx" else ""
    lock, data = read_lock(args.lock, require_sorted=False)
    entries = [entry_from_fetch(f) for f in lock.fetches]
    if args.served is not None:
        try:
            text = args.served.read_bytes().decode("utf-8")
        except OSError as exc:
            raise UsageError(f"{args.served}: cannot read the event log: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{args.served}: not an event log: not UTF-8 text") from None
        entries = served_entries(text, entries, path=str(args.served), lock=str(args.lock))
    reference = LockReference.of(str(args.lock), data)
    name, version = str(args.lock), fetchproxy_version()
    if args.format == "cyclonedx":
        document = cyclonedx(entries, name=name, fetchproxy_version=version, lock=reference)
    else:
        document = spdx(
            entries, name=name, created=created, fetchproxy_version=version, lock=reference
        )
    text_out = render(document)
    if args.output is None:
        sys.stdout.write(text_out)
        return 0
    try:
        write_atomic(args.output, text_out.encode("utf-8"))
    except OSError as exc:
        raise write_error(args.output, exc, "no SBOM was written") from None
    return 0

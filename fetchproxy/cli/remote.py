"""``fetchproxy store push`` and ``fetchproxy store pull``: a lock's blobs and the remote store.

For CI steps of their own: ``store pull`` before a job that replays (or let ``replay`` pull),
``store push`` after one that recorded without a remote. Progress on a terminal, one summary
line otherwise. Exit status 0 when every blob the locks name is where it should be, 1 when
some could not be moved (each named, with why and what to do), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fetchproxy.cli.options import (
    DEFAULT_LOCK,
    Parser,
    UsageError,
    add_remote,
    add_store,
    chosen_remote,
    default_lock,
    existing_store,
)
from fetchproxy.lock.config import config_path_for, load_config
from fetchproxy.store.remote_url import RemoteURL

NO_REMOTE = (
    "no remote store: give --remote s3://BUCKET/PREFIX, set $FETCHPROXY_REMOTE, or put "
    'remote = "s3://BUCKET/PREFIX" under [store] in fetchproxy.toml beside the lock'
)


def add_lock_list(parser: argparse.ArgumentParser, *, verb: str) -> None:
    """``--lock PATH...``: the locks whose blobs a command moves (repeatable)."""
    parser.add_argument(
        "--lock",
        type=Path,
        action="extend",
        nargs="+",
        default=None,
        metavar="PATH",
        help=f"{verb} the blobs this lock names (repeatable; default: $FETCHPROXY_LOCK or "
        f"./{DEFAULT_LOCK})",
    )


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    verb = words[1]
    add_lock_list(parser, verb=verb)
    add_store(parser)
    add_remote(parser, negatable=False)


def locks_and_remote(args: argparse.Namespace) -> tuple[list[Path], RemoteURL]:
    """The locks given (or the default one) and the remote the command uses."""
    locks: list[Path] = args.lock or [default_lock()]
    remote = chosen_remote(args, *(load_config(config_path_for(lock)) for lock in locks))
    if remote is None:
        raise UsageError(NO_REMOTE)
    return locks, remote


def run(args: argparse.Namespace) -> int:
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.run.outcome import ExitStatus  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415
    from fetchproxy.store.remote import RemoteStore  # noqa: PLC0415
    from fetchproxy.sync.progress import ProgressLine, summary_text  # noqa: PLC0415
    from fetchproxy.sync.remote import LockBlobs, LockBlobsError, pull_blobs, push_blobs  # noqa: PLC0415

    push = args.words[1] == "push"
    lock_paths, url = locks_and_remote(args)
    blobs = LockBlobs.of((path, load_lock(path)) for path in lock_paths)
    store = existing_store(args.store, why="to push from") if push else open_store(args.store)
    remote = RemoteStore(url)
    progress = ProgressLine("push" if push else "pull")
    try:
        if push:
            report = push_blobs(remote, store, blobs, on_progress=progress)
        else:
            report = pull_blobs(remote, store, blobs, on_progress=progress)
    except LockBlobsError as exc:
        print(f"fetchproxy: error: {exc}", file=sys.stderr)
        return ExitStatus.INCOMPLETE
    present = (
        f"{len(report.present)} {'already there' if push else 'in the store already'}"
        if report.present
        else ""
    )
    print(
        summary_text(
            "pushed" if push else "pulled",
            moved=len(report.moved),
            bytes_moved=report.bytes_moved,
            seconds=report.seconds,
            where=f"{'to' if push else 'from'} {url}",
            present=present,
        )
    )
    return ExitStatus.OK

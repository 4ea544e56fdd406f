"""``fetchproxy store gc`` and ``fetchproxy store verify``.

Exit status: ``store verify`` 0 when every blob is intact, 1 when any is not; ``store gc`` 0.
Both need the store to exist: a mistyped ``--store`` is an error, never an empty store.
``store gc --remote`` collects the remote store's garbage instead of the local store's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.cli.options import (
    CONFIGURED,
    Parser,
    UsageError,
    add_remote,
    add_store,
    chosen_remote,
    duration,
    existing_store,
)

if TYPE_CHECKING:
    from fetchproxy.digest import Digest

REMOTE_GC_HELP = (
    "collect the garbage of the remote store instead of the local one: the one named here "
    "(s3://BUCKET/PREFIX), else $FETCHPROXY_REMOTE or fetchproxy.toml's [store] remote; with "
    "delete rights only (docs/remote-store.md, 'Garbage collection')"
)


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    if words[1] == "gc":
        parser.description = (
            "Remove every blob none of the --keep-lock locks (nor their running records' "
            "journals) refers to, and temp files, once older than the grace period. Safe while "
            "records run; see docs/reviewing-locks.md."
        )
        parser.add_argument(
            "--keep-lock",
            type=Path,
            action="extend",
            nargs="+",
            required=True,
            metavar="PATH",
            help="keep the blobs this lock refers to (repeatable; at least one)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would go, remove nothing"
        )
        parser.add_argument(
            "--grace",
            type=duration,
            default=None,
            metavar="DURATION",
            help="keep anything written more recently than this: seconds, or 30m, 2h, 7d "
            "(default 1h; with --remote 7d)",
        )
        add_remote(parser, bare=REMOTE_GC_HELP, negatable=False)
    else:
        parser.add_argument(
            "--repair",
            action="store_true",
            help="move corrupt blobs aside into STORE/corrupt/ so the next record fetches them "
            "again",
        )
    add_store(parser)


def run(args: argparse.Namespace) -> int:
    from fetchproxy.review import gc, storeverify  # noqa: PLC0415

    if args.words[1] == "gc":
        keep = gc.referenced_digests(args.keep_lock)  # before anything else: bad locks stop gc
        if args.remote is not None:
            return _remote_gc(args, keep)
        store = existing_store(args.store, why="to collect garbage in")
        grace = gc.DEFAULT_GRACE if args.grace is None else args.grace
        report = gc.collect_garbage(
            store, keep, grace=grace, dry_run=args.dry_run, locks=len(args.keep_lock)
        )
        sys.stdout.write(gc.render_gc(report))
        return 0
    store = existing_store(args.store, why="to verify")
    result = storeverify.verify_store(store, repair=args.repair)
    sys.stdout.write(storeverify.render_verify(result))
    return 0 if result.clean else 1


def _remote_gc(args: argparse.Namespace, keep: frozenset[Digest]) -> int:
    from fetchproxy.lock.config import config_path_for, load_config  # noqa: PLC0415
    from fetchproxy.review.gc import duration_text  # noqa: PLC0415
    from fetchproxy.store.remote import RemoteStore  # noqa: PLC0415
    from fetchproxy.sync import remotegc  # noqa: PLC0415

    if args.remote is CONFIGURED:
        args.remote = None
        configs = [load_config(config_path_for(lock)) for lock in args.keep_lock]
        url = chosen_remote(args, *configs)
        if url is None:
            raise UsageError(
                "store gc --remote: no remote store is configured; name it: --remote "
                "s3://BUCKET/PREFIX (or set $FETCHPROXY_REMOTE)"
            )
    else:
        url = args.remote
    grace = remotegc.DEFAULT_REMOTE_GRACE if args.grace is None else args.grace
    report = remotegc.collect_remote_garbage(
        RemoteStore(url), keep, grace=grace, dry_run=args.dry_run, locks=len(args.keep_lock)
    )
    sys.stdout.write(remotegc.render_remote_gc(report, duration=duration_text(grace)))
    return 0

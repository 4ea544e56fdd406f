"""``fetchproxy store fetch``: fill the store from the origins, each body checked against the lock.

Exit status: 0 when the store holds every blob the lock names; 1 when an entry drifted (CONTENT
DRIFT: the origin now answers something else; never put in the store), could not be fetched,
or cannot be fetched again (a request with a body); 2 for bad input. With a remote store
(``--remote``, ``$FETCHPROXY_REMOTE``, ``[store] remote``), what the store then holds of the
lock is pushed there too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.cli.build import ALLOW_HELP, UPSTREAM_CA_HELP, origin_pattern
from fetchproxy.cli.options import (
    Parser,
    add_lock,
    add_remote,
    add_store,
    chosen_remote,
    upstream_ca,
)

if TYPE_CHECKING:
    from fetchproxy.lock.model import Lock
    from fetchproxy.store import Store
    from fetchproxy.store.remote_url import RemoteURL


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    add_lock(parser)
    add_store(parser)
    add_remote(parser)
    parser.add_argument(
        "--upstream-ca",
        type=upstream_ca,
        action="append",
        default=[],
        metavar="PATH",
        help=UPSTREAM_CA_HELP,
    )
    parser.add_argument(
        "--allow-origin",
        type=origin_pattern,
        action="append",
        default=[],
        metavar="PATTERN",
        help=ALLOW_HELP.partition(". A pattern naming")[0],
    )
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=8,
        metavar="N",
        help="fetch this many bodies at once (default 8)",
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from fetchproxy.cli import version  # noqa: PLC0415
    from fetchproxy.lock.config import config_path_for, load_config  # noqa: PLC0415
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.record.origins import OriginPolicy  # noqa: PLC0415
    from fetchproxy.run.outcome import ExitStatus  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415
    from fetchproxy.sync import refetch  # noqa: PLC0415
    from fetchproxy.sync.progress import ProgressLine  # noqa: PLC0415
    from fetchproxy.sync.upstream import OriginClient, upstream_context  # noqa: PLC0415

    config = load_config(config_path_for(args.lock))
    policy = OriginPolicy.of((*config.allow, *args.allow_origin), guard_host=False)
    remote = chosen_remote(args, config)
    lock = load_lock(args.lock)
    store = open_store(args.store)
    store.check_writable()
    plan = refetch.plan_refetch(lock, has=store.contains, policy=policy)
    client = OriginClient(upstream_context(args.upstream_ca), connections=args.jobs)
    try:
        report = refetch.refetch(
            plan,
            store,
            client,
            concurrency=args.jobs,
            on_progress=ProgressLine("fetch"),
            user_agent=f"fetchproxy/{version()} (store fetch)",
        )
    finally:
        client.close()
    sys.stdout.write(refetch.render_refetch(report, lock=str(args.lock)))
    status: int = ExitStatus.OK if report.complete else ExitStatus.INCOMPLETE
    if remote is not None:
        status = max(status, _push(remote, store, args.lock, lock))
    return status


def _push(remote: RemoteURL, store: Store, lock_path: Path, lock: Lock) -> int:
    """Push what the store holds of the lock to the remote; the exit status of that part."""
    from fetchproxy.lock.model import Lock  # noqa: PLC0415
    from fetchproxy.run.outcome import ExitStatus  # noqa: PLC0415
    from fetchproxy.store.remote import RemoteStore  # noqa: PLC0415
    from fetchproxy.sync.progress import ProgressLine, summary_text  # noqa: PLC0415
    from fetchproxy.sync.remote import LockBlobs, LockBlobsError, push_blobs  # noqa: PLC0415

    held = Lock.from_sorted(f for f in lock.fetches if store.contains(f.digest))
    blobs = LockBlobs.of([(lock_path, held)])
    try:
        report = push_blobs(RemoteStore(remote), store, blobs, on_progress=ProgressLine("push"))
    except LockBlobsError as exc:
        print(f"fetchproxy: error: {exc}", file=sys.stderr)
        return ExitStatus.INCOMPLETE
    present = f"{len(report.present)} already there" if report.present else ""
    print(
        summary_text(
            "pushed",
            moved=len(report.moved),
            bytes_moved=report.bytes_moved,
            seconds=report.seconds,
            where=f"to {remote}",
            present=present,
        )
    )
    return ExitStatus.OK

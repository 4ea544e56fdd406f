"""What each ``fetchproxy`` subcommand does, given its parsed arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fetchproxy.ca import ensure_persistent_ca, persistent_ca_dir
from fetchproxy.errors import FetchproxyError
from fetchproxy.files import write_error
from fetchproxy.lock.config import config_path_for, load_config
from fetchproxy.lock.file import load_lock, normal_form_problems, write_lock
from fetchproxy.lock.journal import journal_mode, journal_path, read_journal
from fetchproxy.lock.model import Lock
from fetchproxy.store import CorruptBlobError, MissingBlobError, open_store
from fetchproxy.text import counted


class UsageError(FetchproxyError, ValueError):
    """The command line asks for something that cannot be done."""


def serve(args: argparse.Namespace) -> int:
    from fetchproxy.run.serve import serve as run_serve  # noqa: PLC0415
    from fetchproxy.run.settings import ProxySettings  # noqa: PLC0415

    confdir = persistent_ca_dir()
    ensure_persistent_ca(confdir)
    host, port = args.listen
    settings = ProxySettings(
        mode=args.mode,
        lock=args.lock,
        store=open_store(args.store),
        confdir=confdir,
        listen_host=host,
        listen_port=port,
        log=args.log,
        upstream_ca=tuple(args.upstream_ca),
        keep=args.keep,
        exact=args.exact,
        http2=args.http2,
        secret_params=load_config(config_path_for(args.lock)).secret_params,
    )
    return run_serve(settings)


def run(args: argparse.Namespace) -> int:
    from fetchproxy.run.build import RunRequest, run_build  # noqa: PLC0415 -- mitmproxy loads slowly

    argv = list(args.build)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError(
            f"`fetchproxy {args.command}` needs a build: fetchproxy {args.command} -- BUILD..."
        )
    request = RunRequest(
        mode=args.command,
        argv=argv,
        lock=args.lock,
        store=open_store(args.store),
        log=args.log,
        upstream_ca=tuple(getattr(args, "upstream_ca", ())),
        sandbox="none" if args.no_sandbox else args.sandbox,
        keep=getattr(args, "keep", False),
        exact=getattr(args, "exact", False),
        http2=args.http2,
        secret_params=load_config(config_path_for(args.lock)).secret_params,
    )
    return run_build(request)


def ca_path() -> int:
    print(ensure_persistent_ca(persistent_ca_dir()))
    return 0


def lock_verify(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    store = open_store(args.store)
    if lock.fetches and not store.root.is_dir():
        raise FetchproxyError(
            f"{store.root}: no store here — point --store or FETCHPROXY_STORE at the store "
            f"{args.lock} was recorded into"
        )
    secret_params = load_config(config_path_for(args.lock)).secret_params
    not_normal = normal_form_problems(lock, str(args.lock), secret_params=secret_params)
    for problem in not_normal:
        print(f"fetchproxy: {problem}", file=sys.stderr)
    problems = 0
    intact = set()
    for digest in sorted(lock.digests()):
        try:
            store.verify(digest)
        except MissingBlobError as exc:
            problems += 1
            print(f"fetchproxy: missing: {digest} (no file {exc.path})", file=sys.stderr)
        except CorruptBlobError as exc:
            problems += 1
            print(f"fetchproxy: corrupt: {exc.path}: {exc.problem}", file=sys.stderr)
        else:
            intact.add(digest)
    wrong_size = 0
    for fetch in lock.fetches:
        if fetch.digest in intact and (actual := store.size_of(fetch.digest)) != fetch.size:
            wrong_size += 1
            print(
                f"fetchproxy: {args.lock}: {fetch.method} {fetch.url} has size = {fetch.size}, "
                f"but its blob {fetch.digest} is {actual} bytes: replay answers it 502 "
                "store-error — record it again rather than edit the lock",
                file=sys.stderr,
            )
    blobs = len(lock.digests())
    if problems or wrong_size or not_normal:
        found = [f"{problems} of {blobs} bodies missing or corrupt"] if problems else []
        if wrong_size:
            found.append(f"{counted(wrong_size, 'entry', 'entries')} with the wrong size")
        if not_normal:
            found.append(f"{counted(len(not_normal), 'url', 'urls')} not in normal form")
        print(f"fetchproxy: {args.lock}: {'; '.join(found)}", file=sys.stderr)
        if problems:
            print(
                "fetchproxy: record again to fetch missing bodies; "
                "`fetchproxy store verify --repair` first moves corrupt ones aside",
                file=sys.stderr,
            )
        return 1
    print(f"fetchproxy: {args.lock}: {len(lock)} fetches, {blobs} bodies, all intact")
    return 0


def lock_fmt(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock, require_sorted=False)
    changed = _write(args.lock, lock)
    print(f"fetchproxy: {args.lock}: {'rewritten' if changed else 'already canonical'}")
    return 0


def _write(path: Path, lock: Lock) -> bool:
    """``write_lock``, its failure a clear error (the old lock, if any, stays as it was)."""
    try:
        return write_lock(path, lock)
    except OSError as exc:
        raise write_error(path, exc, "the lock is unchanged") from None


def lock_recover(args: argparse.Namespace) -> int:
    journal = journal_path(args.lock)
    if not journal.exists():
        raise FetchproxyError(f"{journal}: no journal to recover (nothing was interrupted)")
    latest = {fetch.key: fetch for fetch in read_journal(journal)}
    if not latest:
        journal.unlink()
        print(
            f"fetchproxy: {args.lock}: {journal} held no fetch; removed it, the lock is unchanged"
        )
        return 0
    mode = journal_mode(journal)
    keep = mode != "fresh"  # an older journal does not say: adding to the lock drops nothing
    base = load_lock(args.lock) if keep and args.lock.exists() else Lock()
    kept = len(base)
    lock = base.updated(latest.values())
    _write(args.lock, lock)
    journal.unlink()
    why = "--keep" if mode == "keep" else "an older journal: nothing is removed"
    onto = f" on top of its {counted(kept, 'entry', 'entries')} ({why})" if keep else ""
    print(
        f"fetchproxy: {args.lock}: recovered {counted(len(latest), 'fetch', 'fetches')} "
        f"from {journal}{onto}"
    )
    return 0

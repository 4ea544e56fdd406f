"""The command line of ``fetchproxy lock diff``, ``lock show``, ``store gc`` and ``store verify``.

A thin skin: parse, call :mod:`fetchproxy.lockdiff`, :mod:`fetchproxy.gc` or
:mod:`fetchproxy.storeverify`, print, return the exit status. ``fetchproxy.cli`` adds the
parsers with :func:`add_lock_diff_parser` and :func:`add_store_parser` and dispatches to the
``run_*`` functions.

Exit status: ``lock diff`` 0 when the locks hold the same entries, 1 when they differ (like
``diff``), always 0 as git's external diff (git stops at any other status); ``store verify`` 0
when every blob is intact, 1 when any is not; ``store gc`` and ``lock show`` 0. Bad input
raises a :class:`~fetchproxy.errors.FetchproxyError` naming the file and line: status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fetchproxy.errors import FetchproxyError

if TYPE_CHECKING:
    from fetchproxy.lock.file import LockFileError
    from fetchproxy.lock.model import Lock

# The command modules are imported when a command runs, so that `fetchproxy --help` stays fast.

DEFAULT_LOCK = "fetchproxy.lock.toml"
DEFAULT_LOCK_HELP = f"the lock file (default: $FETCHPROXY_LOCK or ./{DEFAULT_LOCK})"
_GIT_ARGS = (7, 9)  # path old-file old-hex old-mode new-file new-hex new-mode [new-path info]
_NULL_HEX_RE = re.compile(r"0+|\.")
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

Subparsers = argparse._SubParsersAction  # argparse names no public type for it
ParserT = TypeVar("ParserT", bound=argparse.ArgumentParser)


def add_command(commands: Subparsers[ParserT], name: str, summary: str) -> ParserT:
    """A subcommand whose one-line summary is both its entry in the parent's list and the
    description in its own ``--help``."""
    return commands.add_parser(name, help=summary, description=summary)


class LockStoreUsageError(FetchproxyError, ValueError):
    """The command line of one of these commands asks for something that cannot be done."""


class NoStoreError(FetchproxyError, FileNotFoundError):
    """``--store`` (or the default) names no store."""


# --------------------------------------------------------------------------------------- parsers


def add_lock_diff_parser(lock_subparsers: Subparsers[ParserT]) -> None:
    """Add ``lock diff`` and ``lock show`` to the ``lock`` command's subparsers."""
    diff = lock_subparsers.add_parser(
        "diff",
        help="what changed between two locks: added, removed, content drift, new hosts",
        description="Compare two locks entry by entry, grouped by host. Exit status 0 when "
        "they hold the same entries, 1 when they differ, 2 when one is not a valid lock.",
    )
    diff.add_argument("old", metavar="OLD", help="the lock before")
    diff.add_argument("new", metavar="NEW", help="the lock after")
    diff.add_argument("git_args", nargs="*", help=argparse.SUPPRESS)
    diff.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )
    diff.add_argument(
        "--git-external-diff",
        action="store_true",
        help="be git's external diff: take git's 7 arguments (PATH OLD-FILE OLD-HEX OLD-MODE "
        "NEW-FILE NEW-HEX NEW-MODE), always exit 0; see docs/reviewing-locks.md",
    )
    show = add_command(
        lock_subparsers, "show", "list a lock one entry per line (for review and git's textconv)"
    )
    show.add_argument(
        "lock",
        nargs="?",
        type=Path,
        default=default_lock(),
        metavar="LOCK",
        help=DEFAULT_LOCK_HELP,
    )
    show.add_argument(
        "--git-textconv",
        action="store_true",
        help="be git's textconv: a file that is not a valid lock is shown as it is, exit 0",
    )


def default_lock() -> Path:
    """``$FETCHPROXY_LOCK``, else ``fetchproxy.lock.toml`` in the current directory."""
    return Path(os.environ.get("FETCHPROXY_LOCK", DEFAULT_LOCK))


def add_store_parser(subparsers: Subparsers[ParserT]) -> None:
    """Add ``store gc`` and ``store verify`` to the top-level subparsers."""
    store = add_command(subparsers, "store", "work with the content-addressed store")
    commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    gc = commands.add_parser(
        "gc",
        help="remove the blobs no given lock uses, and stale temp files",
        description="Remove every blob none of the --keep-lock locks (nor their running "
        "records' journals) refers to, and temp files, once older than the grace period. "
        "Safe while records run; see docs/reviewing-locks.md.",
    )
    gc.add_argument(
        "--keep-lock",
        type=Path,
        action="extend",
        nargs="+",
        required=True,
        metavar="PATH",
        help="keep the blobs this lock refers to (repeatable; at least one)",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    gc.add_argument(
        "--grace",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="keep anything written more recently than this: seconds, or 30m, 2h, 7d (default 1h)",
    )
    add_store_option(gc)
    verify = add_command(
        commands, "verify", "rehash every blob in the store; report (and --repair) corrupt ones"
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="move corrupt blobs aside into STORE/corrupt/ so the next record fetches them again",
    )
    add_store_option(verify)


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """``--store DIR``, for every command that reads or writes the store."""
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help="the content-addressed store (default: $FETCHPROXY_STORE, else "
        "$XDG_CACHE_HOME/fetchproxy/store, else ~/.cache/fetchproxy/store)",
    )


def parse_duration(text: str) -> float:
    """``3600``, ``90s``, ``30m``, ``2h``, ``7d`` → seconds."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds (3600) or a number with s, m, h or d (2h)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


# ------------------------------------------------------------------------------------- lock diff


def run_lock_diff(args: argparse.Namespace) -> int:
    """``fetchproxy lock diff``: 0 identical, 1 different (0 as git's external diff)."""
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.review.diff import diff_locks, render_json, render_text  # noqa: PLC0415

    if args.git_external_diff:
        return _git_external_diff([args.old, args.new, *args.git_args], args.format)
    if args.git_args:
        raise LockStoreUsageError(
            f"`fetchproxy lock diff` compares two locks, got {2 + len(args.git_args)} "
            "arguments: fetchproxy lock diff OLD NEW"
        )
    old = load_lock(Path(args.old), require_sorted=False)
    new = load_lock(Path(args.new), require_sorted=False)
    diff = diff_locks(old, new)
    render = render_json if args.format == "json" else render_text
    sys.stdout.write(render(diff, old_label=args.old, new_label=args.new))
    if diff.identical and args.format == "text":
        sys.stdout.write(_layout_note(args.old, args.new))
    return 0 if diff.identical else 1


def _git_external_diff(argv: list[str], output_format: str) -> int:
    from fetchproxy.lock.file import LockFileError  # noqa: PLC0415
    from fetchproxy.review.diff import diff_locks, render_json, render_text  # noqa: PLC0415

    if len(argv) not in _GIT_ARGS:
        raise LockStoreUsageError(
            f"--git-external-diff takes git's 7 (or 9) arguments, got {len(argv)}: set it up "
            "with `git config diff.fetchproxy.command 'fetchproxy lock diff "
            "--git-external-diff'` (docs/reviewing-locks.md)"
        )
    path, old_file, old_hex, _old_mode, new_file, new_hex = argv[:6]
    new_path = argv[7] if len(argv) == 9 else path
    old_label = _git_label(path, old_file, old_hex)
    new_label = _git_label(new_path, new_file, new_hex)
    try:
        old = _load_labelled(Path(old_file), old_label)
        new = _load_labelled(Path(new_file), new_label)
    except LockFileError as exc:
        sys.stdout.write(_text_diff(exc, (old_file, old_label), (new_file, new_label)))
        return 0
    diff = diff_locks(old, new)
    render = render_json if output_format == "json" else render_text
    sys.stdout.write(render(diff, old_label=old_label, new_label=new_label))
    if diff.identical and output_format == "text":
        sys.stdout.write(_layout_note(old_file, new_file))
    return 0


def _layout_note(old_file: str, new_file: str) -> str:
    """A line saying that two files with the same entries differ in layout, if they do."""
    try:
        same = Path(old_file).read_bytes() == Path(new_file).read_bytes()
    except OSError:
        same = True
    if same:
        return ""
    return (
        "note: the files hold the same entries but differ in layout; "
        "`fetchproxy lock fmt` rewrites a lock in canonical form\n"
    )


def _git_label(path: str, file: str, hex_digest: str) -> str:
    """``PATH@1a2b3c4``, ``PATH (working tree)`` or ``/dev/null``, for what git passed."""
    if file == os.devnull:
        return os.devnull
    if _NULL_HEX_RE.fullmatch(hex_digest):
        return f"{path} (working tree)"
    return f"{path}@{hex_digest[:7]}"


def _load_labelled(path: Path, label: str) -> Lock:
    """Read a lock from ``path`` (a temp file of git's); errors name ``label`` instead."""
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.lock.model import Lock  # noqa: PLC0415

    if str(path) == os.devnull:
        return Lock()
    return load_lock(path, require_sorted=False, name=label)


def _text_diff(error: LockFileError, old: tuple[str, str], new: tuple[str, str]) -> str:
    """A line diff, for when one side is not a valid lock: the reviewer still sees the change."""
    header = (
        f"fetchproxy lock diff: {old[1]} → {new[1]}\n"
        f"fetchproxy lock diff: not a valid lock: {error}\n"
        "fetchproxy lock diff: showing the text diff instead\n"
    )
    sides: list[list[str]] = []
    for file, _label in (old, new):
        if file == os.devnull:
            sides.append([])
            continue
        try:
            raw = Path(file).read_bytes()
        except OSError:
            raw = b""
        sides.append(raw.decode(errors="replace").splitlines(keepends=True))
    body = difflib.unified_diff(sides[0], sides[1], fromfile=old[1], tofile=new[1])
    return header + "".join(line if line.endswith("\n") else line + "\n" for line in body)


def run_lock_show(args: argparse.Namespace) -> int:
    """``fetchproxy lock show``: the lock, one entry per line."""
    from fetchproxy.lock.file import LockFileError, load_lock  # noqa: PLC0415
    from fetchproxy.review.diff import render_listing  # noqa: PLC0415

    path: Path = args.lock
    try:
        lock = load_lock(path, require_sorted=False)
    except LockFileError as exc:
        if not args.git_textconv:
            raise
        sys.stdout.write(f"# fetchproxy: not a valid lock: {exc}\n")
        with contextlib.suppress(OSError):  # the error line above already says why
            sys.stdout.write(path.read_bytes().decode(errors="replace"))
        return 0
    sys.stdout.write(render_listing(lock))
    return 0


# ----------------------------------------------------------------------------------------- store


def run_store(args: argparse.Namespace) -> int:
    """``fetchproxy store gc`` (0) and ``store verify`` (0 intact, 1 corrupt)."""
    from fetchproxy.review import gc  # noqa: PLC0415
    from fetchproxy.review import verify as storeverify  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415

    store = open_store(args.store)
    root = store.root
    if args.store_command == "gc":
        keep = gc.referenced_digests(args.keep_lock)  # before anything else: bad locks stop gc
        if not root.is_dir():
            sys.stdout.write(f"fetchproxy store gc: {root}: no store here, nothing to collect\n")
            return 0
        grace = gc.DEFAULT_GRACE if args.grace is None else args.grace
        report = gc.collect_garbage(
            store, keep, grace=grace, dry_run=args.dry_run, locks=len(args.keep_lock)
        )
        sys.stdout.write(gc.render_gc(report))
        return 0
    if args.store_command == "verify":
        if not root.is_dir():
            raise NoStoreError(
                f"{root}: no store here — pass --store DIR or set FETCHPROXY_STORE "
                "(a store is created by the first `fetchproxy record`)"
            )
        result = storeverify.verify_store(store, repair=args.repair)
        sys.stdout.write(storeverify.render_verify(result))
        return 0 if result.clean else 1
    raise AssertionError(f"unhandled store command {args.store_command}")

"""``fetchproxy lock …``: diff, show, verify, fmt and recover.

Exit status: ``lock diff`` 0 when the locks hold the same entries, 1 when they differ (like
``diff``), always 0 as git's external diff (git stops at any other status); ``lock verify`` 0
when every body is intact, 1 otherwise; the others 0. Bad input is status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.cli.options import (
    LOCK_HELP,
    Parser,
    UsageError,
    add_lock,
    add_store,
    default_lock,
    existing_store,
)
from fetchproxy.text import printable

if TYPE_CHECKING:
    from fetchproxy.lock.file import LockFileError
    from fetchproxy.lock.model import Lock
    from fetchproxy.review.diff import LockDiff

_GIT_ARGS = (7, 9)  # path old-file old-hex old-mode new-file new-hex new-mode [new-path info]
_NULL_HEX_RE = re.compile(r"0+|\.")


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    name = words[1]
    if name == "diff":
        parser.description = (
            "Compare two locks entry by entry, grouped by host. Exit status 0 when they hold "
            "the same entries, 1 when they differ, 2 when one is not a valid lock."
        )
        parser.add_argument("old", metavar="OLD", help="the lock before")
        parser.add_argument("new", metavar="NEW", help="the lock after")
        parser.add_argument("git_args", nargs="*", help=argparse.SUPPRESS)
        parser.add_argument(
            "--format",
            choices=("text", "json", "markdown"),
            default="text",
            help="output format (default text); markdown is a pull-request comment: summary, new "
            "hosts and content drift first, in package words where it can",
        )
        parser.add_argument(
            "--packages",
            action="store_true",
            help="say it in package words where the URLs name packages (npm acc-right 1.0.0 → "
            "1.1.0); a package whose version stayed but whose bytes changed is CONTENT DRIFT",
        )
        parser.add_argument(
            "--git-external-diff",
            action="store_true",
            help="be git's external diff: take git's 7 arguments (PATH OLD-FILE OLD-HEX "
            "OLD-MODE NEW-FILE NEW-HEX NEW-MODE), always exit 0; see docs/reviewing-locks.md",
        )
    elif name == "show":
        parser.add_argument(
            "lock", nargs="?", type=Path, default=default_lock(), metavar="LOCK", help=LOCK_HELP
        )
        parser.add_argument(
            "--git-textconv",
            action="store_true",
            help="be git's textconv: a file that is not a valid lock is shown as it is, exit 0",
        )
    else:
        add_lock(parser)
        if name == "verify":
            add_store(parser)


def run(args: argparse.Namespace) -> int:
    return {
        "diff": _diff,
        "show": _show,
        "verify": _verify,
        "fmt": _fmt,
        "recover": _recover,
    }[args.words[1]](args)


def _verify(args: argparse.Namespace) -> int:
    from fetchproxy.lock.config import config_path_for, load_config  # noqa: PLC0415
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.review.lockverify import render_report, verify_lock  # noqa: PLC0415
    from fetchproxy.store import open_store  # noqa: PLC0415

    lock = load_lock(args.lock)
    why = f"{args.lock} was recorded into"
    store = existing_store(args.store, why=why) if lock.fetches else open_store(args.store)
    rules = load_config(config_path_for(args.lock)).rules
    report = verify_lock(lock, str(args.lock), store, rules)
    out, err = render_report(report)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return 0 if report.clean else 1


def _fmt(args: argparse.Namespace) -> int:
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415

    lock = load_lock(args.lock, require_sorted=False)
    changed = _write(args.lock, lock)
    print(f"fetchproxy: {args.lock}: {'rewritten' if changed else 'already canonical'}")
    return 0


def _write(path: Path, lock: Lock) -> bool:
    """``write_lock``, its failure a clear error (the old lock, if any, stays as it was)."""
    from fetchproxy.files import write_error  # noqa: PLC0415
    from fetchproxy.lock.file import write_lock  # noqa: PLC0415

    try:
        return write_lock(path, lock)
    except OSError as exc:
        raise write_error(path, exc, "the lock is unchanged") from None


def _recover(args: argparse.Namespace) -> int:
    from fetchproxy.record.book import recover, recovered_text  # noqa: PLC0415

    print(recovered_text(args.lock, recover(args.lock)))
    return 0


def _diff(args: argparse.Namespace) -> int:
    """``fetchproxy lock diff``: 0 identical, 1 different (0 as git's external diff)."""
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.review.diff import diff_locks  # noqa: PLC0415

    if args.git_external_diff:
        return _git_external_diff([args.old, args.new, *args.git_args], args)
    if args.git_args:
        raise UsageError(
            f"`fetchproxy lock diff` compares two locks, got {2 + len(args.git_args)} "
            "arguments: fetchproxy lock diff OLD NEW"
        )
    old = load_lock(Path(args.old), require_sorted=False)
    new = load_lock(Path(args.new), require_sorted=False)
    diff = diff_locks(old, new)
    sys.stdout.write(_report(args, diff, old, new, old_label=args.old, new_label=args.new))
    if diff.identical and args.format == "text":
        sys.stdout.write(_layout_note(args.old, args.new))
    return 0 if diff.identical else 1


def _report(
    args: argparse.Namespace,
    diff: LockDiff,
    old: Lock,
    new: Lock,
    *,
    old_label: str,
    new_label: str,
) -> str:
    """``diff`` (of ``old`` and ``new``) in the ``--format`` (and ``--packages``) asked for."""
    from fetchproxy.review.diff import (  # noqa: PLC0415
        json_document,
        render_document,
        render_json,
        render_text,
    )

    labels = {"old_label": old_label, "new_label": new_label}
    if args.format == "markdown" or args.packages:
        from fetchproxy.review.markdown import render_markdown  # noqa: PLC0415
        from fetchproxy.review.packages import (  # noqa: PLC0415
            package_diff,
            packages_json,
            render_packages_text,
        )

        packages = package_diff(diff, old, new)
        if args.format == "markdown":
            return render_markdown(diff, packages, **labels)
        if args.format == "json":
            document = json_document(diff, **labels)
            document["packages"] = packages_json(packages)
            return render_document(document)
        return render_packages_text(diff, packages, **labels)
    return (render_json if args.format == "json" else render_text)(diff, **labels)


def _git_external_diff(argv: list[str], args: argparse.Namespace) -> int:
    from fetchproxy.lock.file import LockFileError  # noqa: PLC0415
    from fetchproxy.review.diff import diff_locks  # noqa: PLC0415

    if len(argv) not in _GIT_ARGS:
        raise UsageError(
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
    sys.stdout.write(_report(args, diff, old, new, old_label=old_label, new_label=new_label))
    if diff.identical and args.format == "text":
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
    lines = (line if line.endswith("\n") else line + "\n" for line in body)
    return printable(header + "".join(lines))


def _show(args: argparse.Namespace) -> int:
    """``fetchproxy lock show``: the lock, one entry per line."""
    from fetchproxy.lock.file import LockFileError, load_lock  # noqa: PLC0415
    from fetchproxy.review.diff import render_listing  # noqa: PLC0415

    path: Path = args.lock
    try:
        lock = load_lock(path, require_sorted=False)
    except LockFileError as exc:
        if not args.git_textconv:
            raise
        sys.stdout.write(f"# fetchproxy: not a valid lock: {printable(str(exc), lines=False)}\n")
        with contextlib.suppress(OSError):  # the error line above already says why
            sys.stdout.write(printable(path.read_bytes().decode(errors="replace")))
        return 0
    sys.stdout.write(render_listing(lock))
    return 0

"""``fetchproxy lock merge BASE OURS THEIRS``: git's merge driver for locks.

The merged lock replaces OURS, as git expects of a driver
(``merge.fetchproxy.driver = fetchproxy lock merge %O %A %B``). Exit status 0 when the merge is
clean; 1 when requests conflict, which are then written between markers the loader names
(:mod:`fetchproxy.review.merge`); 2 when a file is not a valid lock, and then OURS is left as it
was (git still marks the file as conflicted: merge it by hand).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fetchproxy.cli.options import Parser

if TYPE_CHECKING:
    from fetchproxy.lock.model import Lock

DESCRIPTION = (
    "Merge two locks that both changed since BASE, entry by entry, and write the result over "
    "OURS: the union of both sides' entries, without what one side removed and the other left "
    "unchanged. One request with different answers on the two sides is a conflict, written "
    "between git's markers so that no command reads the lock until it is resolved. Exit "
    "status 0 when clean, 1 with conflicts, 2 when a file is not a valid lock (OURS unchanged). "
    "As git's merge driver: `git config merge.fetchproxy.driver 'fetchproxy lock merge %O %A "
    "%B'` and `*.lock.toml merge=fetchproxy` in .gitattributes (docs/reviewing-locks.md)."
)


def add_arguments(parser: Parser, words: tuple[str, ...]) -> None:
    del words
    parser.description = DESCRIPTION
    parser.add_argument("base", type=Path, metavar="BASE", help="the common ancestor (git's %%O)")
    parser.add_argument(
        "ours", type=Path, metavar="OURS", help="our side, replaced by the result (git's %%A)"
    )
    parser.add_argument("theirs", type=Path, metavar="THEIRS", help="their side (git's %%B)")


def _load(path: Path, *, may_be_empty: bool) -> Lock:
    from fetchproxy.lock.file import load_lock  # noqa: PLC0415
    from fetchproxy.lock.model import Lock  # noqa: PLC0415

    if may_be_empty:
        try:
            if not path.read_bytes().strip():  # git's %O for a file both sides added
                return Lock()
        except OSError:
            pass  # load_lock says why
    return load_lock(path, require_sorted=False)


def run(args: argparse.Namespace) -> int:
    from fetchproxy.files import write_atomic, write_error  # noqa: PLC0415
    from fetchproxy.review.diff import request_text  # noqa: PLC0415
    from fetchproxy.review.merge import merge_locks, render_merge  # noqa: PLC0415
    from fetchproxy.run.outcome import ExitStatus  # noqa: PLC0415
    from fetchproxy.text import counted  # noqa: PLC0415

    base = _load(args.base, may_be_empty=True)
    ours = _load(args.ours, may_be_empty=False)
    theirs = _load(args.theirs, may_be_empty=False)
    merge = merge_locks(base, ours, theirs)
    try:
        write_atomic(args.ours, render_merge(merge).encode())
    except OSError as exc:
        raise write_error(args.ours, exc, f"{args.ours} is unchanged") from None
    summary = (
        f"fetchproxy lock merge: {args.ours}: {counted(len(merge.lock), 'entry', 'entries')} "
        f"merged ({merge.from_ours} from ours, {merge.from_theirs} from theirs, "
        f"{merge.removed} removed)"
    )
    if merge.clean:
        print(summary, file=sys.stderr)
        return ExitStatus.OK
    lines = [summary + f"; {counted(len(merge.conflicts), 'conflict', 'conflicts')}:"]
    for conflict in merge.conflicts:
        sides = ", ".join(
            f"{label} {'removes it' if entry is None else entry.digest}"
            for label, entry in (("ours", conflict.ours), ("theirs", conflict.theirs))
        )
        lines.append(f"fetchproxy lock merge:   {request_text(conflict.entry)}: {sides}")
    lines.append(
        "fetchproxy lock merge: each conflict is written between markers: keep one side's "
        "[[fetch]] table, delete the markers, then run `fetchproxy lock fmt`"
    )
    print("\n".join(lines), file=sys.stderr)
    return ExitStatus.INCOMPLETE
